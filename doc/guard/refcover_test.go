package guard

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/tandemhq/tandem/doc/amcheck"
)

// laggedGraph returns n changes of k actors who each see the others'
// changes only after a random delay of up to lag changes, with now and
// then one of them offline for a stretch: a graph where few changes
// depend on every head.
func laggedGraph(rng *rand.Rand, n, k, lag int) []amcheck.Change {
	var out []amcheck.Change
	seqs := make([]uint64, k)
	// known[a] is, per actor, the last change a has seen of it (-1: none).
	known := make([][]int, k)
	for a := range known {
		known[a] = make([]int, k)
		for b := range known[a] {
			known[a][b] = -1
		}
	}
	last := make([]int, k) // each actor's last change
	for a := range last {
		last[a] = -1
	}
	offline := make([]int, k)
	var anc []map[int]bool
	for i := range n {
		a := rng.IntN(k)
		// a catches up on what reached it: changes older than a random lag.
		if offline[a] > 0 {
			offline[a]--
		} else {
			if rng.IntN(200) == 0 {
				offline[a] = rng.IntN(4 * lag)
			}
			seen := i - 1 - rng.IntN(lag+1)
			for b := range k {
				for j := last[b]; j >= 0 && j > known[a][b]; j = prevOf(out, j) {
					if j <= seen {
						known[a][b] = j
						break
					}
				}
			}
		}
		known[a][a] = last[a]
		// Its deps: the heads of what it knows.
		var deps [][32]byte
		for b := range k {
			j := known[a][b]
			if j < 0 {
				continue
			}
			covered := false
			for c := range k {
				if c != b && known[a][c] >= 0 && anc[known[a][c]][j] {
					covered = true
					break
				}
			}
			if !covered {
				deps = append(deps, out[j].Hash)
			}
		}
		seqs[a]++
		c := amcheck.Change{Actor: []byte{byte(a + 1)}, Actors: [][]byte{{byte(a + 1)}}, Seq: seqs[a], StartOp: uint64(i + 1), Deps: deps}
		c.Hash = [32]byte{byte(i), byte(i >> 8), byte(i >> 16), 0xcc}
		out = append(out, c)
		anc = ancestry(out, anc)
		last[a] = i
	}
	return out
}

// prevOf returns the change before j of j's actor, -1 if none.
func prevOf(cs []amcheck.Change, j int) int {
	for i := j - 1; i >= 0; i-- {
		if cs[i].Actor[0] == cs[j].Actor[0] {
			return i
		}
	}
	return -1
}

// ancestry extends, per change, the set of changes in its past (itself
// included), by brute force: has holds the sets of cs's first changes.
func ancestry(cs []amcheck.Change, has []map[int]bool) []map[int]bool {
	at := make(map[[32]byte]int, len(cs))
	for i, c := range cs {
		at[c.Hash] = i
	}
	for i := len(has); i < len(cs); i++ {
		s := map[int]bool{i: true}
		for _, d := range cs[i].Deps {
			for j := range has[at[d]] {
				s[j] = true
			}
		}
		has = append(has, s)
	}
	return has
}

// The causal check answers as the change graph does: for changes of
// actors who see each other late (so that hardly any change depends on
// every head), taken by a document's index and by a message's overlay over
// it, "is the actor's change s in the past of these dependencies" is
// answered as a walk of the whole graph would, and every change's cover is
// true and keeps up with the changes its author had seen.
func TestTheCausalCheckAnswersAsTheChangeGraph(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			k, lag := 2+rng.IntN(4), 1+rng.IntN(8)
			cs := laggedGraph(rng, 300, k, lag)
			anc := ancestry(cs, nil)
			base := newBaseIndex(nil)
			split := 200 + rng.IntN(100)
			for i := range cs[:split] {
				base.add(&cs[i])
			}
			x := newRefIndex(base)
			for i := range cs[split:] {
				x.add(&cs[split+i])
			}
			gaps := 0
			for i, c := range cs {
				n, ok := x.change(c.Hash)
				if !ok {
					t.Fatalf("change %d is not in the index", i)
				}
				for j := range n.cover {
					if !anc[i][int(j)] {
						t.Fatalf("change %d's cover %d holds change %d, not in its past", i, n.cover, j)
					}
				}
				if n.cover < uint64(i+1) && anc[i][int(n.cover)] {
					gaps++ // the cover stopped short of what the walk could see
				}
			}
			if gaps > 0 {
				t.Errorf("%d covers stop before a change in their past", gaps)
			}
			for q := range 300 {
				i := rng.IntN(len(cs))
				a := uint32(rng.IntN(k))
				maxSeq := uint64(0)
				for _, c := range cs {
					if c.Actor[0] == byte(a+1) {
						maxSeq = max(maxSeq, c.Seq)
					}
				}
				if maxSeq == 0 {
					continue
				}
				s := 1 + uint64(rng.IntN(int(maxSeq)))
				want := false
				for j := range anc[i] {
					if cs[j].Actor[0] == byte(a+1) && cs[j].Seq >= s {
						want = true
					}
				}
				num, _ := x.actorNumber([]byte{byte(a + 1)})
				x.steps = 0
				got, ok := x.inPast([][32]byte{cs[i].Hash}, map[uint32]uint64{num: s})
				if !ok || got != want {
					t.Fatalf("query %d: actor %d's change %d in the past of change %d: got %v (ok %v), the graph says %v", q, a, s, i, got, ok, want)
				}
			}
		})
	}
}

// Two long branches, taken in turns as if two peers long apart sent them
// together, then merged: each branch's changes walk a bounded stretch (the
// index takes them in time linear in their number), the merge depends on
// every head and covers the whole document, and so do the changes after.
func TestAMergeOfLongBranchesCoversTheDocument(t *testing.T) {
	const n = 3000 // each branch: far past maxCoverSteps
	x := newBaseIndex(nil)
	var cs []amcheck.Change
	add := func(actor byte, seq uint64, deps ...[32]byte) [32]byte {
		i := len(cs)
		c := amcheck.Change{Actor: []byte{actor}, Actors: [][]byte{{actor}}, Seq: seq, StartOp: uint64(i + 1), Deps: deps}
		c.Hash = [32]byte{byte(i), byte(i >> 8), byte(i >> 16), 0xdd}
		cs = append(cs, c)
		x.add(&cs[len(cs)-1])
		return c.Hash
	}
	root := add(1, 1)
	a, b := root, root
	for i := range n { // the branches interleave in the log, as they would arrive
		a = add(2, uint64(i+1), a)
		b = add(3, uint64(i+1), b)
	}
	merge := add(1, 2, a, b)
	after := add(1, 3, merge)
	for _, h := range [][32]byte{merge, after} {
		c, _ := x.change(h)
		if c.cover != c.index+1 {
			t.Fatalf("change %d's cover is %d: the walk stopped short", c.index, c.cover)
		}
	}
	if c, _ := x.change(a); c.cover > 2 {
		t.Fatalf("a branch's last change covers %d, holding changes of the other branch", c.cover)
	}
}
