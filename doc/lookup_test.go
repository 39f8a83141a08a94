package doc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/automerge/automerge-go"

	"github.com/tandemhq/tandem/doc/store"
)

// syncLoop runs c's sync loop with the hub for document id until neither
// side has anything to send. It is safe on any goroutine: it returns what
// went wrong instead of failing the test.
func (c *client) syncLoop(h *Hub, id string, request bool) error {
	return c.syncLoopAs(h, c.peer, id, request)
}

// syncLoopAs is syncLoop with the hub seeing c as the peer p.
func (c *client) syncLoopAs(h *Hub, p Peer, id string, request bool) error {
	for i := 0; i < 50; i++ {
		progressed := false
		for _, data := range c.peer.takeSyncs() {
			if _, err := c.state.ReceiveMessage(data); err != nil {
				return err
			}
			progressed = true
		}
		if m, ok := c.state.GenerateMessage(); ok {
			err := h.Sync(context.Background(), p, SyncMessage{DocumentID: id, Data: m.Bytes(), Request: request})
			if err != nil {
				return err
			}
			if err := h.Flush(context.Background()); err != nil {
				return err
			}
			progressed = true
		}
		if !progressed {
			return nil
		}
	}
	return errors.New("sync did not settle")
}

// fakeFinder hands each question to the test.
type fakeFinder struct{ asked chan func(bool) }

func (f *fakeFinder) FindDocument(_ string, done func(bool)) { f.asked <- done }

// sharedStore lets two hubs, as two nodes, use one store; the test closes it.
type sharedStore struct{ store.Store }

func (sharedStore) Close() error { return nil }

// lookupNow ends the grace window of every request waiting in r and runs
// the room's lookup on this goroutine, as its timer would.
func lookupNow(h *Hub, r *room) {
	r.mu.Lock()
	for i := range r.asked {
		r.asked[i].due = time.Now().Add(-time.Millisecond)
	}
	gen := r.lookupGen
	r.mu.Unlock()
	h.lookup(r, gen)
}

// receiveUntil has c take what the hub sends it until cond holds.
func (c *client) receiveUntil(t testing.TB, h *Hub, id, what string, cond func() bool) {
	t.Helper()
	c.peer.waitUntil(t, what, func() bool {
		if err := c.syncLoop(h, id, false); err != nil {
			t.Fatal(err)
		}
		return cond()
	})
}

