package amdoc

import (
	"bytes"
	"compress/flate"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"reflect"
	"testing"

	"github.com/tandemhq/tandem/doc/amcheck"
	"github.com/tandemhq/tandem/doc/amcheck/amtest"
)

func join(changes [][]byte) []byte { return bytes.Join(changes, nil) }

// TestASavedDocumentIsAutomergesOwn saves random editing sessions (text,
// marks, maps, lists, counters, nested objects, deletions, by several
// actors merging now and then) and has stock automerge load each: the
// same heads, changes and content, and the op columns byte for byte
// those of automerge's own save (which may list the changes in another
// order).
func TestASavedDocumentIsAutomergesOwn(t *testing.T) {
	o := amtest.StockAutomerge(t)
	for seed := 1; seed <= 60; seed++ {
		changes := o.Trace(t, seed, 40+seed*5)
		doc, err := Save(join(changes))
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if diff := columnDiff(t, doc, o.Save(t, changes)); diff != "" {
			t.Errorf("seed %d: the columns differ from automerge's: %s", seed, diff)
		}
		if ok, why := o.LoadsAs(t, changes, doc); !ok {
			t.Fatalf("seed %d: stock automerge does not load it as the changes' document: %s", seed, why)
		}
	}
}

// TestATypedDocumentIsAutomergesOwn saves text typed one character a
// change.
func TestATypedDocumentIsAutomergesOwn(t *testing.T) {
	o := amtest.StockAutomerge(t)
	changes := amtest.Typing(2000)
	doc, err := Save(join(changes))
	if err != nil {
		t.Fatal(err)
	}
	if diff := columnDiff(t, doc, o.Save(t, changes)); diff != "" {
		t.Errorf("the columns differ from automerge's: %s", diff)
	}
	if ok, why := o.LoadsAs(t, changes, doc); !ok {
		t.Fatalf("stock automerge does not load it: %s", why)
	}
}

// docParts is a document chunk read apart, its columns inflated.
type docParts struct {
	actors, heads, tail []byte
	changes, ops        map[uint32][]byte
}

func readDoc(t testing.TB, b []byte) docParts {
	t.Helper()
	if len(b) < 9 || b[8] != 0 {
		t.Fatalf("not a document chunk")
	}
	r := b[9:]
	uv := func() uint64 {
		v, n := binary.Uvarint(r)
		if n <= 0 {
			t.Fatalf("bad uleb")
		}
		r = r[n:]
		return v
	}
	n := uv()
	if uint64(len(r)) != n {
		t.Fatalf("chunk length %d, %d bytes follow", n, len(r))
	}
	var p docParts
	start := r
	for range uv() {
		l := uv()
		r = r[l:]
	}
	p.actors = start[:len(start)-len(r)]
	start = r
	nh := uv()
	r = r[32*nh:]
	p.heads = start[:len(start)-len(r)]
	meta := func() [][2]uint64 {
		var m [][2]uint64
		for range uv() {
			s := uv()
			m = append(m, [2]uint64{s, uv()})
		}
		return m
	}
	cm, om := meta(), meta()
	cols := func(m [][2]uint64) map[uint32][]byte {
		out := map[uint32][]byte{}
		for _, c := range m {
			d := r[:c[1]]
			r = r[c[1]:]
			spec := uint32(c[0])
			if spec&8 != 0 {
				var err error
				d, err = io.ReadAll(flate.NewReader(bytes.NewReader(d)))
				if err != nil {
					t.Fatal(err)
				}
				spec &^= 8
			}
			out[spec] = d
		}
		return out
	}
	p.changes, p.ops = cols(cm), cols(om)
	p.tail = r
	return p
}

// columnDiff compares two documents' actors, heads and op columns
// (inflated). The change columns may list the changes in another order.
func columnDiff(t testing.TB, got, want []byte) string {
	g, w := readDoc(t, got), readDoc(t, want)
	var diff string
	if !bytes.Equal(g.actors, w.actors) {
		diff += "actors; "
	}
	if !bytes.Equal(g.heads, w.heads) {
		diff += "heads; "
	}
	for _, part := range []struct {
		name string
		g, w map[uint32][]byte
	}{{"op column", g.ops, w.ops}} {
		for spec, wd := range part.w {
			if gd, ok := part.g[spec]; !ok {
				diff += fmt.Sprintf("%s %#x missing (want %d bytes %x); ", part.name, spec, len(wd), head(wd))
			} else if !bytes.Equal(gd, wd) {
				diff += fmt.Sprintf("%s %#x: %x, want %x; ", part.name, spec, head(gd), head(wd))
			}
		}
		for spec, gd := range part.g {
			if _, ok := part.w[spec]; !ok {
				diff += fmt.Sprintf("%s %#x not in automerge's (%d bytes %x); ", part.name, spec, len(gd), head(gd))
			}
		}
	}
	if ulebs(g.tail) != ulebs(w.tail) {
		diff += fmt.Sprintf("heads' indices %x, want as many as in %x; ", g.tail, w.tail)
	}
	return diff
}

