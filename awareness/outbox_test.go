package awareness

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// gatedPeer is a fakePeer whose SendPresence, once closed, blocks until
// opened again: a connection the dispatcher is stuck on.
type gatedPeer struct {
	fakePeer
	mu      sync.Mutex
	gate    chan struct{} // nil: open
	entered chan struct{}
}

func (p *gatedPeer) close() {
	p.mu.Lock()
	p.gate, p.entered = make(chan struct{}), make(chan struct{}, 1)
	p.mu.Unlock()
}

func (p *gatedPeer) open() {
	p.mu.Lock()
	close(p.gate)
	p.gate = nil
	p.mu.Unlock()
}

func (p *gatedPeer) SendPresence(doc string, m Message) {
	p.mu.Lock()
	gate, entered := p.gate, p.entered
	p.mu.Unlock()
	if gate != nil {
		entered <- struct{}{}
		<-gate
	}
	p.fakePeer.SendPresence(doc, m)
}

// cursors returns the cursor values p got from sender, in order, and
// fails if the relay counts did not rise.
func cursors(t *testing.T, got []received, sender string) []any {
	t.Helper()
	var out []any
	var last uint64
	for _, g := range got {
		if g.msg.Count <= last {
			t.Fatalf("count %d after %d: a receiver would drop it", g.msg.Count, last)
		}
		last = g.msg.Count
		if g.msg.SenderID != sender {
			continue
		}
		switch {
		case g.body.Type == TypeUpdate && g.body.Channel == "cursor":
			out = append(out, value(t, g.body.Value))
		case g.body.Type == TypeSnapshot && g.body.State["cursor"] != nil:
			out = append(out, value(t, g.body.State["cursor"]))
		}
	}
	return out
}

// receiveNumbered hands the hub p's update of channel to the value i under
// the count i, from any goroutine; it reports false, having failed t, if
// the hub refused it.
func (f *fixture) receiveNumbered(t *testing.T, p *fakePeer, channel string, i int) bool {
	data, _ := cbor.Marshal(map[string]any{"__presence": presenceMessage{Type: TypeUpdate, Channel: channel, Value: enc(i)}})
	if _, err := f.hub.Receive(p, doc1, Message{SenderID: p.id, SessionID: "s", Count: uint64(i), Data: data}); err != nil {
		t.Error(err)
		return false
	}
	return true
}

// waitDispatched waits until no dispatcher runs.
func waitDispatched(t *testing.T, h *Hub) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for h.out.dispatching.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the outbox never finished dispatching")
		}
		runtime.Gosched()
	}
}

// TestOutboxSupersedesWhileBehind: while the dispatcher is stuck on a slow
// connection, newer values of a channel replace the queued one, so every
// member then gets the newest value once instead of the backlog.
func TestOutboxSupersedesWhileBehind(t *testing.T) {
	f := newFixture(t)
	a, b, c := &fakePeer{id: "a"}, &gatedPeer{fakePeer: fakePeer{id: "b"}}, &fakePeer{id: "c"}
	f.hub.Join(b, doc1)
	f.hub.Join(c, doc1)
	f.update(a, "user", "ana")
	f.hub.Tick()
	f.update(a, "cursor", 0) // the leading edge, sent at once
	f.update(a, "cursor", 1) // held for the tick's trailing edge
	b.close()
	done := make(chan struct{})
	go func() { f.hub.Tick(); close(done) }() // dispatches cursor 1 and sticks on b
	<-b.entered
	for i := 2; i <= 10; i++ {
		f.clock.Advance(50 * time.Millisecond)
		f.update(a, "cursor", i)
		f.hub.Tick()
	}
	b.open()
	<-done
	waitDispatched(t, f.hub)
	for _, p := range []*fakePeer{&b.fakePeer, c} {
		got := cursors(t, p.take(), "a")
		if fmt.Sprint(got) != "[0 1 10]" {
			t.Errorf("%s got cursors %v, want [0 1 10]: the newest, not the backlog", p.id, got)
		}
	}
	if n := testutil.ToFloat64(f.hub.metrics.updates.WithLabelValues("superseded")); n != 8 {
		t.Errorf("superseded = %v, want 8 (cursors 2-9)", n)
	}
}

