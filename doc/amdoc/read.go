package amdoc

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/tandemhq/tandem/doc/amcheck"
)

// Reading changes for a save. The changes were checked when they were
// taken (amcheck, with its Canonical rule), so they are read here in one
// pass, straight into the op set, without amcheck's checks or its list of
// ops: a save reads every change of a document each time it is made.
// What does not read as a plain change chunk (a compressed one, say) is
// read with amcheck instead (read in save.go).

var errNotPlain = errors.New("not a plain change chunk")

// cursor reads a chunk's header fields.
type cursor struct {
	b   []byte
	bad bool
}

func (c *cursor) uvarint() uint64 {
	v, n := binary.Uvarint(c.b)
	if n <= 0 {
		c.bad = true
		c.b = nil
		return 0
	}
	c.b = c.b[n:]
	return v
}

func (c *cursor) varint() int64 {
	v, n := sleb(c.b)
	if n <= 0 {
		c.bad = true
		c.b = nil
		return 0
	}
	c.b = c.b[n:]
	return v
}

func (c *cursor) take(n uint64) []byte {
	if n > uint64(len(c.b)) {
		c.bad = true
		c.b = nil
		return nil
	}
	out := c.b[:n:n]
	c.b = c.b[n:]
	return out
}

// sleb reads a signed LEB128 number.
func sleb(b []byte) (int64, int) {
	var v int64
	var shift uint
	for i, c := range b {
		if shift >= 64 {
			return 0, -1
		}
		v |= int64(c&0x7f) << shift
		shift += 7
		if c&0x80 == 0 {
			if shift < 64 && c&0x40 != 0 {
				v |= -1 << shift
			}
			return v, i + 1
		}
	}
	return 0, 0
}

// rleReader reads a run-length column one value at a time.
type rleReader struct {
	b     []byte
	typ   uint32
	left  uint64 // values left in the current run
	mode  int8   // 1: a run of cur; -1: a literal run; 0: nulls
	cur   uint64
	str   []byte
	delta int64 // a delta column's running value
	bad   bool
}

func (r *rleReader) value() {
	switch r.typ {
	case typeDelta:
		v, n := sleb(r.b)
		if n <= 0 {
			r.bad = true
			return
		}
		r.cur, r.b = uint64(v), r.b[n:]
	case typeString:
		l, n := binary.Uvarint(r.b)
		if n <= 0 || l > uint64(len(r.b)-n) {
			r.bad = true
			return
		}
		r.str, r.b = r.b[n:n+int(l)], r.b[n+int(l):]
	default:
		v, n := binary.Uvarint(r.b)
		if n <= 0 {
			r.bad = true
			return
		}
		r.cur, r.b = v, r.b[n:]
	}
}

// next reads the next value: null, or a number (a delta column's running
// value), or a string (in r.str, valid until the next call).
func (r *rleReader) next() (v uint64, null bool) {
	if r.left == 0 {
		if len(r.b) == 0 {
			return 0, true // past the column's end: nulls, as a column left out
		}
		n, k := sleb(r.b)
		if k <= 0 {
			r.bad = true
			return 0, true
		}
		r.b = r.b[k:]
		switch {
		case n > 0:
			r.mode, r.left = 1, uint64(n)
			r.value()
		case n < 0:
			r.mode, r.left = -1, uint64(-n)
		default:
			c, k := binary.Uvarint(r.b)
			if k <= 0 {
				r.bad = true
				return 0, true
			}
			r.b = r.b[k:]
			r.mode, r.left = 0, c
		}
	}
	r.left--
	switch r.mode {
	case 0:
		return 0, true
	case -1:
		r.value()
	}
	if r.typ == typeDelta {
		r.delta += int64(r.cur)
		return uint64(r.delta), false
	}
	return r.cur, false
}

// rowsOf counts the rows of a run-length column of unsigned numbers.
func rowsOf(b []byte) uint64 {
	var rows uint64
	for len(b) > 0 {
		n, k := sleb(b)
		if k <= 0 {
			return rows
		}
		b = b[k:]
		count := uint64(n)
		if n < 0 {
			count = uint64(-n)
		}
		vals := count
		switch {
		case n > 0:
			vals = 1
		case n == 0:
			c, k := binary.Uvarint(b)
			if k <= 0 {
				return rows
			}
			b, count, vals = b[k:], c, 0
		}
		for range vals {
			_, k := binary.Uvarint(b)
			if k <= 0 {
				return rows
			}
			b = b[k:]
		}
		rows += count
	}
	return rows
}

