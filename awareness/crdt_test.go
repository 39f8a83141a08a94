package awareness

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// op is one update as it travels: a channel write or a removal.
type op struct {
	peer    string
	channel string // "" for a removal
	reg     Register
}

func (o op) apply(s State) {
	if o.channel == "" {
		s.Remove(o.peer, o.reg.Clock)
		return
	}
	s.Set(o.peer, o.channel, o.reg)
}

func (o op) asState() State {
	s := State{}
	o.apply(s)
	return s
}

// randomOps makes the updates a few peers would send, with clocks that grow
// per peer session, server writes and removals among them. Values are
// unique per clock, as they are in practice (one message, one clock).
func randomOps(r *rand.Rand) []op {
	peers := []string{"a", "b", "c"}
	channels := []string{"cursor", "selection", "typing", "user"}
	var ops []op
	for _, p := range peers {
		sessions := []string{"s1", "s2"}
		count := uint64(0)
		for i := 0; i < 5+r.IntN(15); i++ {
			count += uint64(1 + r.IntN(2))
			c := Clock{Count: count, Session: sessions[r.IntN(len(sessions))]}
			switch k := r.IntN(10); {
			case k == 0:
				ops = append(ops, op{peer: p, reg: Register{Clock: c.Server(uint64(i))}})
			case k == 1:
				ch := channels[r.IntN(len(channels))]
				ops = append(ops, op{peer: p, channel: ch, reg: Register{Clock: c.Server(uint64(i)), Value: []byte("srv" + fmt.Sprint(c))}})
			default:
				ch := channels[r.IntN(len(channels))]
				ops = append(ops, op{peer: p, channel: ch, reg: Register{Clock: c, Value: []byte(fmt.Sprint(p, c))}})
			}
		}
	}
	return ops
}

// shuffledWithDuplicates returns ops in a random order with some repeated.
func shuffledWithDuplicates(r *rand.Rand, ops []op) []op {
	out := append([]op(nil), ops...)
	for i := 0; i < len(ops)/3; i++ {
		out = append(out, ops[r.IntN(len(ops))])
	}
	r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// TestPropertyConvergence: replicas applying the same updates in any order,
// with duplicates, end in the same state.
func TestPropertyConvergence(t *testing.T) {
	for seed := uint64(0); seed < 300; seed++ {
		r := rand.New(rand.NewPCG(seed, 1))
		ops := randomOps(r)
		want := State{}
		for _, o := range ops {
			o.apply(want)
		}
		for replica := 0; replica < 4; replica++ {
			got := State{}
			for _, o := range shuffledWithDuplicates(r, ops) {
				o.apply(got)
			}
			if !got.Equal(want) {
				t.Fatalf("seed %d replica %d diverged", seed, replica)
			}
		}
	}
}

// TestPropertyMergeLaws: merge of states is commutative, associative and
// idempotent, and merging per-update states equals applying the updates.
func TestPropertyMergeLaws(t *testing.T) {
	for seed := uint64(0); seed < 300; seed++ {
		r := rand.New(rand.NewPCG(seed, 2))
		ops := randomOps(r)
		// Split the updates among three replicas at random.
		parts := [3]State{{}, {}, {}}
		for _, o := range ops {
			o.apply(parts[r.IntN(3)])
		}
		a, b, c := parts[0], parts[1], parts[2]
		merged := func(ss ...State) State {
			out := State{}
			for _, s := range ss {
				out.Merge(s)
			}
			return out
		}
		ab, ba := merged(a, b), merged(b, a)
		if !ab.Equal(ba) {
			t.Fatalf("seed %d: merge is not commutative", seed)
		}
		left := merged(merged(a, b), c)
		right := merged(a, merged(b, c))
		if !left.Equal(right) {
			t.Fatalf("seed %d: merge is not associative", seed)
		}
		twice := merged(a, a)
		if !twice.Equal(merged(a)) {
			t.Fatalf("seed %d: merge is not idempotent", seed)
		}
		all := State{}
		for _, o := range ops {
			all.Merge(o.asState())
		}
		applied := State{}
		for _, o := range ops {
			o.apply(applied)
		}
		if !all.Equal(applied) || !all.Equal(merged(a, b, c)) {
			t.Fatalf("seed %d: merging states differs from applying updates", seed)
		}
	}
}

func TestLastWriterWinsAndTombstones(t *testing.T) {
	s := State{}
	c := func(n uint64) Clock { return Clock{Count: n, Session: "s"} }
	if took, changed := s.Set("a", "cursor", Register{c(2), []byte("x")}); !took || !changed {
		t.Fatal("first write should take and change")
	}
	if took, _ := s.Set("a", "cursor", Register{c(1), []byte("old")}); took {
		t.Fatal("an older write must lose")
	}
	if _, changed := s.Set("a", "cursor", Register{c(3), []byte("x")}); changed {
		t.Fatal("same value, newer clock: not a visible change")
	}
	if !s.Remove("a", c(3).Server(1)) {
		t.Fatal("removal should hide a visible peer")
	}
	if _, ok := s["a"].Get("cursor"); ok {
		t.Fatal("removed channel still visible")
	}
	if _, changed := s.Set("a", "selection", Register{c(2), []byte("late")}); changed || s["a"].Visible() {
		t.Fatal("a write older than the tombstone must not revive the peer")
	}
	if _, changed := s.Set("a", "cursor", Register{c(4), []byte("back")}); !changed || !s["a"].Visible() {
		t.Fatal("a newer write revives the peer")
	}
}
