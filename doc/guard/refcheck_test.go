package guard

import (
	"encoding/base64"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"

	"github.com/tandemhq/tandem/doc/amcheck"
	"github.com/tandemhq/tandem/doc/amcheck/amtest"
)

// ledgerKnows reports the changes the ledger's index holds, standing in
// for a room's automerge document.
func ledgerKnows(l *Ledger) func(hash []byte) bool {
	return func(h []byte) bool {
		var k [32]byte
		copy(k[:], h)
		_, ok := l.index().change(k)
		return ok
	}
}

// admitOne runs one change through the guard as a client's message would,
// and records it if admitted.
func admitOne(t testing.TB, l *Ledger, change []byte) error {
	t.Helper()
	var lim Limits
	lim.SetDefaults()
	ad, err := l.Admit(lim, [][]byte{change}, ledgerKnows(l))
	if err != nil {
		return err
	}
	l.Queue(ad, "p")
	l.Record(ad.Apply)
	return nil
}

// Every change stock automerge makes in an editing session (text typed and
// deleted, marks set and cleared, counters, maps, lists, nested objects,
// several actors merging) passes the reference check.
func TestStockEditsPassTheReferenceCheck(t *testing.T) {
	o := amtest.StockAutomerge(t)
	seeds := 8
	if testing.Short() {
		seeds = 2
	}
	for seed := 1; seed <= seeds; seed++ {
		var l Ledger
		for i, c := range o.Trace(t, seed, 400) {
			if err := admitOne(t, &l, c); err != nil {
				t.Fatalf("seed %d: change %d refused: %v", seed, i, err)
			}
		}
	}
}

// refBase is a document of one change by actor A:
//
//	1 text = makeText at root "text"; 2 'h', 3 'i' inserted into it;
//	4 m = makeMap at "m"; 5 m.a = 7; 6 c = counter 0 at "c";
//	7 l = makeList at "l"; 8 an element 7 in it.
func refBase() ([]byte, [32]byte) {
	root := amcheck.OpID{}
	cv, craw := amtest.Counter(0)
	v, raw := amtest.Int(7)
	return amtest.Encode(amtest.Change{
		Actors: [][]byte{amtest.ActorA}, Seq: 1, StartOp: 1,
		Ops: []amtest.Op{
			{Obj: root, MapKey: true, Key: "text", Action: amcheck.MakeText},
			amtest.Insert(amtest.ID(1, 0), amtest.ID(0, 0), "h"),
			amtest.Insert(amtest.ID(1, 0), amtest.ID(2, 0), "i"),
			{Obj: root, MapKey: true, Key: "m", Action: amcheck.MakeMap},
			amtest.Put(amtest.ID(4, 0), "a"),
			{Obj: root, MapKey: true, Key: "c", Action: amcheck.Put, Value: cv, Raw: craw},
			{Obj: root, MapKey: true, Key: "l", Action: amcheck.MakeList},
			{Obj: amtest.ID(7, 0), Elem: amtest.ID(0, 0), Insert: true, Action: amcheck.Put, Value: v, Raw: raw},
		},
	})
}

// byB is a change by actor B on refBase: actor index 1 is A.
func byB(dep [32]byte, ops ...amtest.Op) []byte {
	c, _ := amtest.Encode(amtest.Change{Deps: [][32]byte{dep}, Actors: [][]byte{amtest.ActorB, amtest.ActorA}, Seq: 1, StartOp: 9, Ops: ops})
	return c
}

