package awareness

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"
)

// batchPeer is a fakePeer that takes batches. It records every batch, and
// every message in one that is not its own as if sent alone, so the
// helpers that read a fakePeer's messages read it too.
type batchPeer struct {
	fakePeer
	bmu     sync.Mutex
	batches []*Batch
}

func (p *batchPeer) PresenceBatches() bool { return true }

func (p *batchPeer) PresenceReady(f *Feed) {
	p.tmu.Lock()
	defer p.tmu.Unlock()
	p.got(f.Document(), f.Take(p))
}

// got records what a take delivered.
func (p *batchPeer) got(doc string, d Delivery) {
	if d.Batch == nil && len(d.Messages) > 0 {
		panic("a peer that takes batches was sent messages alone")
	}
	if d.Batch != nil {
		p.batch(doc, d.Batch) // records d.Messages
	}
}

func (p *batchPeer) batch(doc string, b *Batch) {
	p.bmu.Lock()
	p.batches = append(p.batches, b)
	p.bmu.Unlock()
	for _, m := range b.Messages {
		if m.SenderID != p.id {
			p.fakePeer.SendPresence(doc, m)
		}
	}
}

func (p *batchPeer) takeBatches() []*Batch {
	p.bmu.Lock()
	defer p.bmu.Unlock()
	b := p.batches
	p.batches = nil
	return b
}

// What is queued while the dispatcher is busy goes to every member that
// takes batches as one batch, the same one for all of them, and to the
// others one message each, in the same order under the same counts.
func TestQueuedPresenceGoesAsOneBatch(t *testing.T) {
	f := newFixture(t)
	b1, b2 := &slowBatchPeer{batchPeer: batchPeer{fakePeer: fakePeer{id: "b1"}}}, &slowBatchPeer{batchPeer: batchPeer{fakePeer: fakePeer{id: "b2"}}}
	plain := &slowPeer{fakePeer: fakePeer{id: "plain"}}
	senders := []*fakePeer{{id: "s1"}, {id: "s2"}, {id: "s3"}}
	for _, p := range []Peer{b1, b2, plain} {
		f.hub.Join(p, doc1)
	}
	for _, s := range senders {
		f.update(s, "user", s.id)
	}
	b1.hold()
	b2.hold()
	plain.hold()
	for _, s := range senders {
		f.update(s, "selection", s.id) // waits while the members cannot take
	}
	b1.release()
	b2.release()
	plain.release()

	last1, last2 := b1.takeBatches(), b2.takeBatches()
	if len(last1) == 0 || len(last1) != len(last2) {
		t.Fatalf("b1 got %d batches, b2 %d", len(last1), len(last2))
	}
	queued := last1[len(last1)-1]
	if last2[len(last2)-1] != queued {
		t.Error("the two members were sent different batches: it was encoded twice")
	}
	if len(queued.Messages) != len(senders) {
		t.Fatalf("the last batch holds %d messages, want the %d queued", len(queued.Messages), len(senders))
	}
	want := plain.take()
	if len(want) < len(senders) {
		t.Fatalf("plain got %d messages", len(want))
	}
	want = want[len(want)-len(senders):]
	for i, m := range queued.Messages {
		if m.SenderID != want[i].msg.SenderID || m.Count != want[i].msg.Count || string(m.Data) != string(want[i].msg.Data) {
			t.Errorf("message %d: batch has %s #%d, plain got %s #%d", i, m.SenderID, m.Count, want[i].msg.SenderID, want[i].msg.Count)
		}
	}
}

// A newcomer that takes batches is sent the room in one batch.
func TestANewcomerGetsTheRoomInOneBatch(t *testing.T) {
	f := newFixture(t)
	for i := range 5 {
		f.update(&fakePeer{id: fmt.Sprintf("p%d", i)}, "cursor", i)
	}
	b := &batchPeer{fakePeer: fakePeer{id: "b"}}
	f.hub.Join(b, doc1)
	got := b.takeBatches()
	if len(got) != 1 || len(got[0].Messages) != 5 {
		t.Fatalf("newcomer got %d batches (%v): want the 5 peers in one", len(got), got)
	}
	for _, g := range b.take() {
		if g.body.Type != TypeSnapshot {
			t.Errorf("newcomer got a %s from %s, want snapshots", g.body.Type, g.msg.SenderID)
		}
	}
}

