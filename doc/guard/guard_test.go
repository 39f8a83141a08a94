package guard

import (
	"encoding/binary"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/tandemhq/tandem/doc/amcheck"
	"github.com/tandemhq/tandem/doc/amcheck/amtest"
	"github.com/tandemhq/tandem/doc/amsync"
)

// A message whose changes come last first is taken whole, in an order the
// log can take, in time that grows with the message: the guard used to
// look at every waiting change again for each change it took, so 16,000
// empty changes (864 KB) held the room's lock for 8 s, and every other
// document's with it (evictIdle).
func TestAChainSentLastChangeFirstIsTakenInLinearTime(t *testing.T) {
	const n = 40_000
	chain := amtest.Chain(n, 0, 0)
	slices.Reverse(chain)
	var lim Limits
	lim.SetDefaults()
	l := &Ledger{log: amsync.NewLog()}
	start := time.Now()
	ad, err := l.Admit(lim, chain, l.log.HasBytes)
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if len(ad.Apply) != n || len(ad.wait) != 0 {
		t.Fatalf("took %d changes and held %d of %d", len(ad.Apply), len(ad.wait), n)
	}
	for i, c := range ad.Apply {
		if c.Seq != uint64(i+1) {
			t.Fatalf("change %d to take is seq %d", i, c.Seq)
		}
	}
	// Linear, this is well under a second (a few under -race); the
	// quadratic guard took minutes.
	if took > 30*time.Second {
		t.Fatalf("admitting %d changes took %v", n, took)
	}
}

func BenchmarkAdmitAChainLastChangeFirst(b *testing.B) {
	chain := amtest.Chain(10_000, 0, 0)
	slices.Reverse(chain)
	var lim Limits
	lim.SetDefaults()
	for b.Loop() {
		l := &Ledger{log: amsync.NewLog()}
		if _, err := l.Admit(lim, chain, l.log.HasBytes); err != nil {
			b.Fatal(err)
		}
	}
}

// apart returns n changes of n actors, none depending on another: each
// a head of its own.
func apart(n, from int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		actor := binary.BigEndian.AppendUint32([]byte{0xee}, uint32(from+i))
		out[i], _ = amtest.Encode(amtest.Change{Actors: [][]byte{actor}, Seq: 1, StartOp: 1})
	}
	return out
}

// A document's heads are bounded: one message of independent changes
// (about 50 bytes each) could otherwise give it any number, which every
// change the log takes, every peer's message and every client's load then
// pays for.
func TestADocumentsHeadsAreBounded(t *testing.T) {
	var lim Limits
	lim.SetDefaults()
	l := &Ledger{log: amsync.NewLog()}
	ad, err := l.Admit(lim, apart(maxHeads, 0), l.log.HasBytes)
	if err != nil {
		t.Fatalf("%d heads: %v", maxHeads, err)
	}
	for _, c := range ad.Apply { // what the room does with an admission (no dependencies here)
		if _, err := l.log.Add(c.Hash, nil, c.Raw); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Admit(lim, apart(1, maxHeads), l.log.HasBytes); !errors.Is(err, ErrLimit) {
		t.Fatalf("one head more: err = %v, want ErrLimit", err)
	}
}

// A stored change whose copy from a peer waits for a dependency takes
// that copy's place: it is neither lost when the peer leaves nor taken
// as the peer's (which would write it again).
func TestAStoredChangeReplacesAPeersWaitingCopy(t *testing.T) {
	chain := amtest.Chain(3, 1, 0)
	var lim Limits
	lim.SetDefaults()
	stored := func(bs ...[]byte) []Change {
		var out []Change
		for _, b := range bs {
			c, _, err := amcheck.ParseChange(b, amcheck.Limits{ListOps: true})
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, Change{Change: c, Raw: b})
		}
		return out
	}
	for _, tc := range []struct {
		name string
		then func(l *Ledger) *Admission
	}{
		{"the peer leaves, then the dependency comes", func(l *Ledger) *Admission {
			l.Queue(l.AdmitStored(lim, stored(chain[1]), l.log.HasBytes), "")
			l.DropFrom("p")
			return l.AdmitStored(lim, stored(chain[0]), l.log.HasBytes)
		}},
		{"both come at once", func(l *Ledger) *Admission {
			return l.AdmitStored(lim, stored(chain[0], chain[1]), l.log.HasBytes)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLedger(amsync.NewLog(), nil, nil)
			ad, err := l.Admit(lim, chain[1:2], l.log.HasBytes)
			if err != nil {
				t.Fatal(err)
			}
			l.Queue(ad, "p")
			if peers, _ := l.Waiting(); peers != 1 {
				t.Fatalf("%d of the peer's changes wait, want 1", peers)
			}
			ad = tc.then(l)
			if len(ad.Apply) != 2 {
				t.Fatalf("admitted %d changes, want both", len(ad.Apply))
			}
			for i, c := range ad.Apply {
				if !c.Stored {
					t.Errorf("change %d is taken as a peer's: it would be written again", i)
				}
				var deps []amsync.Hash
				for _, d := range c.Deps {
					deps = append(deps, d)
				}
				if _, err := l.log.Add(c.Hash, deps, c.Raw); err != nil { // as the room takes them
					t.Fatal(err)
				}
			}
			l.Record(ad.Apply)
			if peers, stored := l.Waiting(); peers != 0 || stored != 0 {
				t.Errorf("%d of the peer's and %d stored changes still wait", peers, stored)
			}
		})
	}
}

