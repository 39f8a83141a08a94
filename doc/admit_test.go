package doc

import (
	"context"
	"iter"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tandemhq/tandem/doc/amcheck"
	"github.com/tandemhq/tandem/doc/amcheck/amtest"
	"github.com/tandemhq/tandem/doc/amsync"
	"github.com/tandemhq/tandem/doc/store"
)

// A message's changes are read and checked without the room's lock: a
// large document, or one crafted to take long, takes its sender's time,
// not its room's or the node's.

// gate stops whoever passes it until the test frees it, or ends.
type gate struct {
	entered, release chan struct{}
	once             sync.Once
}

// newGate returns a closed gate; t's end frees it. Made after the hub, it
// is freed before the hub closes: a failed test's message ends first.
func newGate(t *testing.T) *gate {
	g := &gate{entered: make(chan struct{}, 1), release: make(chan struct{})}
	t.Cleanup(g.free)
	return g
}

// pass reports the caller on entered and waits until the gate is freed.
func (g *gate) pass() {
	g.entered <- struct{}{}
	<-g.release
}

// reached waits, up to 10 s, for someone to reach the gate.
func (g *gate) reached(t *testing.T, what string) {
	t.Helper()
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s never reached the gate", what)
	}
}

func (g *gate) free() { g.once.Do(func() { close(g.release) }) }

// blockChecks stops h's checks at a gate.
func blockChecks(t *testing.T, h *Hub) *gate {
	g := newGate(t)
	h.checkHook = func(string) { g.pass() }
	return g
}

// within fails the test if f does not return within 10 s: it would be
// waiting for the check held up.
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s waited for another peer's message", what)
	}
}

// oneChange is a change by its own actor, depending on nothing, and its
// hash.
func oneChange(actor string) ([]byte, amsync.Hash) {
	c, hash := amtest.Encode(amtest.Change{Actors: [][]byte{[]byte(actor)}, Seq: 1, StartOp: 1,
		Ops: []amtest.Op{amtest.Put(amcheck.OpID{}, actor)}})
	return c, hash
}

func TestTheRoomGoesOnWhileAMessageIsChecked(t *testing.T) {
	s := openStore(t, t.TempDir())
	h := newTestHub(t, s, Config{})
	ctx := context.Background()
	b, c := newClient("b"), newClient("c")
	b.sync(t, h, true)
	c.sync(t, h, true)
	// The room has a change not yet written: the hub's writes take the
	// room's lock to find it.
	w := &fakePeer{id: "w", told: make(chan struct{}, 1)}
	wChange, wHash := oneChange("w-actor")
	if err := sendChanges(h, testDoc, w, wChange); err != nil {
		t.Fatal(err)
	}
	blocked := blockChecks(t, h)
	a := &fakePeer{id: "a", told: make(chan struct{}, 1)}
	sent := make(chan error, 1)
	go func() { sent <- sendChanges(h, testDoc, a, amtest.Chain(3, 10, 0)...) }()
	blocked.reached(t, "a's check")

	within(t, "an ephemeral", func() {
		if err := h.Ephemeral(ctx, b.peer, testDoc, Ephemeral{SenderID: "b", SessionID: "s", Count: 1, Data: []byte{0xa0}}); err != nil {
			t.Error(err)
		}
	})
	c.peer.mu.Lock()
	got := len(c.peer.ephemerals)
	c.peer.mu.Unlock()
	if got != 1 {
		t.Fatalf("c got %d ephemerals, want b's", got)
	}
	var stored store.Stored
	within(t, "the hub's write", func() { stored = flushedStored(t, h, s) })
	if !storedHolds(stored, []amsync.Hash{wHash}) {
		t.Fatal("the store lacks w's change")
	}
	within(t, "an acknowledgement", func() { c.sync(t, h, false) })
	within(t, "a leave", func() { h.Leave(c.peer, testDoc) })

	blocked.free()
	if err := <-sent; err != nil {
		t.Fatalf("a's changes, once checked: %v", err)
	}
	h.checkHook = nil
	b.sync(t, h, false)
	if got := b.doc.Heads(); len(got) != 2 {
		t.Fatalf("b holds %d heads, want w's change's and a's chain's", len(got))
	}
}

