package doc

import (
	"context"
	"fmt"
	"iter"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tandemhq/tandem/doc/amcheck"
	"github.com/tandemhq/tandem/doc/amcheck/amtest"
)

// funcObserver is an Observer that calls applying, if set, and notes
// nothing else.
type funcObserver struct {
	applying func(Peer)
}

func (o *funcObserver) Applying(p Peer) {
	if o.applying != nil {
		o.applying(p)
	}
}
func (*funcObserver) Applied(Peer, iter.Seq[*amcheck.Change], bool) {}
func (*funcObserver) Left(Peer)                                     {}
func (*funcObserver) Loaded(context.Context, map[string][]byte)     {}
func (*funcObserver) Journal() map[string][]byte                    { return nil }
func (*funcObserver) Wrote(map[string][]byte, bool)                 {}
func (*funcObserver) Busy() bool                                    { return false }

// What an observer does before a change applies (the mention tracker
// reads the text, which takes milliseconds in a large document) holds up
// the next change to the document, never the room: while it runs, a peer
// acknowledging what it was sent is answered. Repeated.
func TestApplyingHoldsUpNoAcknowledgement(t *testing.T) {
	reading, release := make(chan struct{}, 1), make(chan struct{})
	var hold atomic.Bool
	obs := &funcObserver{applying: func(Peer) {
		if hold.Load() {
			reading <- struct{}{}
			<-release
		}
	}}
	h := newTestHub(t, openStore(t, t.TempDir()), Config{Observe: func(Room) Observer { return obs }})
	a, b, c := newClient("a"), newClient("b"), newClient("c")
	a.setText(t, "text", "notes for @ana\n")
	a.sync(t, h, false)
	b.sync(t, h, true)
	c.sync(t, h, true)
	for round := range 20 {
		a.setText(t, "a", fmt.Sprint(round))
		a.sync(t, h, false) // c is sent the change
		hold.Store(true)
		b.setText(t, "b", fmt.Sprint(round))
		m, ok := b.state.GenerateMessage()
		if !ok {
			t.Fatal("b has nothing to send")
		}
		done := make(chan error, 1)
		go func() {
			done <- h.Sync(context.Background(), b.peer, SyncMessage{DocumentID: testDoc, Data: m.Bytes()})
		}()
		select {
		case <-reading: // b's change waits for the observer
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: the observer was never told of b's change", round)
		}
		hold.Store(false)
		acked := make(chan struct{})
		go func() { c.sync(t, h, false); close(acked) }()
		select {
		case <-acked:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: c's acknowledgement waited for the observer", round)
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		release = make(chan struct{})
		b.sync(t, h, false)
		a.sync(t, h, false)
	}
	c.sync(t, h, false)
	if !sameHeads(c.doc.Heads(), a.doc.Heads()) || !sameHeads(b.doc.Heads(), a.doc.Heads()) {
		t.Fatal("the peers did not converge")
	}
}

// A read-only peer's changes are refused, and the observer is not told of
// them (the mention tracker would read the text), however often the peer
// sends them.
func TestReadOnlyChangesAreNotObserved(t *testing.T) {
	var told atomic.Int32
	obs := &funcObserver{}
	h := newTestHub(t, openStore(t, t.TempDir()), Config{Observe: func(Room) Observer { return obs }})
	a, viewer := newClient("a"), newClient("viewer")
	a.setText(t, "text", "notes for @ana\n")
	a.sync(t, h, false)
	viewer.sync(t, h, true)
	obs.applying = func(Peer) { told.Add(1) } // before any traffic of the viewer's
	for i := range 20 {
		viewer.setText(t, "k", string(rune('a'+i)))
		if refused := viewer.syncWith(t, h, SyncMessage{ReadOnly: true}); !refused {
			t.Fatal("a read-only peer's change was taken")
		}
	}
	if n := told.Load(); n != 0 {
		t.Fatalf("the observer was told of a read-only peer's refused changes %d times", n)
	}
}

// notingObserver notes each Applied call: its peer's id ("" for none),
// its changes' hashes and elsewhere.
type notingObserver struct {
	funcObserver
	mu    sync.Mutex
	calls []appliedCall
}

type appliedCall struct {
	by        string
	changes   [][32]byte
	elsewhere bool
}

func (o *notingObserver) Applied(by Peer, changes iter.Seq[*amcheck.Change], elsewhere bool) {
	c := appliedCall{elsewhere: elsewhere}
	if by != nil {
		c.by = by.ID()
	}
	for ch := range changes {
		c.changes = append(c.changes, ch.Hash)
	}
	o.mu.Lock()
	o.calls = append(o.calls, c)
	o.mu.Unlock()
}

func (o *notingObserver) take() []appliedCall {
	o.mu.Lock()
	defer o.mu.Unlock()
	c := o.calls
	o.calls = nil
	return c
}

// changeAfter is a change by its own actor putting one key at op
// counter op, after dep (none if zero), and its hash.
func changeAfter(actor string, op uint64, dep [32]byte) ([]byte, [32]byte) {
	c := amtest.Change{Actors: [][]byte{[]byte(actor)}, Seq: 1, StartOp: op,
		Ops: []amtest.Op{amtest.Put(amcheck.OpID{}, actor)}}
	if dep != ([32]byte{}) {
		c.Deps = [][32]byte{dep}
	}
	return amtest.Encode(c)
}

// A change that waited for another is its sender's: the observer is
// told the changes a message or another node's changes released a run of
// one author's at a time, each under its sender (mentions and webhooks
// name the user behind each).
func TestReleasedChangesAreTheirSendersToTheObserver(t *testing.T) {
	obs := &notingObserver{}
	h := newTestHub(t, openStore(t, t.TempDir()), Config{Cluster: &fakeCluster{}, Observe: func(Room) Observer { return obs }})
	x := &fakePeer{id: "x", told: make(chan struct{}, 1)}
	y := &fakePeer{id: "y", told: make(chan struct{}, 1)}

	// y's change releases x's, which waited for it.
	yChange, yHash := changeAfter("y-actor", 1, [32]byte{})
	xChange, xHash := changeAfter("x-actor", 2, yHash)
	if err := sendChanges(h, testDoc, x, xChange); err != nil {
		t.Fatal(err)
	}
	if calls := obs.take(); len(calls) != 0 {
		t.Fatalf("told %+v of a change that waits", calls)
	}
	if err := sendChanges(h, testDoc, y, yChange); err != nil {
		t.Fatal(err)
	}
	want := []appliedCall{{by: "y", changes: [][32]byte{yHash}}, {by: "x", changes: [][32]byte{xHash}}}
	if got := obs.take(); !reflect.DeepEqual(got, want) {
		t.Fatalf("told %+v, want %+v", got, want)
	}

	// Another node's change releases x's.
	sChange, sHash := changeAfter("s-actor", 3, xHash)
	x2Change, x2Hash := changeAfter("x2-actor", 4, sHash)
	if err := sendChanges(h, testDoc, x, x2Change); err != nil {
		t.Fatal(err)
	}
	if err := h.applyRemoteChanges(testDoc, sChange); err != nil {
		t.Fatal(err)
	}
	want = []appliedCall{{changes: [][32]byte{sHash}, elsewhere: true}, {by: "x", changes: [][32]byte{x2Hash}}}
	if got := obs.take(); !reflect.DeepEqual(got, want) {
		t.Fatalf("told %+v, want %+v", got, want)
	}
}

// journalingObserver's Applied waits, while hold is set, until the test
// lets it go; its Journal checks, as the room's write takes it, that the
// room has told it of every local change the write stores.
type journalingObserver struct {
	funcObserver
	room      *room
	told      atomic.Uint64 // Applied calls
	hold      atomic.Bool
	inApplied chan chan struct{}
	mu        sync.Mutex
	wrong     string // the first write that stored a change untold
}

func (o *journalingObserver) Applied(Peer, iter.Seq[*amcheck.Change], bool) {
	if o.hold.Load() {
		release := make(chan struct{})
		o.inApplied <- release
		<-release
	}
	o.told.Add(1)
}

func (o *journalingObserver) Journal() map[string][]byte {
	told := o.told.Load()
	if applied := o.room.applied; applied != told { // the caller holds the room's lock
		o.mu.Lock()
		if o.wrong == "" {
			o.wrong = fmt.Sprintf("a write took %d local changes with a journal told of %d", applied, told)
		}
		o.mu.Unlock()
	}
	return map[string][]byte{"n": fmt.Append(nil, told)}
}

// A change is written in the same transaction as the observer's journal
// that accounts for it (the mention tracker's): a write that comes while
// the observer is being told of the change waits for it. Were the change
// written first, the sender would be acknowledged and a node killed then
// would lose what the journal was to say of it (a mention). Repeated.
func TestAChangeIsWrittenWithTheJournalThatAccountsForIt(t *testing.T) {
	obs := &journalingObserver{inApplied: make(chan chan struct{})}
	h := newTestHub(t, openStore(t, t.TempDir()), Config{Observe: func(r Room) Observer {
		obs.room = r.(observed).r
		return obs
	}})
	a := newClient("a")
	a.setText(t, "n", "start")
	a.sync(t, h, false)
	for round := range 50 {
		a.setText(t, "n", fmt.Sprint(round))
		m, ok := a.state.GenerateMessage()
		if !ok {
			t.Fatal("a has nothing to send")
		}
		obs.hold.Store(true)
		done := make(chan error, 1)
		go func() {
			done <- h.Sync(context.Background(), a.peer, SyncMessage{DocumentID: testDoc, Data: m.Bytes()})
		}()
		var release chan struct{}
		select {
		case release = <-obs.inApplied:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: the observer was never told of a's change", round)
		}
		obs.hold.Store(false)
		if err := h.Flush(context.Background()); err != nil { // the writer's turn, while the observer is told
			t.Fatal(err)
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		a.sync(t, h, false)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if obs.wrong != "" {
		t.Fatal(obs.wrong)
	}
}