// Two different changes of one actor's sequence number, each taken by
// another node (the store then holds both): the one that comes second
// is left out, and so is what depends on it, which waits for it; the
// document automerge is given holds one change per sequence number.
func TestAStoredChangeOfATakenSequenceNumberIsLeftOut(t *testing.T) {
	var lim Limits
	lim.SetDefaults()
	base, baseHash := refBase()
	parse := func(b []byte) Change {
		c, _, err := amcheck.ParseChange(b, amcheck.Limits{ListOps: true})
		if err != nil {
			t.Fatal(err)
		}
		return Change{Change: c, Raw: b}
	}
	root := amcheck.OpID{}
	first := byB(baseHash, amtest.Op{Obj: root, MapKey: true, Key: "x", Action: amcheck.MakeMap})
	second := byB(baseHash, amtest.Op{Obj: root, MapKey: true, Key: "y", Action: amcheck.MakeList})
	secondHash := parse(second).Hash
	after, _ := amtest.Encode(amtest.Change{Deps: [][32]byte{secondHash}, Actors: [][]byte{amtest.ActorC}, Seq: 1, StartOp: 10,
		Ops: []amtest.Op{{Obj: root, MapKey: true, Key: "z", Action: amcheck.MakeMap}}})

	for _, tc := range []struct {
		name string
		in   [][][]byte // what comes, in turn
	}{
		{"one after the other", [][][]byte{{base, first}, {second, after}}},
		{"in one load", [][][]byte{{base, first, second, after}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLedger(amsync.NewLog(), nil, nil)
			var dropped []Dropped
			for _, batch := range tc.in {
				var cs []Change
				for _, b := range batch {
					cs = append(cs, parse(b))
				}
				ad := l.AdmitStored(lim, cs, l.log.HasBytes)
				for _, c := range ad.Apply { // what the room does with an admission
					var deps []amsync.Hash
					for _, d := range c.Deps {
						deps = append(deps, d)
					}
					if _, err := l.log.Add(c.Hash, deps, c.Raw); err != nil {
						t.Fatal(err)
					}
				}
				l.Record(ad.Apply)
				l.Queue(ad, "")
				dropped = append(dropped, ad.Dropped...)
			}
			if l.log.Len() != 2 || l.log.Has(secondHash) {
				t.Fatalf("the log holds %d changes (the second: %v), want the base and the first", l.log.Len(), l.log.Has(secondHash))
			}
			if len(dropped) != 1 || dropped[0].Hash != secondHash || !errors.Is(dropped[0].Err, ErrSeqTaken) {
				t.Fatalf("dropped %+v, want the second with ErrSeqTaken", dropped)
			}
			if _, stored := l.Waiting(); stored != 1 {
				t.Fatalf("%d stored changes wait, want the one on the second", stored)
			}
		})
	}
}

// The same stored change twice in one load (two snapshots made at once
// both hold it) is taken once, and nothing is left out for it.
func TestAStoredChangeTwiceInOneLoadIsTakenOnce(t *testing.T) {
	var lim Limits
	lim.SetDefaults()
	base, baseHash := refBase()
	first := byB(baseHash, amtest.Op{Obj: amcheck.OpID{}, MapKey: true, Key: "x", Action: amcheck.MakeMap})
	var cs []Change
	for _, b := range [][]byte{base, first, base, first} {
		c, _, err := amcheck.ParseChange(b, amcheck.Limits{ListOps: true})
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, Change{Change: c, Raw: b})
	}
	l := NewLedger(amsync.NewLog(), nil, nil)
	ad := l.AdmitStored(lim, cs, l.log.HasBytes)
	if len(ad.Apply) != 2 || len(ad.Dropped) != 0 {
		t.Fatalf("took %d and left out %d, want 2 and none", len(ad.Apply), len(ad.Dropped))
	}
}
