package guard

import (
	"bytes"
	"fmt"
	"runtime"
	"sort"
	"testing"

	"github.com/tandemhq/tandem/doc/amcheck"
	"github.com/tandemhq/tandem/doc/amcheck/amtest"
)

// BenchmarkAdmitTypedChange measures the guard's checks of one typed
// character (parse, sequence, references, causal check) against documents
// of growing history, and what the ledger holds per change.
func BenchmarkAdmitTypedChange(b *testing.B) {
	all := amtest.Typing(100_001)
	for _, n := range []int{100, 10_000, 100_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			var ms0, ms1 runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&ms0)
			var l Ledger
			for _, c := range all[:n+1] {
				p, err := amcheck.ParseSyncChange(c, amcheck.Limits{ListOps: true})
				if err != nil {
					b.Fatal(err)
				}
				l.Record([]Change{{Change: p}})
			}
			runtime.GC()
			runtime.ReadMemStats(&ms1)
			perChange := float64(ms1.HeapAlloc-ms0.HeapAlloc) / float64(n+1)
			benchAdmit(b, &l, all[n+1])
			b.ReportMetric(perChange, "ledger-B/change")
		})
	}
}

// typingTogether returns a text made by actor A with history characters
// typed by A, then n characters typed by typists actors in turn, each
// into a place of their own, who see each other's changes lag changes
// late: so no change of theirs depends on every head, as when people type
// together over a network.
func typingTogether(history, n, typists, lag int) [][]byte {
	out := amtest.Typing(0) // the text, made by A
	hashes := make([][32]byte, 0, history+n+1)
	deps := make([][][32]byte, 0, history+n+1)
	add := func(chunk []byte, h [32]byte, d [][32]byte) {
		out = append(out, chunk)
		hashes = append(hashes, h)
		deps = append(deps, d)
	}
	first, err := amcheck.ParseSyncChange(out[0], amcheck.Limits{})
	if err != nil {
		panic(err)
	}
	out = out[:0]
	add(amtest.Typing(0)[0], first.Hash, nil)
	text := amcheck.OpID{Counter: 1}
	lastA := amcheck.OpID{}
	for i := range history {
		ctr := uint64(i + 2)
		chunk, h := amtest.Encode(amtest.Change{Deps: [][32]byte{hashes[len(hashes)-1]}, Actors: [][]byte{amtest.ActorA},
			Seq: uint64(i + 2), StartOp: ctr, Ops: []amtest.Op{amtest.Insert(text, lastA, "x")}})
		add(chunk, h, [][32]byte{hashes[len(hashes)-1]})
		lastA = amcheck.OpID{Counter: uint32(ctr)}
	}
	// Heads of the first m+1 changes, kept as m grows.
	heads := map[[32]byte]bool{}
	m := -1
	grow := func(to int) {
		for ; m < to; m++ {
			heads[hashes[m+1]] = true
			for _, d := range deps[m+1] {
				delete(heads, d)
			}
		}
	}
	type typist struct {
		actor  []byte
		seq    uint64
		last   int          // index of its last change, -1: none
		lastOp amcheck.OpID // its last character, in its own changes' numbering
		below  map[[32]byte]bool
	}
	ts := make([]*typist, typists)
	for i := range ts {
		ts[i] = &typist{actor: []byte{0x10 + byte(i), 1, 2, 3}, last: -1}
	}
	for i := range n {
		t := ts[i%typists]
		at := len(hashes)
		grow(max(at-1-lag, t.last, 0))
		var d [][32]byte
		for h := range heads {
			if !t.below[h] {
				d = append(d, h)
			}
		}
		if t.last > m {
			d = append(d, hashes[t.last])
		}
		sort.Slice(d, func(i, j int) bool { return bytes.Compare(d[i][:], d[j][:]) < 0 })
		ctr := uint64(at + 1)
		elem := t.lastOp
		if t.last < 0 {
			elem = amcheck.OpID{Counter: lastA.Counter, Actor: 1} // after A's text
		}
		t.seq++
		chunk, h := amtest.Encode(amtest.Change{Deps: d, Actors: [][]byte{t.actor, amtest.ActorA},
			Seq: t.seq, StartOp: ctr, Ops: []amtest.Op{amtest.Insert(amcheck.OpID{Counter: 1, Actor: 1}, elem, "y")}})
		add(chunk, h, d)
		t.below = map[[32]byte]bool{}
		for _, x := range d {
			t.below[x] = true
		}
		t.last, t.lastOp = at, amcheck.OpID{Counter: uint32(ctr)}
	}
	return out
}

// BenchmarkAdmitTypingTogether measures the guard's checks of one
// character typed by one of four typists who see each other's changes a
// little late (no change depends on every head), after 2,000 such
// characters, into texts of a short and a long history.
func BenchmarkAdmitTypingTogether(b *testing.B) {
	for _, n := range []int{100, 100_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			all := typingTogether(n, 2_001, 4, 6)
			var l Ledger
			for _, c := range all[:len(all)-1] {
				p, err := amcheck.ParseSyncChange(c, amcheck.Limits{ListOps: true})
				if err != nil {
					b.Fatal(err)
				}
				l.Record([]Change{{Change: p}})
			}
			benchAdmit(b, &l, all[len(all)-1])
		})
	}
}

// benchAdmit times the guard's admission of one change into l, over and
// over (it is checked, never recorded).
func benchAdmit(b *testing.B, l *Ledger, next []byte) {
	var lim Limits
	lim.SetDefaults()
	known := ledgerKnows(l)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := l.Admit(lim, [][]byte{next}, known); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAdmitPaste measures the guard's checks of one change that
// pastes a megabyte of text into a new document (parse, operations
// listed, references), as repo.create({text}) makes it.
func BenchmarkAdmitPaste(b *testing.B) {
	paste := amtest.Paste(1 << 20)
	benchAdmit(b, &Ledger{}, paste)
}
