package doc

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/tandemhq/tandem/doc/amcheck"
	"github.com/tandemhq/tandem/doc/amcheck/amtest"
)

// typing returns n+1 changes: a text made by actor A, then n characters
// typed by A and B in turn, each after the one before (the worst case for
// the reference index: no two neighbours share an actor, so no runs).
func typing(n int) [][]byte {
	actors := [][]byte{actorA, actorB}
	first, prev := amtest.Encode(amtest.Change{Actors: actors[:1], Seq: 1, StartOp: 1,
		Ops: []amtest.Op{{MapKey: true, Key: "text", Action: amcheck.MakeText}}})
	out := [][]byte{first}
	seqs := []uint64{1, 0}
	last := amcheck.OpID{} // the last character: the head at first
	for i := range n {
		a := i % 2
		seqs[a]++
		ctr := uint64(i + 2)
		ops := []amtest.Op{ins(amcheck.OpID{Counter: 1, Actor: uint32(a)}, last, "x")}
		// Actor indices in the change: 0 is its author, 1 the other.
		fix := func(id amcheck.OpID, owner int) amcheck.OpID {
			if id.Counter == 0 {
				return id
			}
			if owner == a {
				id.Actor = 0
			} else {
				id.Actor = 1
			}
			return id
		}
		ops[0].Obj = fix(amcheck.OpID{Counter: 1}, 0)
		if last.Counter != 0 {
			ops[0].Elem = fix(amcheck.OpID{Counter: last.Counter}, int(last.Actor))
		}
		var chunk []byte
		chunk, prev = amtest.Encode(amtest.Change{Deps: [][32]byte{prev}, Actors: [][]byte{actors[a], actors[1-a]},
			Seq: seqs[a], StartOp: ctr, Ops: ops})
		out = append(out, chunk)
		last = amcheck.OpID{Counter: uint32(ctr), Actor: uint32(a)}
	}
	return out
}

// BenchmarkAdmitTypedChange measures the guard's checks of one typed
// character (parse, sequence, references, causal check) against documents
// of growing history, and what the ledger holds per change.
func BenchmarkAdmitTypedChange(b *testing.B) {
	all := typing(100_001)
	for _, n := range []int{100, 10_000, 100_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			var ms0, ms1 runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&ms0)
			var l ledger
			for _, c := range all[:n+1] {
				p, err := amcheck.ParseSyncChange(c, amcheck.Limits{ListOps: true})
				if err != nil {
					b.Fatal(err)
				}
				l.record([]change{{Change: p}})
			}
			runtime.GC()
			runtime.ReadMemStats(&ms1)
			perChange := float64(ms1.HeapAlloc-ms0.HeapAlloc) / float64(n+1)
			next := all[n+1]
			var lim Limits
			lim.setDefaults()
			known := ledgerKnows(&l)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := l.admit(lim, [][]byte{next}, known); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(perChange, "ledger-B/change")
		})
	}
}