func head(b []byte) []byte {
	if len(b) > 40 {
		return b[:40]
	}
	return b
}

func ulebs(b []byte) int {
	n := 0
	for _, c := range b {
		if c&0x80 == 0 {
			n++
		}
	}
	return n
}

// TestChangesReadInOnePassAsAmcheckReadsThem reads random sessions'
// changes both ways: in one pass (addPlain) and through amcheck (add),
// into the same op set.
func TestChangesReadInOnePassAsAmcheckReadsThem(t *testing.T) {
	o := amtest.StockAutomerge(t)
	for seed := 1; seed <= 30; seed++ {
		changes := o.Trace(t, seed, 100)
		fast, slow := newOpSet(), newOpSet()
		fast.budget, slow.budget = maxOps, maxOps
		for i, c := range changes {
			n, err := fast.addPlain(c)
			if err != nil || n != len(c) {
				t.Fatalf("seed %d, change %d: read %d of %d bytes in one pass: %v", seed, i, n, len(c), err)
			}
			ac, _, err := amcheck.ParseChange(c, amcheck.Limits{ListOps: true})
			if err != nil {
				t.Fatal(err)
			}
			if err := slow.add(&ac); err != nil {
				t.Fatal(err)
			}
		}
		if !reflect.DeepEqual(fast.ops, slow.ops) || !reflect.DeepEqual(fast.preds, slow.preds) ||
			!reflect.DeepEqual(fast.predAt, slow.predAt) || !bytes.Equal(fast.values, slow.values) ||
			!reflect.DeepEqual(fast.keys, slow.keys) || !reflect.DeepEqual(fast.changes, slow.changes) {
			t.Fatalf("seed %d: the two reads differ", seed)
		}
	}
}

// TestEdgeCasesAreAutomergesOwn saves sessions made to reach what random
// ones rarely do: marks that never expand (automerge then leaves the
// expand column out), marked text deleted, concurrent insertions and
// sets by actors whose IDs prefix one another, nested objects in a list,
// counters incremented and deleted, a change with no ops.
func TestEdgeCasesAreAutomergesOwn(t *testing.T) {
	o := amtest.StockAutomerge(t)
	for name, changes := range o.Cases(t) {
		doc, err := Save(join(changes))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if diff := columnDiff(t, doc, o.Save(t, changes)); diff != "" {
			t.Errorf("%s: the columns differ from automerge's: %s", name, diff)
		}
		if ok, why := o.LoadsAs(t, changes, doc); !ok {
			t.Errorf("%s: stock automerge does not load it as the changes' document: %s", name, why)
		}
	}
}

// A change whose predecessors pass the save's budget is refused before
// they are held: a run-length run names any number of them in a few
// bytes.
func TestPredecessorsPastTheBudgetAreRefused(t *testing.T) {
	text := amcheck.OpID{Counter: 1}
	first, prev := amtest.Encode(amtest.Change{Actors: [][]byte{amtest.ActorA}, Seq: 1, StartOp: 1,
		Ops: []amtest.Op{{MapKey: true, Key: "k", Action: amcheck.MakeText}}})
	preds := make([]amcheck.OpID, 600)
	for i := range preds {
		preds[i] = text
	}
	var ops []amtest.Op
	for range 3 {
		ops = append(ops, amtest.Put(amcheck.OpID{}, "k", preds...))
	}
	bomb, _ := amtest.Encode(amtest.Change{Deps: [][32]byte{prev}, Actors: [][]byte{amtest.ActorA}, Seq: 2, StartOp: 2, Ops: ops})
	if _, err := save(context.Background(), append(first, bomb...), 1000); !errors.Is(err, errTooManyOps) {
		t.Fatalf("1,800 predecessors against a budget of 1,000: %v", err)
	}
}