// TestOutboxNewcomerNeverGetsAnOlderValue: a peer that joins while an
// update is queued gets the room as it was at its join, and every value
// after it; a newer value must not hide in the update queued before.
func TestOutboxNewcomerNeverGetsAnOlderValue(t *testing.T) {
	f := newFixture(t)
	a, b, d := &fakePeer{id: "a"}, &gatedPeer{fakePeer: fakePeer{id: "b"}}, &fakePeer{id: "d"}
	f.hub.Join(b, doc1)
	f.update(a, "user", "ana")
	f.update(a, "cursor", 0)
	f.update(a, "cursor", 1) // held for the tick's trailing edge
	b.close()
	done := make(chan struct{})
	go func() { f.hub.Tick(); close(done) }() // cursor 1 sticks on b
	<-b.entered
	f.clock.Advance(50 * time.Millisecond)
	f.hub.Tick()
	f.update(a, "cursor", 2) // a leading edge, queued behind the stuck one
	f.hub.Join(d, doc1)      // d's room snapshot, cursor 2, queued after it
	f.clock.Advance(50 * time.Millisecond)
	f.hub.Tick()
	f.update(a, "cursor", 3) // must not hide in the queued cursor 2, which d is not to get
	b.open()
	<-done
	waitDispatched(t, f.hub)
	got := cursors(t, d.take(), "a")
	if len(got) == 0 || got[len(got)-1] != uint64(3) {
		t.Fatalf("newcomer got cursors %v, want the last to be 3", got)
	}
	if got := cursors(t, b.take(), "a"); got[len(got)-1] != uint64(3) {
		t.Fatalf("b got cursors %v, want the last to be 3", got)
	}
}