// What a client's change may name is checked against the document before
// it is applied: each forged change below is accepted by automerge-go and
// breaks stock automerge (it throws applying it, or on the document
// after); the guard refuses each, and lets the honest ones through.
func TestForgedReferencesAreRefused(t *testing.T) {
	o := amtest.StockAutomerge(t)
	base, baseHash := refBase()
	if ok, err := o.Applies(t, nil, [][]byte{base}); !ok {
		t.Fatalf("stock automerge refuses the base document: %s", err)
	}
	text, m, list, a := amtest.ID(1, 1), amtest.ID(4, 1), amtest.ID(7, 1), amtest.ID(0, 0)
	markStart := amtest.Op{Obj: text, Elem: amtest.ID(2, 1), Insert: true, Action: amcheck.Mark, MarkName: "bold", Value: amcheck.ValueTrue}
	markEnd := amtest.Op{Obj: text, Elem: amtest.ID(3, 1), Insert: true, Action: amcheck.Mark, Value: amcheck.ValueNull}
	honest := map[string][]byte{
		"an insertion after an element":      byB(baseHash, amtest.Insert(text, amtest.ID(3, 1), "!")),
		"an insertion at the head":           byB(baseHash, amtest.Insert(text, amtest.ID(0, 0), "!")),
		"a paste, each after the one before": byB(baseHash, amtest.Insert(text, amtest.ID(3, 1), "a"), amtest.Insert(text, amtest.ID(9, a.Actor), "b"), amtest.Insert(text, amtest.ID(10, 0), "c")),
		"a deletion":                         byB(baseHash, amtest.Op{Obj: text, Elem: amtest.ID(2, 1), Action: amcheck.Delete, Preds: []amcheck.OpID{amtest.ID(2, 1)}}),
		"an overwrite of a map key":          byB(baseHash, amtest.Put(m, "a", amtest.ID(5, 1))),
		"a new map key":                      byB(baseHash, amtest.Put(m, "b")),
		"an increment":                       byB(baseHash, amtest.Op{Obj: amtest.ID(0, 0), MapKey: true, Key: "c", Action: amcheck.Increment, Value: amcheck.ValueInt, Raw: []byte{1}, Preds: []amcheck.OpID{amtest.ID(6, 1)}}),
		"a mark":                             byB(baseHash, markStart, markEnd),
		"an overwrite of a list element":     byB(baseHash, amtest.Op{Obj: list, Elem: amtest.ID(8, 1), Action: amcheck.Put, Value: amcheck.ValueTrue, Preds: []amcheck.OpID{amtest.ID(8, 1)}}),
	}
	for name, c := range honest {
		if ok, err := o.Applies(t, [][]byte{base}, [][]byte{c}); !ok {
			t.Fatalf("%s: stock automerge refuses it: %s", name, err)
		}
		var l Ledger
		if err := admitOne(t, &l, base); err != nil {
			t.Fatal(err)
		}
		if err := admitOne(t, &l, c); err != nil {
			t.Errorf("%s: refused: %v", name, err)
		}
	}

	forged := map[string][]byte{
		"an object never made":               byB(baseHash, amtest.Put(amtest.ID(99, 1), "x")),
		"a list element that does not exist": byB(baseHash, amtest.Insert(text, amtest.ID(50, 1), "x")),
		"an element of another object":       byB(baseHash, amtest.Insert(text, amtest.ID(8, 1), "x")),
		"a deletion of the head":             byB(baseHash, amtest.Op{Obj: text, Action: amcheck.Delete, Preds: []amcheck.OpID{amtest.ID(2, 1)}}),
		"a missing predecessor":              byB(baseHash, amtest.Put(amtest.ID(0, 0), "m", amtest.ID(77, 1))),
		"a predecessor in another object":    byB(baseHash, amtest.Put(m, "a", amtest.ID(2, 1))),
		"a predecessor at another key":       byB(baseHash, amtest.Put(m, "b", amtest.ID(5, 1))),
		"a deletion of nothing":              byB(baseHash, amtest.Op{Obj: text, Elem: amtest.ID(2, 1), Action: amcheck.Delete}),
		"an increment of a number":           byB(baseHash, amtest.Op{Obj: m, MapKey: true, Key: "a", Action: amcheck.Increment, Value: amcheck.ValueInt, Raw: []byte{1}, Preds: []amcheck.OpID{amtest.ID(5, 1)}}),
		"a lone mark end":                    byB(baseHash, markEnd),
		"a mark's end at the head":           byB(baseHash, markStart, amtest.Op{Obj: text, Insert: true, Action: amcheck.Mark, Value: amcheck.ValueNull}),
		"a mark in a list":                   byB(baseHash, amtest.Op{Obj: list, Elem: amtest.ID(8, 1), Insert: true, Action: amcheck.Mark, MarkName: "bold", Value: amcheck.ValueTrue}, amtest.Op{Obj: list, Elem: amtest.ID(8, 1), Insert: true, Action: amcheck.Mark, Value: amcheck.ValueNull}),
		"an insertion with a predecessor":    byB(baseHash, amtest.Op{Obj: text, Elem: amtest.ID(3, 1), Insert: true, Action: amcheck.Put, Value: amcheck.ValueTrue, Preds: []amcheck.OpID{amtest.ID(3, 1)}}),
		"a column encoded as automerge never encodes it": func() []byte {
			c, _ := amtest.Encode(amtest.Change{Deps: [][32]byte{baseHash}, Actors: [][]byte{amtest.ActorB, amtest.ActorA}, Seq: 1, StartOp: 9,
				Ops: []amtest.Op{amtest.Insert(text, amtest.ID(3, 1), "!"), amtest.Put(m, "z")}, LoneRuns: true})
			return c
		}(),
		"an overwrite of a mark": byB(baseHash, markStart, markEnd, amtest.Op{Obj: text, Elem: amtest.ID(9, 0), Action: amcheck.Put, Value: amcheck.ValueTrue, Preds: []amcheck.OpID{amtest.ID(9, 0)}}),
		// automerge takes these, but a document saved with the second
		// does not load in it (its op counters reach 2^25).
		"ops starting one past the last op of their past": func() []byte {
			c, _ := amtest.Encode(amtest.Change{Deps: [][32]byte{baseHash}, Actors: [][]byte{amtest.ActorB, amtest.ActorA}, Seq: 1, StartOp: 10,
				Ops: []amtest.Op{amtest.Put(m, "z")}})
			return c
		}(),
		"ops starting at 2^25": func() []byte {
			c, _ := amtest.Encode(amtest.Change{Deps: [][32]byte{baseHash}, Actors: [][]byte{amtest.ActorB, amtest.ActorA}, Seq: 1, StartOp: 1 << 25,
				Ops: []amtest.Op{amtest.Put(m, "z")}})
			return c
		}(),
	}
	for name, c := range forged {
		var l Ledger
		if err := admitOne(t, &l, base); err != nil {
			t.Fatal(err)
		}
		if err := admitOne(t, &l, c); err == nil {
			t.Errorf("%s: accepted", name)
		}
		if ok, _ := o.Applies(t, [][]byte{base}, [][]byte{c}); ok {
			t.Logf("%s: stock automerge takes it (the guard is stricter here)", name)
		}
	}
}

