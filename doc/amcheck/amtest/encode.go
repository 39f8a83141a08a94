package amtest

import (
	"crypto/sha256"
	"encoding/binary"
	"sort"

	"github.com/tandemhq/tandem/doc/amcheck"
)

// Op is one operation to encode. Value is the value's type and Raw its
// bytes in automerge's value encoding (see String, Int, Counter).
type Op struct {
	Obj      amcheck.OpID
	MapKey   bool
	Key      string
	Elem     amcheck.OpID
	Insert   bool
	Action   amcheck.Action
	Value    amcheck.ValueType
	Raw      []byte
	MarkName string // a mark's start has a name; its end has none
	Expand   bool
	Preds    []amcheck.OpID
}

// Change is a change to encode. Actors[0] is its author; op IDs name
// actors by index into Actors.
type Change struct {
	Deps    [][32]byte
	Actors  [][]byte
	Seq     uint64
	StartOp uint64
	Time    int64
	Message string
	Ops     []Op
	// LoneRuns writes a lone value as a run of one, which automerge's
	// decoder reads but its encoder never writes: a document saved with
	// such a change does not load again.
	LoneRuns bool
	// KeepActors lists Actors as given, used or not.
	KeepActors bool
	// Quirks automerge's decoder reads but its encoder never writes:
	// ListEmptyColumns lists the expand column when it is all false and
	// the value column when it is empty; KeepDepOrder keeps Deps in the
	// order given; Extra is appended after the columns.
	ListEmptyColumns bool
	KeepDepOrder     bool
	Extra            []byte
}

// compactActors keeps the actors the ops name, the author first and the
// others in byte order, and renumbers the ops' IDs.
func compactActors(c Change) Change {
	used := map[uint32]bool{}
	note := func(id amcheck.OpID) {
		if id.Counter != 0 && id.Actor != 0 {
			used[id.Actor] = true
		}
	}
	for _, op := range c.Ops {
		note(op.Obj)
		if !op.MapKey {
			note(op.Elem)
		}
		for _, p := range op.Preds {
			note(p)
		}
	}
	var others []uint32
	for a := range used {
		if int(a) < len(c.Actors) {
			others = append(others, a)
		}
	}
	sort.Slice(others, func(i, j int) bool { return string(c.Actors[others[i]]) < string(c.Actors[others[j]]) })
	renum := map[uint32]uint32{0: 0}
	actors := [][]byte{c.Actors[0]}
	for i, a := range others {
		renum[a] = uint32(i + 1)
		actors = append(actors, c.Actors[a])
	}
	re := func(id amcheck.OpID) amcheck.OpID {
		if id.Counter == 0 {
			return id
		}
		if n, ok := renum[id.Actor]; ok {
			id.Actor = n
		}
		return id
	}
	ops := make([]Op, len(c.Ops))
	for i, op := range c.Ops {
		op.Obj, op.Elem = re(op.Obj), re(op.Elem)
		op.Preds = append([]amcheck.OpID(nil), op.Preds...)
		for j := range op.Preds {
			op.Preds[j] = re(op.Preds[j])
		}
		ops[i] = op
	}
	c.Actors, c.Ops = actors, ops
	return c
}

// String is a string value.
func String(s string) (amcheck.ValueType, []byte) { return amcheck.ValueString, []byte(s) }

// Int is a signed integer value.
func Int(v int64) (amcheck.ValueType, []byte) {
	return amcheck.ValueInt, amcheck.AppendSleb(nil, v)
}

// Counter is a counter value.
func Counter(v int64) (amcheck.ValueType, []byte) {
	return amcheck.ValueCounter, amcheck.AppendSleb(nil, v)
}

// Column specs: column id << 4 | type.
const (
	specObjActor  = 0x01
	specObjCtr    = 0x02
	specKeyActor  = 0x11
	specKeyCtr    = 0x13
	specKeyStr    = 0x15
	specInsert    = 0x34
	specAction    = 0x42
	specValMeta   = 0x56
	specValRaw    = 0x57
	specPredNum   = 0x70
	specPredActor = 0x71
	specPredCtr   = 0x73
	specExpand    = 0x94
	specMarkName  = 0xa5
)