// The changes of a peer that leaves while another peer's message is
// checked, waiting for a dependency, are let go once that check is done.
func TestAPeerLeavingDuringACheckHasItsWaitingChangesDropped(t *testing.T) {
	h := newTestHub(t, openStore(t, t.TempDir()), Config{})
	b := &fakePeer{id: "b", told: make(chan struct{}, 1)}
	if err := sendChanges(h, testDoc, b, waitingChange(1, 10)); err != nil {
		t.Fatal(err)
	}
	if h.waiting.Load() == 0 {
		t.Fatal("b's change does not wait")
	}
	blocked := blockChecks(t, h)
	a := &fakePeer{id: "a", told: make(chan struct{}, 1)}
	sent := make(chan error, 1)
	aChange, _ := oneChange("a-actor")
	go func() { sent <- sendChanges(h, testDoc, a, aChange) }()
	blocked.reached(t, "a's check")
	within(t, "b's leave", func() { h.Leave(b, testDoc) })
	if h.waiting.Load() == 0 {
		t.Fatal("b's waiting change was dropped while a's changes were checked")
	}
	blocked.free()
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if n := h.waiting.Load(); n != 0 {
		t.Fatalf("%d bytes still wait for b, who left", n)
	}
}

// Checks run beside everything that takes the room's lock alone, round
// after round: acknowledgements, ephemerals, writes, and peers leaving
// with changes that wait (go test -race finds what they share).
func TestChecksRunBesideTheRoomsOtherWork(t *testing.T) {
	s := openStore(t, t.TempDir())
	h := newTestHub(t, s, Config{})
	ctx := context.Background()
	c := newClient("c")
	c.sync(t, h, true)
	a := &fakePeer{id: "a", told: make(chan struct{}, 1)}
	const rounds = 100
	chain := amtest.Chain(rounds, 1000, 0) // each takes a while to check
	for i := range rounds {
		var wg sync.WaitGroup
		wg.Add(3)
		go func() {
			defer wg.Done()
			if err := sendChanges(h, testDoc, a, chain[i]); err != nil {
				t.Error(err)
			}
		}()
		go func() {
			defer wg.Done()
			b := &fakePeer{id: "b", told: make(chan struct{}, 1)}
			if err := sendChanges(h, testDoc, b, waitingChange(i, 5)); err != nil {
				t.Error(err)
			}
			h.Leave(b, testDoc)
		}()
		go func() {
			defer wg.Done()
			if err := h.Ephemeral(ctx, c.peer, testDoc, Ephemeral{SenderID: "c", SessionID: "s", Count: uint64(i + 1), Data: []byte{0xa0}}); err != nil {
				t.Error(err)
			}
			if err := h.Flush(ctx); err != nil {
				t.Error(err)
			}
		}()
		wg.Wait()
		if t.Failed() {
			return
		}
	}
	c.sync(t, h, false)
	if n := h.waiting.Load(); n != 0 {
		t.Fatalf("%d bytes still wait for peers that left", n)
	}
	cs, err := c.doc.Changes()
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != rounds || len(c.doc.Heads()) != 1 {
		t.Fatalf("c holds %d changes and %d heads, want the chain's %d and one", len(cs), len(c.doc.Heads()), rounds)
	}
}

// blockingObserver stops in Applied at its gate while block is set.
type blockingObserver struct {
	funcObserver
	block atomic.Bool
	gate  *gate
}

func (o *blockingObserver) Applied(Peer, iter.Seq[*amcheck.Change], bool) {
	if o.block.Load() {
		o.gate.pass()
	}
}

// The observer is told what the log took under the apply lock alone:
// while it reads (the mention tracker may read the text several times for
// one message), the room goes on, and a peer that leaves meanwhile has
// its waiting changes dropped once the message is done.
func TestTheRoomGoesOnWhileTheObserverIsTold(t *testing.T) {
	obs := &blockingObserver{}
	h := newTestHub(t, openStore(t, t.TempDir()), Config{Observe: func(Room) Observer { return obs }})
	obs.gate = newGate(t)
	ctx := context.Background()
	c := newClient("c")
	c.sync(t, h, true)
	b := &fakePeer{id: "b", told: make(chan struct{}, 1)}
	if err := sendChanges(h, testDoc, b, waitingChange(1, 10)); err != nil {
		t.Fatal(err)
	}
	obs.block.Store(true)
	a := &fakePeer{id: "a", told: make(chan struct{}, 1)}
	aChange, _ := oneChange("a-actor")
	sent := make(chan error, 1)
	go func() { sent <- sendChanges(h, testDoc, a, aChange) }()
	obs.gate.reached(t, "the observer, told of a's change,")
	within(t, "an ephemeral", func() {
		if err := h.Ephemeral(ctx, c.peer, testDoc, Ephemeral{SenderID: "c", SessionID: "s", Count: 1, Data: []byte{0xa0}}); err != nil {
			t.Error(err)
		}
	})
	within(t, "an acknowledgement", func() { c.sync(t, h, false) })
	within(t, "b's leave", func() { h.Leave(b, testDoc) })
	obs.block.Store(false)
	obs.gate.free()
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if n := h.waiting.Load(); n != 0 {
		t.Fatalf("%d bytes still wait for b, who left", n)
	}
}