// Edge cases of the change format and of op fields, each either refused
// or taken by stock automerge too: whatever the guard admits, stock
// automerge must apply, save, load and sync (the fuzz target's property,
// on cases a review built by hand). mustRefuse are those that break stock
// automerge.
func TestTheGuardAdmitsOnlyWhatStockAutomergeTakes(t *testing.T) {
	o := amtest.StockAutomerge(t)
	base, baseHash := refBase()
	// A second head, by C, concurrent with the base.
	other, otherHash := amtest.Encode(amtest.Change{Actors: [][]byte{amtest.ActorC}, Seq: 1, StartOp: 1, Ops: []amtest.Op{amtest.Put(amtest.ID(0, 0), "zz")}})
	text, m := amtest.ID(1, 1), amtest.ID(4, 1)
	sv, sraw := amtest.String("x")
	iv, iraw := amtest.Int(5)
	on := func(ops ...amtest.Op) amtest.Change {
		return amtest.Change{Deps: [][32]byte{baseHash}, Actors: [][]byte{amtest.ActorB, amtest.ActorA}, Seq: 1, StartOp: 9, Ops: ops}
	}
	enc := func(c amtest.Change) []byte { b, _ := amtest.Encode(c); return b }
	quirk := func(c amtest.Change, f func(*amtest.Change)) []byte { f(&c); return enc(c) }
	markStart := amtest.Op{Obj: text, Elem: amtest.ID(2, 1), Insert: true, Action: amcheck.Mark, MarkName: "bold", Value: amcheck.ValueTrue}
	onOther := func(start uint64, ops ...amtest.Op) []byte {
		return enc(amtest.Change{Deps: [][32]byte{otherHash}, Actors: [][]byte{amtest.ActorB}, Seq: 1, StartOp: start, Ops: ops})
	}
	mustRefuse := map[string][]byte{
		"a table, and a key in it":              enc(on(amtest.Op{Obj: m, MapKey: true, Key: "tb", Action: amcheck.MakeTable}, amtest.Put(amtest.ID(9, 0), "row"))),
		"a deletion with a value":               enc(on(amtest.Op{Obj: text, Elem: amtest.ID(2, 1), Action: amcheck.Delete, Value: sv, Raw: sraw, Preds: []amcheck.OpID{amtest.ID(2, 1)}})),
		"a deletion of a key with a value":      enc(on(amtest.Op{Obj: m, MapKey: true, Key: "a", Action: amcheck.Delete, Value: iv, Raw: iraw, Preds: []amcheck.OpID{amtest.ID(5, 1)}})),
		"a deletion with a mark name":           enc(on(amtest.Op{Obj: text, Elem: amtest.ID(2, 1), Action: amcheck.Delete, MarkName: "x", Preds: []amcheck.OpID{amtest.ID(2, 1)}})),
		"a deletion with expand":                enc(on(amtest.Op{Obj: text, Elem: amtest.ID(2, 1), Action: amcheck.Delete, Expand: true, Preds: []amcheck.OpID{amtest.ID(2, 1)}})),
		"an expand column all false":            quirk(on(amtest.Put(m, "k")), func(c *amtest.Change) { c.ListEmptyColumns = true }),
		"an empty value column listed":          quirk(on(amtest.Op{Obj: m, MapKey: true, Key: "k", Action: amcheck.MakeMap}), func(c *amtest.Change) { c.ListEmptyColumns = true }),
		"ops starting inside their past":        onOther(1, amtest.Put(amtest.ID(0, 0), "q")),
		"no ops, starting past their past":      onOther(9),
		"no ops, starting inside their past":    onOther(1),
		"no ops and no past, not starting at 1": enc(amtest.Change{Actors: [][]byte{amtest.ActorB}, Seq: 1, StartOp: 3}),
	}
	maybe := map[string][]byte{
		"a put with a mark name":            enc(on(amtest.Op{Obj: m, MapKey: true, Key: "k", Action: amcheck.Put, Value: sv, Raw: sraw, MarkName: "bold"})),
		"a put with expand":                 enc(on(amtest.Op{Obj: m, MapKey: true, Key: "k", Action: amcheck.Put, Value: sv, Raw: sraw, Expand: true})),
		"a map made with a value":           enc(on(amtest.Op{Obj: m, MapKey: true, Key: "k", Action: amcheck.MakeMap, Value: iv, Raw: iraw})),
		"a mark end with a value":           enc(on(markStart, amtest.Op{Obj: text, Elem: amtest.ID(3, 1), Insert: true, Action: amcheck.Mark, Value: iv, Raw: iraw})),
		"a mark end with a name":            enc(on(markStart, amtest.Op{Obj: text, Elem: amtest.ID(3, 1), Insert: true, Action: amcheck.Mark, MarkName: "b2", Value: amcheck.ValueTrue})),
		"an increment by a uint":            enc(on(amtest.Op{Obj: amtest.ID(0, 0), MapKey: true, Key: "c", Action: amcheck.Increment, Value: amcheck.ValueUint, Raw: []byte{1}, Preds: []amcheck.OpID{amtest.ID(6, 1)}})),
		"an increment with expand":          enc(on(amtest.Op{Obj: amtest.ID(0, 0), MapKey: true, Key: "c", Action: amcheck.Increment, Value: amcheck.ValueInt, Raw: []byte{1}, Preds: []amcheck.OpID{amtest.ID(6, 1)}, Expand: true})),
		"unsorted dependencies":             quirk(amtest.Change{Deps: [][32]byte{baseHash, otherHash}, Actors: [][]byte{amtest.ActorB, amtest.ActorA}, Seq: 1, StartOp: 9, Ops: []amtest.Op{amtest.Put(m, "q")}}, func(c *amtest.Change) { c.KeepDepOrder = true }),
		"sorted dependencies, swapped":      quirk(amtest.Change{Deps: [][32]byte{otherHash, baseHash}, Actors: [][]byte{amtest.ActorB, amtest.ActorA}, Seq: 1, StartOp: 9, Ops: []amtest.Op{amtest.Put(m, "q")}}, func(c *amtest.Change) { c.KeepDepOrder = true }),
		"bytes after the columns":           quirk(on(amtest.Put(m, "k")), func(c *amtest.Change) { c.Extra = []byte{1, 2, 3} }),
		"a value of unknown type 10":        enc(on(amtest.Op{Obj: m, MapKey: true, Key: "k", Action: amcheck.Put, Value: 10, Raw: []byte{1, 2}})),
		"a counter over a character":        enc(on(amtest.Op{Obj: text, Elem: amtest.ID(2, 1), Action: amcheck.Put, Value: amcheck.ValueCounter, Raw: []byte{1}, Preds: []amcheck.OpID{amtest.ID(2, 1)}})),
		"a map inserted into text":          enc(on(amtest.Op{Obj: text, Elem: amtest.ID(3, 1), Insert: true, Action: amcheck.MakeMap}, amtest.Put(amtest.ID(9, 0), "type"))),
		"ops starting after a gap":          onOther(5, amtest.Put(amtest.ID(0, 0), "q")),
		"no ops, starting right after":      onOther(2),
		"no ops and no past, starting at 1": enc(amtest.Change{Actors: [][]byte{amtest.ActorB}, Seq: 1, StartOp: 1}),
		"a mark in text in a list": enc(on(amtest.Op{Obj: amtest.ID(7, 1), Elem: amtest.ID(0, 0), Insert: true, Action: amcheck.MakeText},
			amtest.Insert(amtest.ID(9, 0), amtest.ID(0, 0), "a"), amtest.Insert(amtest.ID(9, 0), amtest.ID(10, 0), "b"),
			amtest.Op{Obj: amtest.ID(9, 0), Elem: amtest.ID(10, 0), Insert: true, Action: amcheck.Mark, MarkName: "b", Value: amcheck.ValueTrue},
			amtest.Op{Obj: amtest.ID(9, 0), Elem: amtest.ID(11, 0), Insert: true, Action: amcheck.Mark, Value: amcheck.ValueNull})),
	}
	check := func(name string, c []byte, refuse bool) {
		var l Ledger
		for _, b := range [][]byte{base, other} {
			if err := admitOne(t, &l, b); err != nil {
				t.Fatal(err)
			}
		}
		err := admitOne(t, &l, c)
		if err == nil {
			if ok, msg := o.Applies(t, [][]byte{base, other}, [][]byte{c}); !ok {
				t.Errorf("%s: admitted, but stock automerge fails: %s", name, msg)
			}
		}
		if refuse && err == nil {
			t.Errorf("%s: admitted", name)
		}
	}
	for name, c := range mustRefuse {
		check(name, c, true)
	}
	for name, c := range maybe {
		check(name, c, false)
	}
}