// A batch is not sent to a member it would tell nothing: one holding only
// that member's own messages.
func TestNoBatchOfOnlyOnesOwnMessages(t *testing.T) {
	f := newFixture(t)
	a, b := &batchPeer{fakePeer: fakePeer{id: "a"}}, &batchPeer{fakePeer: fakePeer{id: "b"}}
	f.hub.Join(a, doc1)
	f.hub.Join(b, doc1)
	a.takeBatches()
	b.takeBatches()
	data, _ := cbor.Marshal(map[string]any{"__presence": presenceMessage{Type: TypeUpdate, Channel: "cursor", Value: enc(1)}})
	if _, err := f.hub.Receive(a, doc1, Message{SenderID: "a", SessionID: "s", Count: 1, Data: data}); err != nil {
		t.Fatal(err)
	}
	if got := a.takeBatches(); len(got) != 0 {
		t.Errorf("a was sent %d batches of its own cursor", len(got))
	}
	if got := b.takeBatches(); len(got) != 1 {
		t.Errorf("b got %d batches, want 1", len(got))
	}
}

// Under concurrent senders, members that take batches and members that do
// not see every count rise and every last value, over many rounds.
func TestBatchesKeepOrderUnderConcurrency(t *testing.T) {
	for round := range 100 {
		f := newFixture(t)
		b, plain := &batchPeer{fakePeer: fakePeer{id: "b"}}, &fakePeer{id: "plain"}
		f.hub.Join(b, doc1)
		f.hub.Join(plain, doc1)
		var wg sync.WaitGroup
		const senders, updates = 4, 30
		for s := range senders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p := &fakePeer{id: fmt.Sprintf("s%d", s)}
				for i := 1; i <= updates; i++ {
					if !f.receiveNumbered(t, p, "cursor", i) {
						return
					}
					if i%7 == 0 {
						f.hub.Tick()
					}
				}
			}()
		}
		wg.Wait()
		f.clock.Advance(time.Second)
		f.hub.Tick() // the trailing edges
		for _, p := range []*fakePeer{&b.fakePeer, plain} {
			got := p.take()
			for s := range senders {
				c := cursors(t, got, fmt.Sprintf("s%d", s))
				if len(c) == 0 || c[len(c)-1] != uint64(updates) {
					t.Fatalf("round %d: %s got cursors %v of s%d, want the last to be %d", round, p.id, c, s, updates)
				}
			}
		}
	}
}

// A big room's period is longer, and its peers' periods end at different
// ticks: with 120 peers (RoomTickPeers 50) each held-back value goes out
// within 3 + holdTicks ticks (a period of three, and the hold of a value
// stale at its end), once, and no tick carries all of them.
func TestABigRoomSpreadsItsPeersOverTheTicks(t *testing.T) {
	f := newFixture(t)
	w := &fakePeer{id: "w"}
	f.hub.Join(w, doc1)
	var peers []*fakePeer
	for i := range 119 {
		p := &fakePeer{id: fmt.Sprintf("p%d", i)}
		peers = append(peers, p)
		f.update(p, "user", i)
	}
	if n := f.hub.roomTicks(f.hub.rooms[doc1]); n != 3 {
		t.Fatalf("roomTicks = %d for 120 peers, want 3", n)
	}
	for range 6 {
		f.hub.Tick() // two periods: nothing is held back now, no one counts as sent
	}
	for _, p := range peers {
		f.update(p, "cursor", 1) // the leading edge
		f.update(p, "cursor", 2) // held back
	}
	w.take()
	got := map[string]int{}
	for tick := 1; tick <= 3+holdTicks; tick++ {
		f.hub.Tick()
		n, heard := 0, w.take()
		for _, p := range peers {
			for _, c := range cursors(t, heard, p.id) {
				if c != uint64(2) {
					t.Fatalf("%s's cursor %v went out at tick %d, want 2", p.id, c, tick)
				}
				got[p.id]++
				n++
			}
		}
		if n == len(peers) {
			t.Errorf("tick %d sent every peer's held value at once", tick)
		}
	}
	for _, p := range peers {
		if got[p.id] != 1 {
			t.Errorf("%s's held cursor went out %d times in a period, want once", p.id, got[p.id])
		}
	}
}

