package doc

import (
	"context"
	"fmt"
	"iter"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tandemhq/tandem/doc/amcheck"
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