// The guard orders a text's elements as automerge does: for sessions of
// several actors typing, deleting and marking concurrently, every pair of
// characters compares as stock automerge lays them out.
func TestElementsAreOrderedAsAutomergeOrdersThem(t *testing.T) {
	o := amtest.StockAutomerge(t)
	for seed := 1; seed <= 6; seed++ {
		var res struct {
			Changes []string
			Cursors []string
		}
		o.Call(t, map[string]any{"op": "order", "seed": seed, "steps": 300}, &res)
		var l Ledger
		for _, s := range res.Changes {
			raw, err := base64.StdEncoding.DecodeString(s)
			if err != nil {
				t.Fatal(err)
			}
			p, err := amcheck.ParseSyncChange(raw, amcheck.Limits{ListOps: true})
			if err != nil {
				t.Fatal(err)
			}
			l.Record([]Change{{Change: p}})
		}
		x := l.index()
		ids := make([]uint64, len(res.Cursors))
		for i, c := range res.Cursors {
			ctr, actor, ok := strings.Cut(c, "@")
			a, err := hex.DecodeString(actor)
			n, known := x.actorNumber(a)
			counter, perr := strconv.ParseUint(ctr, 10, 32)
			if !ok || err != nil || perr != nil || !known {
				t.Fatalf("cursor %q", c)
			}
			ids[i] = uint64(n)<<32 | counter
		}
		if len(ids) < 50 {
			t.Fatalf("seed %d: a text of %d characters is too short to tell", seed, len(ids))
		}
		for i := range ids {
			for _, j := range []int{i + 1, i + 7, i + 31, len(ids) - 1 - i} {
				if j <= i || j >= len(ids) {
					continue
				}
				steps := 0
				ab, ok1 := x.before(ids[i], ids[j], &steps)
				ba, ok2 := x.before(ids[j], ids[i], &steps)
				if !ok1 || !ok2 || !ab || ba {
					t.Fatalf("seed %d: characters %d and %d: before = %v/%v, after = %v/%v", seed, i, j, ab, ok1, ba, ok2)
				}
			}
		}
	}
}