// col collects one column's values; nil is null.
type col struct {
	vals []any
}

func (c *col) add(v any) { c.vals = append(c.vals, v) }

func same(a, b any) bool {
	switch x := a.(type) {
	case nil:
		return b == nil
	case uint64:
		y, ok := b.(uint64)
		return ok && x == y
	case int64:
		y, ok := b.(int64)
		return ok && x == y
	case string:
		y, ok := b.(string)
		return ok && x == y
	}
	return false
}

// rle encodes the column as automerge does: runs of two or more equal
// values as runs, nulls as null runs, other values in literal runs; a
// column of nulls only as nothing.
func (c *col) rle(loneRuns bool) []byte {
	type run struct {
		v any
		n int
	}
	var runs []run
	for _, v := range c.vals {
		if n := len(runs); n > 0 && same(runs[n-1].v, v) {
			runs[n-1].n++
			continue
		}
		runs = append(runs, run{v, 1})
	}
	if len(runs) == 1 && runs[0].v == nil {
		return nil
	}
	var out []byte
	value := func(v any) {
		switch v := v.(type) {
		case uint64:
			out = binary.AppendUvarint(out, v)
		case int64:
			out = amcheck.AppendSleb(out, v)
		case string:
			out = binary.AppendUvarint(out, uint64(len(v)))
			out = append(out, v...)
		}
	}
	for i := 0; i < len(runs); {
		r := runs[i]
		switch {
		case r.v == nil:
			out = amcheck.AppendSleb(out, 0)
			out = binary.AppendUvarint(out, uint64(r.n))
			i++
		case r.n > 1 || loneRuns:
			out = amcheck.AppendSleb(out, int64(r.n))
			value(r.v)
			i++
		default:
			j := i
			for j < len(runs) && runs[j].v != nil && runs[j].n == 1 {
				j++
			}
			out = amcheck.AppendSleb(out, -int64(j-i))
			for _, l := range runs[i:j] {
				value(l.v)
			}
			i = j
		}
	}
	return out
}

func bools(vs []bool) []byte {
	var out []byte
	cur, n := false, uint64(0)
	for _, v := range vs {
		if v != cur {
			out = binary.AppendUvarint(out, n)
			cur, n = v, 0
		}
		n++
	}
	if n > 0 {
		out = binary.AppendUvarint(out, n)
	}
	return out
}

