package guard

import (
	"bytes"
	"slices"
	"testing"

	"github.com/automerge/automerge-go"
	"github.com/tandemhq/tandem/doc/amcheck"
	"github.com/tandemhq/tandem/doc/amcheck/amtest"
)

// The reference check against automerge, differentially: the fuzzer builds
// a change op by op on top of an editing session stock automerge made,
// naming objects, elements, predecessors and marks that are there, in the
// wrong place, or nowhere. Whatever the guard admits must apply in
// automerge-go and survive a save and load there, and stock automerge must
// apply it, save and load it, and sync it to a fresh peer and to one at
// the session's end. The corpus in testdata/fuzz/FuzzReferenceCheck is
// replayed by every test run.

// fuzzBase is what the fuzzer builds on: the session's changes, their
// ops, and what they hold.
type fuzzBase struct {
	changes [][]byte
	saved   []byte // automerge-go's save of them
	heads   [][32]byte
	actors  [][]byte
	seqs    map[string]uint64
	maxOp   uint64
	objs    []fuzzObj
	elems   []fuzzRef // inserted elements (marks included)
	puts    []fuzzRef // overwritable ops
}

type fuzzObj struct {
	id   amcheck.OpID // actor: index into fuzzBase.actors
	kind amcheck.Action
}

type fuzzRef struct {
	id, obj amcheck.OpID
	key     string
	elem    amcheck.OpID
	mapKey  bool
	counter bool
	mark    bool
}