// A run of insertions, each right after the op before in the same object
// (a paste, text typed), is checked as a run, not op by op; a change
// that breaks the run anywhere is checked op by op from there, and each
// forged run below is refused as its ops alone would be. The elements of
// an honest run are indexed as its ops one by one would index them: a
// later change may insert after any of them, and after nothing past them.
func TestRunsOfInsertionsAreCheckedAsStrictlyAsEachOp(t *testing.T) {
	base, baseHash := refBase()
	text, m, list := amtest.ID(1, 1), amtest.ID(4, 1), amtest.ID(7, 1)
	// run is n characters inserted into obj, the first after elem, each
	// after the one before, from op 9 on (by B).
	run := func(obj, elem amcheck.OpID, n int) []amtest.Op {
		ops := make([]amtest.Op, n)
		for i := range ops {
			ops[i] = amtest.Insert(obj, elem, "x")
			elem = amtest.ID(uint32(9+i), 0)
		}
		return ops
	}
	with := func(ops []amtest.Op, more ...amtest.Op) []amtest.Op {
		return append(append([]amtest.Op(nil), ops...), more...)
	}
	v, raw := amtest.Int(1)
	forged := map[string][]byte{
		"a run that goes on in another object": byB(baseHash, with(run(text, amtest.ID(3, 1), 5),
			amtest.Insert(list, amtest.ID(13, 0), "x"))...),
		"a run that goes on in a map": byB(baseHash, with(run(text, amtest.ID(3, 1), 5),
			amtest.Insert(m, amtest.ID(13, 0), "x"))...),
		"a run whose last op names itself": byB(baseHash, with(run(text, amtest.ID(3, 1), 5),
			amtest.Insert(text, amtest.ID(14, 0), "x"))...),
		"a run whose last op names the one after it": byB(baseHash, with(run(text, amtest.ID(3, 1), 5),
			amtest.Insert(text, amtest.ID(15, 0), "x"), amtest.Insert(text, amtest.ID(13, 0), "x"))...),
		"a run whose last op has a predecessor": byB(baseHash, with(run(text, amtest.ID(3, 1), 5),
			amtest.Op{Obj: text, Elem: amtest.ID(13, 0), Insert: true, Action: amcheck.Put, Value: v, Raw: raw, Preds: []amcheck.OpID{amtest.ID(13, 0)}})...),
		"a run that goes on after a deletion": byB(baseHash, with(run(text, amtest.ID(3, 1), 5),
			amtest.Op{Obj: text, Elem: amtest.ID(2, 1), Action: amcheck.Delete, Preds: []amcheck.OpID{amtest.ID(2, 1)}},
			amtest.Insert(text, amtest.ID(14, 0), "x"))...),
		"a run that goes on after an overwrite": byB(baseHash, with(run(text, amtest.ID(3, 1), 5),
			amtest.Op{Obj: text, Elem: amtest.ID(13, 0), Action: amcheck.Put, Value: v, Raw: raw, Preds: []amcheck.OpID{amtest.ID(13, 0)}},
			amtest.Insert(text, amtest.ID(14, 0), "x"))...),
		"a run that goes on in the text it inserted": byB(baseHash, with(run(text, amtest.ID(3, 1), 5),
			amtest.Op{Obj: text, Elem: amtest.ID(13, 0), Insert: true, Action: amcheck.MakeText},
			amtest.Insert(amtest.ID(14, 0), amtest.ID(14, 0), "x"))...),
		"a run that names the op before in another actor's numbering": byB(baseHash, with(run(text, amtest.ID(3, 1), 5),
			amtest.Insert(text, amtest.ID(13, 1), "x"))...),
		"a run that inserts a table": byB(baseHash, with(run(list, amtest.ID(8, 1), 5),
			amtest.Op{Obj: list, Elem: amtest.ID(13, 0), Insert: true, Action: amcheck.MakeTable})...),
		"a run that goes on after a mark's end": byB(baseHash, with(run(text, amtest.ID(3, 1), 5),
			amtest.Op{Obj: text, Elem: amtest.ID(13, 0), Insert: true, Action: amcheck.Mark, Value: amcheck.ValueNull},
			amtest.Insert(text, amtest.ID(14, 0), "x"))...),
		"a run that starts in an element never made": byB(baseHash, run(text, amtest.ID(50, 1), 5)...),
		"a run in an object never made":              byB(baseHash, run(amtest.ID(99, 1), amtest.ID(0, 0), 5)...),
	}
	for name, c := range forged {
		var l Ledger
		if err := admitOne(t, &l, base); err != nil {
			t.Fatal(err)
		}
		if err := admitOne(t, &l, c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}

	// An honest run of 1,000 characters, then a run in the list after it
	// in the same change: each indexed in its object.
	var l Ledger
	if err := admitOne(t, &l, base); err != nil {
		t.Fatal(err)
	}
	ops := with(run(text, amtest.ID(3, 1), 1000), amtest.Insert(list, amtest.ID(8, 1), "y"), amtest.Insert(list, amtest.ID(1009, 0), "y"))
	pasted, pastedHash := amtest.Encode(amtest.Change{Deps: [][32]byte{baseHash}, Actors: [][]byte{amtest.ActorB, amtest.ActorA}, Seq: 1, StartOp: 9, Ops: ops})
	if err := admitOne(t, &l, pasted); err != nil {
		t.Fatalf("the honest runs: %v", err)
	}
	next := func(ops ...amtest.Op) []byte {
		c, _ := amtest.Encode(amtest.Change{Deps: [][32]byte{pastedHash}, Actors: [][]byte{amtest.ActorC, amtest.ActorB, amtest.ActorA}, Seq: 1, StartOp: 1011, Ops: ops})
		return c
	}
	for _, ok := range []struct {
		obj  amcheck.OpID
		elem uint32
	}{{text, 9}, {text, 500}, {text, 1008}, {list, 1009}, {list, 1010}} {
		var l2 Ledger
		for _, c := range [][]byte{base, pasted} {
			if err := admitOne(t, &l2, c); err != nil {
				t.Fatal(err)
			}
		}
		if err := admitOne(t, &l2, next(amtest.Insert(amcheck.OpID{Counter: ok.obj.Counter, Actor: 2}, amtest.ID(ok.elem, 1), "z"))); err != nil {
			t.Errorf("an insertion after element %d of the run: %v", ok.elem, err)
		}
	}
	for _, bad := range []struct {
		obj  amcheck.OpID
		elem uint32
	}{{text, 1009}, {list, 1008}, {text, 1011}, {list, 1011}} {
		var l2 Ledger
		for _, c := range [][]byte{base, pasted} {
			if err := admitOne(t, &l2, c); err != nil {
				t.Fatal(err)
			}
		}
		if err := admitOne(t, &l2, next(amtest.Insert(amcheck.OpID{Counter: bad.obj.Counter, Actor: 2}, amtest.ID(bad.elem, 1), "z"))); err == nil {
			t.Errorf("an insertion after %d, not an element of object %d: accepted", bad.elem, bad.obj.Counter)
		}
	}
}
