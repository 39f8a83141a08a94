package doc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/automerge/automerge-go"
	"github.com/fxamacker/cbor/v2"
	"github.com/tandemhq/tandem/doc/amcheck"
	"github.com/tandemhq/tandem/doc/amcheck/amtest"

	"github.com/tandemhq/tandem/doc/store"
)

// gateStore holds every write until the test lets it through, and tells
// the test when one has started.
type gateStore struct {
	store.Store
	started chan struct{}
	proceed chan struct{}
}

func newGateStore(t testing.TB) *gateStore {
	return &gateStore{Store: openStore(t, t.TempDir()), started: make(chan struct{}, 1), proceed: make(chan struct{})}
}

func (g *gateStore) Write(ctx context.Context, b []store.Write) error {
	select {
	case g.started <- struct{}{}:
	default:
	}
	<-g.proceed
	return g.Store.Write(ctx, b)
}

// fakeCluster records the document messages the hub publishes for other
// nodes.
type fakeCluster struct {
	mu        sync.Mutex
	published []clusterMsg
}

func (f *fakeCluster) PublishDocument(_ string, payload []byte) {
	var m clusterMsg
	if err := cbor.Unmarshal(payload, &m); err != nil {
		panic(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.published = append(f.published, m)
}

func (f *fakeCluster) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.published)
}