// Peers of a big room that all start moving at once lead at the pace of
// the room's periods: each tick lets a tick's share of leading edges go
// (120 peers over a period of three: 40), and every other first move goes
// at its peer's slot, once, within the period and its hold.
func TestABigRoomsPeersLeadAtThePaceOfItsPeriods(t *testing.T) {
	f := newFixture(t)
	w := &fakePeer{id: "w"}
	f.hub.Join(w, doc1)
	var peers []*fakePeer
	for i := range 119 {
		p := &fakePeer{id: fmt.Sprintf("p%d", i)}
		peers = append(peers, p)
		f.update(p, "user", i)
	}
	for range 6 {
		f.hub.Tick()
	}
	w.take()
	share := (len(peers) + 2) / 3
	got := map[string]int{}
	count := func(heard []received) int {
		n := 0
		for _, p := range peers {
			for _, c := range cursors(t, heard, p.id) {
				if c != uint64(1) {
					t.Fatalf("%s's cursor %v went out, want 1", p.id, c)
				}
				got[p.id]++
				n++
			}
		}
		return n
	}
	for _, p := range peers {
		f.update(p, "cursor", 1)
	}
	if n := count(w.take()); n != share {
		t.Errorf("%d leading edges went at once, want the tick's share %d", n, share)
	}
	for tick := 1; tick <= 3+holdTicks; tick++ {
		f.hub.Tick()
		if n := count(w.take()); n > 2*share {
			t.Errorf("tick %d sent %d first moves, want at most two ticks' share %d", tick, n, 2*share)
		}
	}
	for _, p := range peers {
		if got[p.id] != 1 {
			t.Errorf("%s's first move went out %d times, want once", p.id, got[p.id])
		}
	}
}

// A long period ends with a fresh value: a value that did not change
// within the last tick of the period is held, and the next change goes out
// the moment it comes, in its place; with no change within holdTicks, the
// held value goes out.
func TestAStaleValueWaitsForAFresherOne(t *testing.T) {
	f := newFixture(t)
	f.hub.cfg.RoomTickPeers = 1 // two peers: a period of three ticks
	w, a := &fakePeer{id: "w"}, &fakePeer{id: "a"}
	f.hub.Join(w, doc1)
	f.update(a, "user", "ana")
	for range 6 {
		f.hub.Tick()
	}
	w.take()
	r := f.hub.rooms[doc1]
	seq := 0
	// move sends a's next cursor and returns the cursors w got at once.
	move := func() []any {
		seq++
		f.update(a, "cursor", seq)
		return cursors(t, w.take(), "a")
	}
	tick := func() []any {
		f.hub.Tick()
		return cursors(t, w.take(), "a")
	}
	for round := range 20 {
		if got := move(); len(got) != 1 || got[0] != uint64(seq) {
			t.Fatalf("round %d: the leading edge sent %v, want [%d]", round, got, seq)
		}
		move() // pending
		if got := tick(); len(got) != 0 {
			// The period ended at this tick, within a tick of the change:
			// the value was fresh. The next period is three ticks long.
			if got[0] != uint64(seq) {
				t.Fatalf("round %d: the trailing edge sent %v, want [%d]", round, got, seq)
			}
			if got := move(); len(got) != 0 {
				t.Fatalf("round %d: %v went out within the period", round, got)
			}
			tick()
		}
		// No change now: at the end of a's period its value is stale.
		for n := 0; r.held["a"] == 0; n++ {
			if n == 3 {
				t.Fatal("a's period never ended")
			}
			if got := tick(); len(got) != 0 {
				t.Fatalf("round %d: cursor %v went out %d ticks after it changed, want it held", round, got, n+2)
			}
		}
		stale := seq
		if round%2 == 0 {
			// A fresher value comes while held: it goes at once, the
			// stale one never.
			if got := move(); len(got) != 1 || got[0] != uint64(seq) {
				t.Fatalf("round %d: a held peer's move sent %v, want [%d] at once", round, got, seq)
			}
		} else {
			for n := 1; n < holdTicks; n++ {
				if got := tick(); len(got) != 0 {
					t.Fatalf("round %d: %v went out %d ticks into the hold, want it held %d", round, got, n, holdTicks)
				}
			}
			if got := tick(); len(got) != 1 || got[0] != uint64(stale) {
				t.Fatalf("round %d: the hold's end sent %v, want the stale [%d]", round, got, stale)
			}
		}
		for range 3 {
			if got := tick(); len(got) != 0 {
				t.Fatalf("round %d: %v went out after the held tick", round, got)
			}
		}
	}
}

// slowBatchPeer is a batchPeer behind a gate.
type slowBatchPeer struct {
	batchPeer
	gate
}

func (p *slowBatchPeer) PresenceReady(f *Feed) { p.gate.ready(f, p.takeFrom) }
func (p *slowBatchPeer) release()              { p.gate.release(p.takeFrom) }
func (p *slowBatchPeer) takeFrom(f *Feed)      { p.batchPeer.got(f.Document(), f.Take(p)) }