func roomOf(t testing.TB, h *Hub, id string) *room {
	t.Helper()
	r, err := h.acquire(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestNeverCreatedIsUnavailableAfterItsGrace(t *testing.T) {
	const grace = 100 * time.Millisecond
	h := newTestHub(t, openStore(t, t.TempDir()), Config{UnavailableGrace: grace})
	b := newClient("b")
	start := time.Now()
	b.sync(t, h, true)
	b.sync(t, h, true) // asking again keeps the first window
	b.peer.waitUnavailable(t)
	if took := time.Since(start); took < grace {
		t.Fatalf("doc-unavailable after %v, before the %v grace window", took, grace)
	}
	h.Close(context.Background()) // waits for every lookup
	if n := b.peer.unavailableCount(); n != 1 {
		t.Fatalf("doc-unavailable sent %d times, want once", n)
	}
}

// A request that reaches the hub before the creator's changes, and the
// creator's sync, run at once on their own goroutines, as two connections
// do; the requester must get the document every time, never
// doc-unavailable.
func TestRequestRacingTheCreatorGetsTheDocument(t *testing.T) {
	h := newTestHub(t, openStore(t, t.TempDir()), Config{})
	const rounds = 300
	var requesters []*client
	for i := 0; i < rounds; i++ {
		id := fmt.Sprintf("race-%d", i)
		a, b := newClient(fmt.Sprintf("a%d", i)), newClient(fmt.Sprintf("b%d", i))
		a.setText(t, "title", id)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		wg.Add(2)
		go func() { defer wg.Done(); errs[0] = a.syncLoop(h, id, false) }()
		go func() { defer wg.Done(); errs[1] = b.syncLoop(h, id, true) }()
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		// The requester may have finished first; the document is then
		// pushed to it: take what it was sent.
		if err := b.syncLoop(h, id, false); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		if got := b.get(t, "title"); got != id {
			t.Fatalf("round %d: the requester sees %q", i, got)
		}
		requesters = append(requesters, b)
	}
	h.Close(context.Background()) // every lookup has decided
	for i, b := range requesters {
		if n := b.peer.unavailableCount(); n != 0 {
			t.Fatalf("round %d: the requester was told doc-unavailable", i)
		}
	}
}

// Changes read from a connection but not yet applied hold the verdict
// back: the lookup waits for them.
func TestChangesOnTheirWayHoldTheVerdict(t *testing.T) {
	h := newTestHub(t, openStore(t, t.TempDir()), Config{UnavailableGrace: time.Millisecond})
	r := roomOf(t, h, testDoc)
	a := newClient("a")
	a.setText(t, "title", "coming")
	cs, err := a.doc.Changes()
	if err != nil {
		t.Fatal(err)
	}
	msg := messageWithChanges(nil, cs)
	sm, err := parseSyncMessage(msg)
	if err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	r.arriving++ // as Hub.Sync counts it, before taking the lock
	r.mu.Unlock()

	b := newClient("b")
	b.sync(t, h, true)
	lookupNow(h, r)
	if n := b.peer.unavailableCount(); n != 0 {
		t.Fatal("doc-unavailable while changes were on their way")
	}
	if err := r.receiveSync(h, a.peer, SyncMessage{DocumentID: testDoc, Data: msg}, sm, true); err != nil {
		t.Fatal(err)
	}
	h.markDirty(r) // as Hub.Sync does
	if err := h.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	b.sync(t, h, false)
	if got := b.get(t, "title"); got != "coming" {
		t.Fatalf("b sees %q", got)
	}
	h.Close(context.Background())
	if n := b.peer.unavailableCount(); n != 0 {
		t.Fatal("doc-unavailable after the document arrived")
	}
}

// A creator's first message names its heads but carries no changes; until
// it sends them, a request waits, and a member that never sends them
// holds requests back for aheadWait only.
func TestAMemberThatHasTheDocumentHoldsTheVerdict(t *testing.T) {
	h := newTestHub(t, openStore(t, t.TempDir()), Config{UnavailableGrace: time.Millisecond})
	a := newClient("a")
	a.setText(t, "title", "mine")
	first, ok := a.state.GenerateMessage()
	if !ok {
		t.Fatal("no first message")
	}
	if err := h.Sync(context.Background(), a.peer, SyncMessage{DocumentID: testDoc, Data: first.Bytes()}); err != nil {
		t.Fatal(err)
	}
	b := newClient("b")
	b.sync(t, h, true)
	r := roomOf(t, h, testDoc)
	lookupNow(h, r)
	if b.peer.unavailableCount() != 0 {
		t.Fatal("doc-unavailable while a member said it has the document")
	}
	a.sync(t, h, false) // the rest of a's sync loop: its changes
	b.sync(t, h, false)
	if got := b.get(t, "title"); got != "mine" {
		t.Fatalf("b sees %q", got)
	}

	// A member that claims heads it never sends.
	saved := aheadWait
	aheadWait = 50 * time.Millisecond
	t.Cleanup(func() { aheadWait = saved })
	liar := &fakePeer{id: "liar"}
	claim := newClient("x")
	claim.setText(t, "k", "v")
	m, _ := claim.state.GenerateMessage()
	const other = "3z6nXk1ZJj2Lu7JkH2nF7C8tZ5pH"
	if err := h.Sync(context.Background(), liar, SyncMessage{DocumentID: other, Data: m.Bytes()}); err != nil {
		t.Fatal(err)
	}
	c := newClient("c")
	start := time.Now()
	if err := c.syncLoop(h, other, true); err != nil {
		t.Fatal(err)
	}
	c.peer.waitUnavailable(t)
	// lookupNow moved the window's end 1 ms before it ran.
	if took := time.Since(start); took < aheadWait-2*time.Millisecond {
		t.Fatalf("doc-unavailable after %v, before aheadWait %v", took, aheadWait)
	}
}

// Another node stored the document after this node loaded the room empty:
// the lookup reads the store again.
func TestLookupReadsTheStoreAgain(t *testing.T) {
	shared := openStore(t, t.TempDir())
	h1 := newTestHub(t, sharedStore{shared}, Config{})
	h2 := newTestHub(t, sharedStore{shared}, Config{UnavailableGrace: time.Millisecond})
	early := newClient("early")
	early.sync(t, h2, true) // h2 loads the room: nothing there yet
	early.peer.waitUnavailable(t)

	a := newClient("a")
	a.setText(t, "title", "from node 1")
	a.sync(t, h1, false) // stored by node 1

	b := newClient("b")
	b.sync(t, h2, true)
	b.receiveUntil(t, h2, testDoc, "the stored document", func() bool { return b.get(t, "title") == "from node 1" })
	if b.peer.unavailableCount() != 0 {
		t.Fatal("b was told doc-unavailable for a stored document")
	}
}

// In a cluster the lookup asks the other nodes; one that holds the document
// stores it first, and this node reads it from the shared store.
func TestLookupAsksTheCluster(t *testing.T) {
	shared := openStore(t, t.TempDir())
	finder := &fakeFinder{asked: make(chan func(bool), 1)}
	h1 := newTestHub(t, sharedStore{shared}, Config{})
	h2 := newTestHub(t, sharedStore{shared}, Config{UnavailableGrace: time.Millisecond, Finder: finder})

	b := newClient("b")
	b.sync(t, h2, true)
	done := <-finder.asked // the grace window passed; the store had nothing
	a := newClient("a")
	a.setText(t, "title", "held on node 1")
	a.sync(t, h1, false)
	held := make(chan bool, 1)
	h1.Holds(testDoc, func(ok bool) { held <- ok })
	if !<-held {
		t.Fatal("node 1 says it does not hold the document")
	}
	done(true)
	b.receiveUntil(t, h2, testDoc, "the document node 1 holds", func() bool { return b.get(t, "title") == "held on node 1" })
	if b.peer.unavailableCount() != 0 {
		t.Fatal("b was told doc-unavailable")
	}

	// Nobody has this one: doc-unavailable once the cluster says so.
	const other = "3z6nXk1ZJj2Lu7JkH2nF7C8tZ5pH"
	h3 := newTestHub(t, sharedStore{shared}, Config{UnavailableGrace: time.Millisecond, Finder: finder})
	c := newClient("c")
	if err := c.syncLoop(h3, other, true); err != nil {
		t.Fatal(err)
	}
	(<-finder.asked)(false)
	c.peer.waitUnavailable(t)
}

func TestHoldsAnswersOnceStored(t *testing.T) {
	gate := newGateStore(t)
	h := newTestHub(t, gate, Config{})
	answers := make(chan bool, 4)
	answer := func(ok bool) { answers <- ok }

	h.Holds(testDoc, answer)
	if <-answers {
		t.Fatal("holds a document it never saw")
	}
	a := newClient("a")
	a.setText(t, "title", "x")
	if err := h.Sync(context.Background(), a.peer, SyncMessage{DocumentID: testDoc, Data: firstWithChanges(t, a)}); err != nil {
		t.Fatal(err)
	}
	<-gate.started // the write is under way, held at the gate
	h.Holds(testDoc, answer)
	select {
	case ok := <-answers:
		t.Fatalf("answered %v before the document was stored", ok)
	default:
	}
	close(gate.proceed)
	if !<-answers {
		t.Fatal("does not hold the stored document")
	}
}

// firstWithChanges returns a sync message carrying all of c's changes, as
// a client sends once it knows the server has nothing.
func firstWithChanges(t testing.TB, c *client) []byte {
	t.Helper()
	cs, err := c.doc.Changes()
	if err != nil {
		t.Fatal(err)
	}
	return messageWithChanges([]automerge.ChangeHash{}, cs)
}

// Another node's question waits while the document is on its way here: a
// member named heads the room lacks; the answer comes once its changes are
// applied and stored.
func TestHoldsWaitsForADocumentOnItsWay(t *testing.T) {
	h := newTestHub(t, openStore(t, t.TempDir()), Config{})
	a := newClient("a")
	a.setText(t, "title", "coming")
	first, _ := a.state.GenerateMessage() // heads, no changes yet
	if err := h.Sync(context.Background(), a.peer, SyncMessage{DocumentID: testDoc, Data: first.Bytes()}); err != nil {
		t.Fatal(err)
	}
	answers := make(chan bool, 1)
	h.Holds(testDoc, func(ok bool) { answers <- ok })
	select {
	case ok := <-answers:
		t.Fatalf("answered %v while the document was on its way", ok)
	default:
	}
	a.sync(t, h, false) // the changes follow
	if !<-answers {
		t.Fatal("does not hold the document that arrived")
	}

	// A member that named heads and leaves without sending them: the
	// question is answered no when it leaves.
	const other = "3z6nXk1ZJj2Lu7JkH2nF7C8tZ5pH"
	x := newClient("x")
	x.setText(t, "k", "v")
	m, _ := x.state.GenerateMessage()
	if err := h.Sync(context.Background(), x.peer, SyncMessage{DocumentID: other, Data: m.Bytes()}); err != nil {
		t.Fatal(err)
	}
	h.Holds(other, func(ok bool) { answers <- ok })
	h.Leave(x.peer, other)
	if <-answers {
		t.Fatal("holds a document that never arrived")
	}
}

// A creator whose first message (heads, no changes) arrives while the
// lookup reads the store and asks the cluster holds the verdict back.
func TestACreatorArrivingDuringTheLookupHoldsTheVerdict(t *testing.T) {
	finder := &fakeFinder{asked: make(chan func(bool), 1)}
	h := newTestHub(t, openStore(t, t.TempDir()), Config{UnavailableGrace: time.Millisecond, Finder: finder})
	b := newClient("b")
	b.sync(t, h, true)
	done := <-finder.asked // the lookup is under way
	a := newClient("a")
	a.setText(t, "title", "just made")
	first, _ := a.state.GenerateMessage()
	if err := h.Sync(context.Background(), a.peer, SyncMessage{DocumentID: testDoc, Data: first.Bytes()}); err != nil {
		t.Fatal(err)
	}
	done(false) // no other node has it: but a has
	a.sync(t, h, false)
	b.receiveUntil(t, h, testDoc, "the document", func() bool { return b.get(t, "title") == "just made" })
	h.Close(context.Background())
	if b.peer.unavailableCount() != 0 {
		t.Fatal("b was told doc-unavailable while the creator was sending the document")
	}
}

// A member that named heads and went quiet holds a request back for
// aheadWait at most, also when the lookup first waited for other
// messages being applied.
func TestAQuietMemberAheadHoldsRequestsForAheadWaitOnly(t *testing.T) {
	saved := aheadWait
	aheadWait = 50 * time.Millisecond
	t.Cleanup(func() { aheadWait = saved })
	h := newTestHub(t, openStore(t, t.TempDir()), Config{UnavailableGrace: time.Millisecond})
	x := newClient("x")
	x.setText(t, "k", "v")
	m, _ := x.state.GenerateMessage()
	if err := h.Sync(context.Background(), x.peer, SyncMessage{DocumentID: testDoc, Data: m.Bytes()}); err != nil {
		t.Fatal(err)
	}
	r := roomOf(t, h, testDoc)
	r.mu.Lock()
	r.arriving++ // another message is being applied
	r.mu.Unlock()
	c := newClient("c")
	start := time.Now()
	c.sync(t, h, true)
	lookupNow(h, r)
	r.mu.Lock()
	r.arriving-- // applied (a read-only peer's, stripped: nothing changed)
	r.resumeDeferred(h)
	r.mu.Unlock()
	c.peer.waitUnavailable(t)
	// lookupNow moved the window's end 1 ms before it ran.
	if took := time.Since(start); took < aheadWait-2*time.Millisecond {
		t.Fatalf("doc-unavailable after %v, before aheadWait %v", took, aheadWait)
	}
}