// sumOf returns the sum of an unsigned integer column's values (nulls
// count nothing), saturating at 2^62: what a count column (successors,
// dependencies) says is to come, read in time linear in its bytes, a run
// of repeats as one product.
func sumOf(b []byte) uint64 {
	const most = 1 << 62
	var sum uint64
	add := func(v, times uint64) {
		if v != 0 && times > (most-sum)/v {
			sum = most
			return
		}
		sum += v * times
	}
	for len(b) > 0 && sum < most {
		n, k := sleb(b)
		if k <= 0 {
			return sum
		}
		b = b[k:]
		switch {
		case n == 0: // nulls
			_, k := binary.Uvarint(b)
			if k <= 0 {
				return sum
			}
			b = b[k:]
		case n > 0: // one value, n times
			v, k := binary.Uvarint(b)
			if k <= 0 {
				return sum
			}
			b = b[k:]
			add(v, uint64(n))
		default: // -n values
			for range -n {
				v, k := binary.Uvarint(b)
				if k <= 0 {
					return sum
				}
				b = b[k:]
				add(v, 1)
			}
		}
	}
	return sum
}

// boolReader reads a boolean column: alternating run lengths, false
// first.
type boolReader struct {
	b     []byte
	left  uint64
	cur   bool
	began bool
	bad   bool
}

func (r *boolReader) next() bool {
	for r.left == 0 {
		if len(r.b) == 0 {
			return false
		}
		n, k := binary.Uvarint(r.b)
		if k <= 0 {
			r.bad = true
			return false
		}
		r.b = r.b[k:]
		if r.began {
			r.cur = !r.cur
		}
		r.left, r.began = n, true
	}
	r.left--
	return r.cur
}

// Slots of a change's run-length op columns while it is read.
const (
	slotObjActor = iota
	slotObjCtr
	slotKeyActor
	slotKeyCtr
	slotKeyStr
	slotAction
	slotValMeta
	slotPredNum
	slotPredActor
	slotPredCtr
	slotMarkName
	nSlots
)

// Op columns of a change.
const (
	chObjActor  = 0x01
	chObjCtr    = 0x02
	chKeyActor  = 0x11
	chKeyCtr    = 0x13
	chKeyStr    = 0x15
	chInsert    = 0x34
	chAction    = 0x42
	chValMeta   = 0x56
	chValRaw    = 0x57
	chPredNum   = 0x70
	chPredActor = 0x71
	chPredCtr   = 0x73
	chExpand    = 0x94
	chMarkName  = 0xa5
)

