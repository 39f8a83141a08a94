package smallmap

import (
	"math/rand/v2"
	"testing"
)

// TestMapKeepsWhatAMapKeeps: random sets, deletes and lookups, around the
// size where it becomes a map and back, agree with a Go map.
func TestMapKeepsWhatAMapKeeps(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		var m Map[int, int]
		want := map[int]int{}
		keys := 2 + r.IntN(3*spill)
		for op := range 500 {
			k := r.IntN(keys)
			switch r.IntN(3) {
			case 0:
				m.Set(k, op)
				want[k] = op
			case 1:
				m.Delete(k)
				delete(want, k)
			}
			v, ok := m.Get(k)
			if w, wok := want[k]; ok != wok || v != w {
				t.Fatalf("round %d op %d: Get(%d) = %d %v, want %d %v", round, op, k, v, ok, w, wok)
			}
			if m.Len() != len(want) {
				t.Fatalf("round %d op %d: Len = %d, want %d", round, op, m.Len(), len(want))
			}
		}
		seen := map[int]int{}
		for k, v := range m.All() {
			if _, dup := seen[k]; dup {
				t.Fatalf("round %d: %d yielded twice", round, k)
			}
			seen[k] = v
		}
		if len(seen) != len(want) {
			t.Fatalf("round %d: All yielded %d entries, want %d", round, len(seen), len(want))
		}
		for k, v := range want {
			if seen[k] != v {
				t.Fatalf("round %d: All yielded %d=%d, want %d", round, k, seen[k], v)
			}
		}
	}
}

// TestDeletingWhatWasYielded: deleting each entry as it is yielded visits
// every entry once and leaves the map empty, small or spilled.
func TestDeletingWhatWasYielded(t *testing.T) {
	for _, n := range []int{1, 2, spill, spill + 1, 3 * spill} {
		var m Map[int, struct{}]
		for k := range n {
			m.Set(k, struct{}{})
		}
		seen := map[int]bool{}
		for k := range m.Keys() {
			if seen[k] {
				t.Fatalf("n=%d: %d yielded twice", n, k)
			}
			seen[k] = true
			m.Delete(k)
		}
		if len(seen) != n || m.Len() != 0 {
			t.Fatalf("n=%d: yielded %d, %d left", n, len(seen), m.Len())
		}
	}
}

// TestASmallMapIsSmall: one entry costs one small allocation, not a map.
func TestASmallMapIsSmall(t *testing.T) {
	allocs := testing.AllocsPerRun(100, func() {
		var m Map[string, struct{}]
		m.Set("doc", struct{}{})
		if !m.Has("doc") {
			t.Fatal("lost")
		}
	})
	if allocs > 1 {
		t.Fatalf("%v allocations for one entry, want 1", allocs)
	}
}