func newFuzzBase(t testing.TB) *fuzzBase {
	o := amtest.StockAutomerge(t)
	b := &fuzzBase{changes: o.Trace(t, 7, 60), seqs: map[string]uint64{}}
	b.objs = append(b.objs, fuzzObj{kind: amcheck.MakeMap}) // the root
	actorIndex := map[string]uint32{}
	index := func(a []byte) uint32 {
		if i, ok := actorIndex[string(a)]; ok {
			return i
		}
		actorIndex[string(a)] = uint32(len(b.actors))
		b.actors = append(b.actors, a)
		return uint32(len(b.actors) - 1)
	}
	d := automerge.New()
	for _, raw := range b.changes {
		c, err := amcheck.ParseSyncChange(raw, amcheck.Limits{ListOps: true})
		if err != nil {
			t.Fatal(err)
		}
		g := func(id amcheck.OpID) amcheck.OpID {
			if id.Counter == 0 {
				return id
			}
			return amcheck.OpID{Counter: id.Counter, Actor: index(c.Actors[id.Actor])}
		}
		self := index(c.Actor)
		b.seqs[string(c.Actor)] = c.Seq
		for i, op := range c.OpList {
			oid := amcheck.OpID{Counter: uint32(c.StartOp) + uint32(i), Actor: self}
			b.maxOp = max(b.maxOp, uint64(oid.Counter))
			if op.Action.Makes() {
				b.objs = append(b.objs, fuzzObj{id: oid, kind: op.Action})
			}
			r := fuzzRef{id: oid, obj: g(op.Obj), key: op.Key, elem: g(op.Elem), mapKey: op.MapKey,
				counter: op.Value == amcheck.ValueCounter, mark: op.Action == amcheck.Mark}
			switch {
			case op.Insert:
				b.elems = append(b.elems, r)
			case op.Action != amcheck.Delete && op.Action != amcheck.Increment:
				b.puts = append(b.puts, r)
			}
		}
		if err := d.LoadIncremental(raw); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range d.Heads() {
		b.heads = append(b.heads, h)
	}
	b.saved = d.Save()
	return b
}

// fuzzChange builds a change from the fuzzer's bytes.
func (b *fuzzBase) fuzzChange(in []byte) []byte {
	next := func() int {
		if len(in) == 0 {
			return 0
		}
		v := int(in[0])
		in = in[1:]
		return v
	}
	author := []byte{0xf0, 0x0d}
	actors := append([][]byte{author}, b.actors...)
	ref := func(id amcheck.OpID) amcheck.OpID { // base actor index → the change's
		if id.Counter == 0 {
			return id
		}
		return amcheck.OpID{Counter: id.Counter, Actor: id.Actor + 1}
	}
	start := uint32(b.maxOp + 1)
	var ops []amtest.Op
	var mine []fuzzRef // this change's elements and puts so far
	pickObj := func() fuzzObj { return b.objs[next()%len(b.objs)] }
	pickElem := func(obj amcheck.OpID, wrong bool) amcheck.OpID {
		var c []amcheck.OpID
		for _, e := range append(append([]fuzzRef(nil), b.elems...), mine...) {
			if (e.obj == obj) != wrong && (e.id.Actor < uint32(len(b.actors)) || e.id.Actor == 1<<31) {
				c = append(c, e.id)
			}
		}
		if len(c) == 0 || next()%8 == 0 {
			return amcheck.OpID{Counter: uint32(next() % 300), Actor: uint32(next() % (len(b.actors) + 1))}
		}
		return c[next()%len(c)]
	}
	conv := func(id amcheck.OpID) amcheck.OpID {
		if id.Actor == 1<<31 {
			return amcheck.OpID{Counter: id.Counter, Actor: 0}
		}
		return ref(id)
	}
	predsFor := func(obj amcheck.OpID, key string, elem amcheck.OpID, mapKey bool) []amcheck.OpID {
		var c []amcheck.OpID
		for _, p := range append(append([]fuzzRef(nil), b.puts...), append(b.elems, mine...)...) {
			match := p.obj == obj && ((mapKey && p.mapKey && p.key == key) || (!mapKey && !p.mapKey && (p.id == elem || p.elem == elem)))
			if match || next()%16 == 0 {
				c = append(c, p.id)
			}
		}
		var out []amcheck.OpID
		for range next() % 3 {
			if len(c) > 0 {
				out = append(out, conv(c[next()%len(c)]))
			}
		}
		return out
	}
	n := 1 + next()%6
	for i := 0; i < n; i++ {
		obj := pickObj()
		oid := ref(obj.id)
		mapKey := obj.kind == amcheck.MakeMap || obj.kind == amcheck.MakeTable
		if next()%10 == 0 {
			mapKey = !mapKey
		}
		op := amtest.Op{Obj: oid, MapKey: mapKey}
		key := []string{"text", "m", "l", "c", "k1", "n", "cnt"}[next()%7]
		var elem amcheck.OpID
		if mapKey {
			op.Key = key
		} else {
			elem = pickElem(obj.id, next()%8 == 0)
			op.Elem = conv(elem)
		}
		self := amcheck.OpID{Counter: start + uint32(len(ops)), Actor: 1 << 31}
		switch next() % 8 {
		case 0, 1: // insert a value
			op.Insert = !mapKey
			op.Action = amcheck.Put
			op.Value, op.Raw = amtest.String("z")
			if next()%4 == 0 {
				op.Value, op.Raw = amtest.Counter(1)
			}
		case 2: // delete
			op.Action = amcheck.Delete
		case 3: // increment
			op.Action, op.Value, op.Raw = amcheck.Increment, amcheck.ValueInt, []byte{1}
		case 4: // a mark, or half of one
			op.Insert, op.Action, op.MarkName, op.Value = true, amcheck.Mark, "bold", amcheck.ValueTrue
			if next()%4 != 0 {
				end := op
				end.MarkName, end.Value = "", amcheck.ValueNull
				end.Elem = conv(pickElem(obj.id, false))
				ops = append(ops, op)
				mine = append(mine, fuzzRef{id: self, obj: obj.id, mark: true})
				self.Counter++
				op = end
			} else if next()%2 == 0 {
				op.MarkName, op.Value = "", amcheck.ValueNull
			}
		case 5: // make an object
			op.Insert = !mapKey
			op.Action = []amcheck.Action{amcheck.MakeMap, amcheck.MakeList, amcheck.MakeText, amcheck.MakeTable}[next()%4]
		default: // overwrite
			op.Action = amcheck.Put
			op.Value, op.Raw = amtest.Int(int64(next()))
		}
		if next()%6 == 0 {
			op.Insert = !op.Insert
		}
		if !op.Insert || next()%8 == 0 {
			op.Preds = predsFor(obj.id, key, elem, mapKey)
		}
		ops = append(ops, op)
		r := fuzzRef{id: self, obj: obj.id, key: key, elem: elem, mapKey: mapKey, counter: op.Value == amcheck.ValueCounter}
		if op.Insert || (op.Action != amcheck.Delete && op.Action != amcheck.Increment) {
			mine = append(mine, r)
		}
	}
	deps := b.heads
	if next()%8 == 0 && len(deps) > 1 {
		deps = deps[:1]
	}
	seq := uint64(1)
	if next()%8 == 0 { // an existing actor's next change
		a := b.actors[next()%len(b.actors)]
		actors[0], seq = a, b.seqs[string(a)]+1
		actors = append(actors[:1:1], b.actors...)
	}
	c, _ := amtest.Encode(amtest.Change{Deps: deps, Actors: actors, Seq: seq, StartOp: uint64(start), Ops: ops})
	return c
}

func FuzzReferenceCheck(f *testing.F) {
	base := newFuzzBase(f)
	o := amtest.StockAutomerge(f)
	for _, seed := range [][]byte{
		{}, {0, 0, 0, 0, 0}, {3, 1, 0, 2, 1, 1}, {5, 4, 2, 4, 1, 9, 9}, {2, 0, 1, 1, 3, 0, 0, 1, 2},
		{1, 7, 1, 2, 4, 0, 1, 1, 8}, {4, 2, 3, 1, 6, 6, 6}, {6, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		forged := base.fuzzChange(in)
		var l Ledger
		for _, c := range base.changes {
			p, err := amcheck.ParseSyncChange(c, amcheck.Limits{ListOps: true})
			if err != nil {
				t.Fatal(err)
			}
			l.Record([]Change{{Change: p}})
		}
		if err := admitOne(t, &l, forged); err != nil {
			return // refused: nothing to check
		}
		d, err := automerge.Load(base.saved)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.LoadIncremental(forged); err != nil {
			t.Fatalf("admitted, but automerge-go refuses it: %v", err)
		}
		again, err := automerge.Load(d.Save())
		if err != nil {
			t.Fatalf("admitted, but automerge-go's save does not load: %v", err)
		}
		if !sameHeads(again.Heads(), d.Heads()) {
			t.Fatal("admitted, but automerge-go's save loads with other heads")
		}
		if ok, msg := o.Applies(t, base.changes, [][]byte{forged}); !ok {
			t.Fatalf("admitted, but stock automerge fails: %s", msg)
		}
	})
}

var _ = bytes.Equal

func sameHeads(a, b []automerge.ChangeHash) bool {
	return slices.Equal(a, b)
}