// addPlain reads one plain change chunk at the start of b into the op
// set, and returns its length; errNotPlain if it is not one.
func (s *opSet) addPlain(b []byte) (int, error) {
	if len(b) < 9 || b[0] != 0x85 || b[1] != 0x6f || b[2] != 0x4a || b[3] != 0x83 || b[8] != 1 {
		return 0, errNotPlain
	}
	hc := cursor{b: b[9:]}
	n := hc.uvarint()
	if hc.bad || n > uint64(len(hc.b)) {
		return 0, errNotPlain
	}
	whole := 9 + (len(b) - 9 - len(hc.b)) + int(n)
	hash := sha256.Sum256(b[8:whole])
	if _, dup := s.byHash[hash]; dup {
		return whole, nil
	}
	c := cursor{b: hc.b[:n]}
	ch := change{base: len(s.ops), hash: hash}
	nd := c.uvarint()
	if nd > uint64(len(c.b))/32 {
		return 0, errNotPlain
	}
	for range nd {
		var d [32]byte
		copy(d[:], c.take(32))
		i, ok := s.byHash[d]
		if !ok {
			return 0, fmt.Errorf("change %x depends on %x, which comes after it or not at all", hash[:4], d[:4])
		}
		ch.deps = append(ch.deps, i)
	}
	author := c.take(c.uvarint())
	if c.bad || len(author) == 0 {
		return 0, errNotPlain
	}
	ch.actor = s.actor(author)
	ch.seq = c.uvarint()
	ch.startOp = c.uvarint()
	ch.time = c.varint()
	ch.message = string(c.take(c.uvarint()))
	actors := []uint32{ch.actor}
	na := c.uvarint()
	if c.bad || na > uint64(len(c.b)) {
		return 0, errNotPlain
	}
	for range na {
		a := c.take(c.uvarint())
		if c.bad {
			return 0, errNotPlain
		}
		actors = append(actors, s.actor(a))
	}
	var cols [nSlots]rleReader
	for i, typ := range [nSlots]uint32{typeUint, typeUint, typeUint, typeDelta, typeString, typeUint, typeUint, typeUint, typeUint, typeDelta, typeString} {
		cols[i].typ = typ
	}
	var bools [2]boolReader
	var raw []byte
	type meta struct{ spec, n uint64 }
	var metas [16]meta
	nm := c.uvarint()
	if nm > uint64(len(metas)) {
		return 0, errNotPlain
	}
	for i := range nm {
		metas[i] = meta{c.uvarint(), c.uvarint()}
	}
	for _, m := range metas[:nm] {
		data := c.take(m.n)
		switch m.spec {
		case chObjActor:
			cols[slotObjActor].b = data
		case chObjCtr:
			cols[slotObjCtr].b = data
		case chKeyActor:
			cols[slotKeyActor].b = data
		case chKeyCtr:
			cols[slotKeyCtr].b = data
		case chKeyStr:
			cols[slotKeyStr].b = data
		case chAction:
			cols[slotAction].b = data
		case chValMeta:
			cols[slotValMeta].b = data
		case chPredNum:
			cols[slotPredNum].b = data
		case chPredActor:
			cols[slotPredActor].b = data
		case chPredCtr:
			cols[slotPredCtr].b = data
		case chMarkName:
			cols[slotMarkName].b = data
		case chInsert:
			bools[0] = boolReader{b: data}
		case chExpand:
			bools[1] = boolReader{b: data}
		case chValRaw:
			raw = data
		default:
			return 0, errNotPlain
		}
	}
	if c.bad || hc.bad {
		return 0, errNotPlain
	}
	ch.extra = c.b
	if len(ch.extra) == 0 {
		ch.extra = nil
	}
	objA, objC, keyA, keyC, keyS := &cols[slotObjActor], &cols[slotObjCtr], &cols[slotKeyActor], &cols[slotKeyCtr], &cols[slotKeyStr]
	act, vmeta, pnum, predA, predC, mark := &cols[slotAction], &cols[slotValMeta], &cols[slotPredNum], &cols[slotPredActor], &cols[slotPredCtr], &cols[slotMarkName]

	global := func(actor uint64, null bool) (uint32, bool) {
		if null || actor >= uint64(len(actors)) {
			return 0, false
		}
		return actors[actor], true
	}
	if uint64(len(s.values))+uint64(len(raw)) >= 1<<32 {
		return 0, fmt.Errorf("the document's values pass 4 GiB")
	}
	valBase := uint64(len(s.values))
	s.values = append(s.values, raw...)
	valAt := valBase
	rows := rowsOf(act.b)
	if rows > uint64(max(s.budget-len(s.ops), 0)) {
		return 0, errTooManyOps
	}
	s.ops = slices.Grow(s.ops, int(rows))
	s.predAt = slices.Grow(s.predAt, int(rows))
	ctr := ch.startOp
	for len(act.b) > 0 || act.left > 0 {
		a, null := act.next()
		if null || act.bad {
			return 0, fmt.Errorf("change %x: its actions do not read", hash[:4])
		}
		if ctr >= 1<<32 {
			return 0, fmt.Errorf("change %x: op counters past automerge's limit", hash[:4])
		}
		if a > 0xff {
			return 0, fmt.Errorf("change %x: action %d", hash[:4], a)
		}
		o := op{id: id{ctr: uint32(ctr), actor: ch.actor}, action: amcheck.Action(a)}
		if oa, null := objA.next(); !null {
			oc, _ := objC.next()
			g, ok := global(oa, false)
			if !ok {
				return 0, fmt.Errorf("change %x: an object by an actor it does not list", hash[:4])
			}
			o.obj = id{ctr: uint32(oc), actor: g}
		} else {
			objC.next()
		}
		ka, kaNull := keyA.next()
		kc, kcNull := keyC.next()
		_, ksNull := keyS.next()
		switch {
		case !ksNull:
			o.key = s.key(string(keyS.str))
		case !kaNull:
			g, ok := global(ka, false)
			if !ok {
				return 0, fmt.Errorf("change %x: an element by an actor it does not list", hash[:4])
			}
			o.elem = id{ctr: uint32(kc), actor: g}
		case kcNull || kc != 0:
			return 0, fmt.Errorf("change %x: an op with no key", hash[:4])
		}
		if bools[0].next() {
			o.flags |= flagInsert
		}
		if bools[1].next() {
			o.flags |= flagExpand
		}
		m, _ := vmeta.next()
		o.vtype = amcheck.ValueType(m & 0xf)
		o.valLen = uint32(m >> 4)
		o.valAt = uint32(valAt)
		valAt += m >> 4
		if valAt > uint64(len(s.values)) {
			return 0, fmt.Errorf("change %x: its values pass its raw column", hash[:4])
		}
		if _, null := mark.next(); !null {
			o.mark = s.key(string(mark.str))
		}
		np, _ := pnum.next()
		if np > uint64(max(s.budget-len(s.preds), 0)) {
			return 0, errTooManyOps // predecessors are bounded as ops are
		}
		for range np {
			pa, null := predA.next()
			pc, _ := predC.next()
			g, ok := global(pa, null)
			if !ok {
				return 0, fmt.Errorf("change %x: a predecessor by an actor it does not list", hash[:4])
			}
			s.preds = append(s.preds, id{ctr: uint32(pc), actor: g})
		}
		s.predAt = append(s.predAt, uint32(len(s.preds)))
		s.ops = append(s.ops, o)
		ctr++
	}
	for _, r := range cols {
		if r.bad {
			return 0, fmt.Errorf("change %x: a column does not read", hash[:4])
		}
	}
	if bools[0].bad || bools[1].bad {
		return 0, fmt.Errorf("change %x: a column does not read", hash[:4])
	}
	ch.ops = len(s.ops) - ch.base
	if err := s.commit(ch); err != nil {
		return 0, err
	}
	return whole, nil
}