// Encode returns the change as a change chunk, and its hash. Actors that
// no op names are left out and the others listed as automerge lists
// them, unless KeepActors is set.
func Encode(c Change) ([]byte, [32]byte) {
	if !c.KeepActors {
		c = compactActors(c)
	}
	var objA, objC, keyA, keyC, keyS, act, meta, pnum, predA, predC, mark col
	var ins, exp []bool
	var raw []byte
	var keyAbs, predAbs int64
	hasExpand := false
	for _, op := range c.Ops {
		if op.Obj.Counter == 0 {
			objA.add(nil)
			objC.add(nil)
		} else {
			objA.add(uint64(op.Obj.Actor))
			objC.add(uint64(op.Obj.Counter))
		}
		switch {
		case op.MapKey:
			keyA.add(nil)
			keyC.add(nil)
			keyS.add(op.Key)
		case op.Elem.Counter == 0:
			keyA.add(nil)
			keyC.add(int64(0) - keyAbs)
			keyAbs = 0
			keyS.add(nil)
		default:
			keyA.add(uint64(op.Elem.Actor))
			keyC.add(int64(op.Elem.Counter) - keyAbs)
			keyAbs = int64(op.Elem.Counter)
			keyS.add(nil)
		}
		ins = append(ins, op.Insert)
		act.add(uint64(op.Action))
		meta.add(uint64(len(op.Raw))<<4 | uint64(op.Value))
		raw = append(raw, op.Raw...)
		pnum.add(uint64(len(op.Preds)))
		for _, p := range op.Preds {
			predA.add(uint64(p.Actor))
			predC.add(int64(p.Counter) - predAbs)
			predAbs = int64(p.Counter)
		}
		if op.MarkName != "" {
			mark.add(op.MarkName)
		} else {
			mark.add(nil)
		}
		exp = append(exp, op.Expand)
		hasExpand = hasExpand || op.Expand
	}
	cols := map[uint32][]byte{
		specObjActor: objA.rle(c.LoneRuns), specObjCtr: objC.rle(c.LoneRuns),
		specKeyActor: keyA.rle(c.LoneRuns), specKeyCtr: keyC.rle(c.LoneRuns), specKeyStr: keyS.rle(c.LoneRuns),
		specInsert: bools(ins), specAction: act.rle(c.LoneRuns),
		specValMeta: meta.rle(c.LoneRuns), specValRaw: raw,
		specPredNum: pnum.rle(c.LoneRuns), specPredActor: predA.rle(c.LoneRuns), specPredCtr: predC.rle(c.LoneRuns),
		specMarkName: mark.rle(c.LoneRuns),
	}
	if hasExpand || c.ListEmptyColumns {
		cols[specExpand] = bools(exp)
	}
	// Columns that are all null are left out, as automerge does.
	allNull := func(c *col) bool {
		for _, v := range c.vals {
			if v != nil {
				return false
			}
		}
		return true
	}
	for spec, cc := range map[uint32]*col{specObjActor: &objA, specObjCtr: &objC, specKeyActor: &keyA, specKeyCtr: &keyC, specKeyStr: &keyS, specMarkName: &mark} {
		if allNull(cc) {
			delete(cols, spec)
		}
	}
	specs := make([]uint32, 0, len(cols))
	for s, d := range cols {
		if len(d) > 0 || (c.ListEmptyColumns && s == specValRaw) {
			specs = append(specs, s)
		}
	}
	sort.Slice(specs, func(i, j int) bool { return specs[i] < specs[j] })

	var b []byte
	b = binary.AppendUvarint(b, uint64(len(c.Deps)))
	deps := append([][32]byte(nil), c.Deps...)
	if !c.KeepDepOrder {
		sort.Slice(deps, func(i, j int) bool { return string(deps[i][:]) < string(deps[j][:]) })
	}
	for _, d := range deps {
		b = append(b, d[:]...)
	}
	b = binary.AppendUvarint(b, uint64(len(c.Actors[0])))
	b = append(b, c.Actors[0]...)
	b = binary.AppendUvarint(b, c.Seq)
	b = binary.AppendUvarint(b, c.StartOp)
	b = amcheck.AppendSleb(b, c.Time)
	b = binary.AppendUvarint(b, uint64(len(c.Message)))
	b = append(b, c.Message...)
	b = binary.AppendUvarint(b, uint64(len(c.Actors)-1))
	for _, a := range c.Actors[1:] {
		b = binary.AppendUvarint(b, uint64(len(a)))
		b = append(b, a...)
	}
	b = binary.AppendUvarint(b, uint64(len(specs)))
	for _, s := range specs {
		b = binary.AppendUvarint(b, uint64(s))
		b = binary.AppendUvarint(b, uint64(len(cols[s])))
	}
	for _, s := range specs {
		b = append(b, cols[s]...)
	}
	b = append(b, c.Extra...)

	h := sha256.New()
	h.Write([]byte{1})
	h.Write(binary.AppendUvarint(nil, uint64(len(b))))
	h.Write(b)
	var hash [32]byte
	h.Sum(hash[:0])
	chunk := []byte{0x85, 0x6f, 0x4a, 0x83}
	chunk = append(chunk, hash[:4]...)
	chunk = append(chunk, 1)
	chunk = binary.AppendUvarint(chunk, uint64(len(b)))
	chunk = append(chunk, b...)
	return chunk, hash
}