// TestOutboxOrderUnderConcurrency: many peers updating at once while the
// hub ticks: every receiver sees relay counts rise, and ends with every
// peer's last value of every channel.
func TestOutboxOrderUnderConcurrency(t *testing.T) {
	f := newFixture(t)
	const senders, updates = 8, 300
	watchers := []*fakePeer{{id: "w1"}, {id: "w2"}}
	for _, w := range watchers {
		f.hub.Join(w, doc1)
	}
	stop := make(chan struct{})
	ticked := make(chan struct{})
	go func() {
		defer close(ticked)
		for {
			select {
			case <-stop:
				return
			default:
				// The clock stands still: ticks as fast as this loop would
				// otherwise carry it past the peers' TTL.
				f.hub.Tick()
			}
		}
	}()
	var wg sync.WaitGroup
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := &fakePeer{id: fmt.Sprintf("s%d", s)}
			for i := 1; i <= updates; i++ {
				ch := []string{"cursor", "selection"}[i%2] // the last, 300, a cursor
				if !f.receiveNumbered(t, p, ch, i) {
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-ticked
	for range 2 { // the trailing edges
		f.clock.Advance(time.Second)
		f.hub.Tick()
	}
	waitDispatched(t, f.hub)
	for _, w := range watchers {
		last := map[string]any{}
		var count uint64
		for _, g := range w.take() {
			if g.msg.Count <= count {
				t.Fatalf("%s: count %d after %d", w.id, g.msg.Count, count)
			}
			count = g.msg.Count
			switch g.body.Type {
			case TypeUpdate:
				last[g.msg.SenderID+"/"+g.body.Channel] = value(t, g.body.Value)
			case TypeSnapshot:
				for ch, v := range g.body.State {
					last[g.msg.SenderID+"/"+ch] = value(t, v)
				}
			}
		}
		for s := range senders {
			if v := last[fmt.Sprintf("s%d/cursor", s)]; v != uint64(updates) {
				t.Errorf("%s: last cursor of s%d = %v, want %d", w.id, s, v, updates)
			}
			if v := last[fmt.Sprintf("s%d/selection", s)]; v != uint64(updates-1) {
				t.Errorf("%s: last selection of s%d = %v, want %d", w.id, s, v, updates-1)
			}
		}
	}
}

// TestOutboxGreetingSnapshotKeepsOrder: the room sent to a peer at its
// first presence message comes after what was queued before it; a newer
// value must not hide in an update queued ahead of that snapshot.
func TestOutboxGreetingSnapshotKeepsOrder(t *testing.T) {
	f := newFixture(t)
	a, g, n := &fakePeer{id: "a"}, &gatedPeer{fakePeer: fakePeer{id: "g"}}, &fakePeer{id: "n"}
	f.hub.Join(g, doc1)
	f.hub.Join(n, doc1) // joined by syncing: not greeted yet
	f.update(a, "user", "ana")
	f.update(a, "cursor", 0)
	f.update(a, "cursor", 1) // held for the trailing edge
	g.close()
	done := make(chan struct{})
	go func() { f.hub.Tick(); close(done) }() // cursor 1 sticks on g
	<-g.entered
	f.clock.Advance(50 * time.Millisecond)
	f.hub.Tick()
	f.update(a, "cursor", 2)     // queued behind the stuck one, to g and n
	f.update(n, "cursor", "n-1") // n speaks: the room, cursor 2, queued for n
	f.clock.Advance(50 * time.Millisecond)
	f.hub.Tick()
	f.update(a, "cursor", 3)
	g.open()
	<-done
	waitDispatched(t, f.hub)
	got := cursors(t, n.take(), "a")
	for i := 1; i < len(got); i++ {
		if got[i].(uint64) < got[i-1].(uint64) {
			t.Fatalf("n got cursors %v: an older value after a newer one", got)
		}
	}
	if len(got) == 0 || got[len(got)-1] != uint64(3) {
		t.Fatalf("n got cursors %v, want the last to be 3", got)
	}
}

// TestOutboxRoomMadeAgain: an update queued for a room that is dropped
// (its last member left) never takes the value meant for the room made
// again for the next member.
func TestOutboxRoomMadeAgain(t *testing.T) {
	f := newFixture(t)
	x, y := &gatedPeer{fakePeer: fakePeer{id: "x"}}, &fakePeer{id: "y"}
	remote := func(count uint64, v any) {
		f.hub.ApplyRemote("node1", doc1, Delta{Peer: "a", Registers: map[string]Register{
			"cursor": {Clock: Clock{Count: count, Session: "s"}, Value: enc(v)},
		}})
	}
	f.hub.Join(x, doc1)
	remote(1, 1)
	remote(2, 2) // held for the trailing edge
	x.close()
	done := make(chan struct{})
	go func() { f.hub.Tick(); close(done) }() // cursor 2 sticks on x
	<-x.entered
	f.clock.Advance(50 * time.Millisecond)
	f.hub.Tick()
	remote(3, 3)   // queued for x
	f.hub.Leave(x) // the room is dropped
	f.hub.Join(y, doc1)
	remote(4, 4) // must reach y
	x.open()
	<-done
	waitDispatched(t, f.hub)
	if got := cursors(t, y.take(), "a"); len(got) == 0 || got[len(got)-1] != uint64(4) {
		t.Fatalf("y got cursors %v, want the last to be 4", got)
	}
}

// blockingPeer holds the dispatcher in its SendPresence until released.
type blockingPeer struct {
	*fakePeer
	entered chan struct{}
	release chan struct{}
}

func (p *blockingPeer) SendPresence(doc string, m Message) {
	select {
	case p.entered <- struct{}{}:
		<-p.release
	default:
	}
	p.fakePeer.SendPresence(doc, m)
}

// With the outbox far behind, a newcomer is not sent a snapshot per peer
// at once: the room waits for its next presence message, and then comes.
func TestANewcomersRoomWaitsWhileTheOutboxIsBehind(t *testing.T) {
	old := maxOutbox
	maxOutbox = 3
	t.Cleanup(func() { maxOutbox = old })
	f := newFixture(t)
	slow := &blockingPeer{fakePeer: &fakePeer{id: "slow"}, entered: make(chan struct{}, 1), release: make(chan struct{})}
	for _, id := range []string{"a", "b", "c"} {
		f.update(&fakePeer{id: id}, "cursor", "1")
	}
	joined := make(chan struct{})
	go func() { f.hub.Join(slow, doc1); close(joined) }() // dispatches the room to slow, and blocks there
	<-slow.entered                                        // the dispatcher waits in slow's SendPresence
	for i := range 4 {
		f.update(&fakePeer{id: "a"}, fmt.Sprint("ch", i), "x") // the outbox grows meanwhile
	}
	newcomer := &fakePeer{id: "new"}
	f.update(newcomer, "cursor", "9")
	close(slow.release)
	<-joined
	drained := func() bool { // a dispatcher handed over to may still be at it
		f.hub.dispatch()
		f.hub.mu.Lock()
		defer f.hub.mu.Unlock()
		return len(f.hub.out.queue) == 0 && !f.hub.out.dispatching.Load()
	}
	for deadline := time.Now().Add(10 * time.Second); !drained(); {
		if time.Now().After(deadline) {
			t.Fatal("the outbox did not drain")
		}
		runtime.Gosched()
	}
	snapshots := 0
	for _, g := range newcomer.take() {
		if g.body.Type == TypeSnapshot {
			snapshots++
		}
	}
	if snapshots != 0 {
		t.Fatalf("the newcomer got %d snapshots while the outbox was behind", snapshots)
	}
	f.update(newcomer, "cursor", "10") // its next message: the room now
	for _, g := range newcomer.take() {
		if g.body.Type == TypeSnapshot {
			snapshots++
		}
	}
	if snapshots != 3 { // a, b and c (slow never said anything)
		t.Fatalf("the newcomer got %d snapshots at its next message, want one per peer", snapshots)
	}
}