// TestNothingNamesAChangeBeforeItIsStored: while the write of a change is
// under way, neither its author nor another peer nor another node hears of
// it; once the write is done, all do. Repeated, so that a message slipping
// past the store in any round fails the test.
func TestNothingNamesAChangeBeforeItIsStored(t *testing.T) {
	g := newGateStore(t)
	rep := &fakeCluster{}
	h := newTestHub(t, g, Config{Cluster: rep})
	t.Cleanup(func() { close(g.proceed) }) // before the hub's Close, which may write
	a, b := newClient("a"), newClient("b")
	waiting := func() bool { // the room holds an applied change not yet stored
		r := h.loadedRoom(testDoc)
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.applied > r.stored
	}
	sent := func() int { return len(a.peer.syncsSoFar()) + len(b.peer.syncsSoFar()) + rep.count() }
	// b joins the (not yet existing) document: its request is answered
	// unavailable at once, nothing being held.
	m, _ := b.state.GenerateMessage()
	if err := h.Sync(context.Background(), b.peer, SyncMessage{DocumentID: testDoc, Data: m.Bytes(), Request: true}); err != nil {
		t.Fatal(err)
	}
	for round := range 100 {
		a.setText(t, "k", string(rune('a'+round%26)))
		stored := false
		for range 10 { // a's sync loop, until the server has the change
			m, ok := a.state.GenerateMessage()
			if !ok {
				break
			}
			before := sent()
			if err := h.Sync(context.Background(), a.peer, SyncMessage{DocumentID: testDoc, Data: m.Bytes()}); err != nil {
				t.Fatal(err)
			}
			if waiting() {
				<-g.started // the write is under way, held at the gate
				if n := sent() - before; n != 0 {
					t.Fatalf("round %d: %d messages named the change before it was stored", round, n)
				}
				g.proceed <- struct{}{}
				h.Flush(context.Background()) // returns once that write has released what it held
				if len(b.peer.syncsSoFar()) == 0 || rep.count() != round+1 {
					t.Fatalf("round %d: after the write, other peer %d, published %d",
						round, len(b.peer.syncsSoFar()), rep.count())
				}
				stored = true
			}
			for _, data := range a.peer.takeSyncs() {
				if _, err := a.state.ReceiveMessage(data); err != nil {
					t.Fatal(err)
				}
			}
		}
		if !stored {
			t.Fatalf("round %d: the change never reached the store", round)
		}
		// Both clients take what they were sent and acknowledge it; the
		// acknowledgements change nothing, so they need no write.
		for _, c := range []*client{a, b} {
			for _, data := range c.peer.takeSyncs() {
				if _, err := c.state.ReceiveMessage(data); err != nil {
					t.Fatal(err)
				}
			}
			for {
				m, ok := c.state.GenerateMessage()
				if !ok {
					break
				}
				if err := h.Sync(context.Background(), c.peer, SyncMessage{DocumentID: testDoc, Data: m.Bytes()}); err != nil {
					t.Fatal(err)
				}
				for _, data := range c.peer.takeSyncs() {
					if _, err := c.state.ReceiveMessage(data); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		if got, want := b.get(t, "k"), a.get(t, "k"); got != want {
			t.Fatalf("round %d: b has %q, a %q", round, got, want)
		}
	}
}

// While the store fails, a room takes at most maxUnstored messages with
// changes; the next is refused whole (ErrStoreBehind), so what waits for
// the store stops growing. Once a write succeeds, changes are taken again.
func TestChangesAreRefusedWhileTheStoreIsFarBehind(t *testing.T) {
	fs := &store.Down{Store: openStore(t, t.TempDir())}
	h := newTestHub(t, fs, Config{})
	a := newClient("a")
	a.setText(t, "n", "0")
	a.level(t, h, false)
	fs.SetDown(true)
	send := func() error {
		m, ok := a.state.GenerateMessage()
		if !ok {
			t.Fatal("a has nothing to send")
		}
		return h.Sync(context.Background(), a.peer, SyncMessage{DocumentID: testDoc, Data: m.Bytes()})
	}
	for i := 1; i <= maxUnstored; i++ {
		a.setText(t, "n", fmt.Sprint(i)) // sent at once, no answer between (they are held)
		if err := send(); err != nil {
			t.Fatalf("change %d: %v", i, err)
		}
	}
	r := roomOf(t, h, testDoc)
	r.mu.Lock()
	heads, held := r.log.Heads(), len(r.untilStored)
	r.mu.Unlock()
	a.setText(t, "n", "over")
	if err := send(); !errors.Is(err, ErrStoreBehind) {
		t.Fatalf("past %d unstored messages: %v, want ErrStoreBehind", maxUnstored, err)
	}
	r.mu.Lock()
	same, heldNow := slices.Equal(heads, r.log.Heads()), len(r.untilStored)
	r.mu.Unlock()
	if !same || heldNow != held {
		t.Fatalf("the refused message changed the room: heads kept %v, held %d -> %d", same, held, heldNow)
	}
	fs.SetDown(false)
	if err := h.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The peer comes back (a fresh sync state, as after a reconnection)
	// and its refused change is taken.
	a.peer.takeSyncs()
	a.state = automerge.NewSyncState(a.doc)
	a.level(t, h, false)
	c := newClient("c")
	c.level(t, h, true)
	if got := c.get(t, "n"); got != "over" {
		t.Fatalf("the room has n = %q", got)
	}
}

// A document stored before the guard refused such changes holds one that
// automerge-go loads but would not save back as it was (its columns are
// not written as automerge writes them). A compaction writes every change
// as the bytes it came in, that one too: after a restart the document
// holds everything.
func TestACompactionKeepsEveryChangeAsItsBytes(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	v, raw := amtest.String("kept")
	old, _ := amtest.Encode(amtest.Change{Actors: [][]byte{amtest.ActorA}, Seq: 1, StartOp: 1, LoneRuns: true, Ops: []amtest.Op{
		{MapKey: true, Key: "old", Action: amcheck.Put, Value: v, Raw: raw},
		{MapKey: true, Key: "n", Action: amcheck.Put, Value: v, Raw: raw},
	}})
	if err := s.Write(context.Background(), []store.Write{{DocumentID: testDoc, Chunks: [][]byte{old}}}); err != nil {
		t.Fatal(err)
	}
	h := newTestHub(t, s, Config{CompactAfter: 1})
	a := newClient("a")
	a.sync(t, h, true)
	if got := a.get(t, "old"); got != "kept" {
		t.Fatalf("a sees old = %q", got)
	}
	a.setText(t, "new", "added")
	a.sync(t, h, false)
	stored := flushedStored(t, h, s)
	if stored.Snapshot == nil || !bytes.HasPrefix(stored.Snapshot, old) {
		t.Fatalf("stored: snapshot %d bytes, %d chunks; want a snapshot starting with the old change", len(stored.Snapshot), len(stored.Chunks))
	}
	h.Close(context.Background())

	h2 := newTestHub(t, s, Config{CompactAfter: 1})
	b := newClient("b")
	b.sync(t, h2, true)
	if b.get(t, "old") != "kept" || b.get(t, "new") != "added" {
		t.Fatalf("after a restart b sees old = %q, new = %q", b.get(t, "old"), b.get(t, "new"))
	}
}

// A compaction's Covers is a pure function of what takeWrite took under
// the room's lock: the store calls it during its write, one chunk after
// another, and it reads nothing of the room. So it answers while someone
// else holds the room's lock, and a change the room takes after the
// write was taken is not covered.
func TestACompactionsCoversTakesNoLockOfTheRoom(t *testing.T) {
	c := newClient("a")
	c.setText(t, "n", "1")
	first := c.doc.SaveIncremental()
	c.setText(t, "n", "2")
	second := c.doc.SaveIncremental()
	r := roomWith(t, c.doc)
	r.mu.Lock() // as takeWrite holds it
	covers := r.coverage(r.log.Len())
	c.setText(t, "n", "3")
	later := c.doc.SaveIncremental()
	cs, err := readChanges(nil, later)
	if err != nil {
		t.Fatal(err)
	}
	addToLog(r.log, cs) // the room moves on before the store calls Covers

	got := make(chan []bool, 1)
	go func() { // the store's write, while the room's lock is held
		got <- []bool{covers(first), covers(second), covers(slices.Concat(first, second)),
			covers(later), covers(slices.Concat(first, later)), covers([]byte("garbage"))}
	}()
	select {
	case g := <-got:
		if want := []bool{true, true, true, false, false, false}; !slices.Equal(g, want) {
			t.Errorf("covers first, second, both, later, first and later, garbage = %v, want %v", g, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Covers did not return while the room's lock was held")
	}
	r.mu.Unlock()

	// A compaction of a prefix covers that prefix only.
	r.mu.Lock()
	covers = r.coverage(1)
	r.mu.Unlock()
	if !covers(first) || covers(second) {
		t.Errorf("a compaction of the first change covers it: %v, the second: %v", covers(first), covers(second))
	}
}
