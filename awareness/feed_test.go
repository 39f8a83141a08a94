package awareness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tandemhq/tandem/internal/testenv"
)

// gate keeps the feeds a peer is told of while it is held, as a
// connection whose writer is busy; release takes from them.
type gate struct {
	mu    sync.Mutex
	held  bool
	feeds []*Feed
}

// ready takes from f at once unless the gate is held.
func (g *gate) ready(f *Feed, take func(*Feed)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held {
		g.feeds = append(g.feeds, f)
		return
	}
	take(f)
}

func (g *gate) hold() { g.mu.Lock(); g.held = true; g.mu.Unlock() }

// release takes what the feeds it was told of hold, and lets the peer
// keep up again.
func (g *gate) release(take func(*Feed)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.held = false
	for _, f := range g.feeds {
		take(f)
	}
	g.feeds = nil
}

// slowPeer is a fakePeer behind a gate.
type slowPeer struct {
	fakePeer
	gate
}

func (p *slowPeer) PresenceReady(f *Feed) { p.gate.ready(f, p.takeFrom) }
func (p *slowPeer) release()              { p.gate.release(p.takeFrom) }
func (p *slowPeer) takeFrom(f *Feed)      { p.fakePeer.record(f.Document(), f.Take(p)) }

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
func (f *fixture) receiveNumbered(t *testing.T, p Peer, channel string, i int) bool {
	data, _ := cbor.Marshal(map[string]any{"__presence": presenceMessage{Type: TypeUpdate, Channel: channel, Value: enc(i)}})
	if _, err := f.hub.Receive(p, doc1, Message{SenderID: p.ID(), SessionID: "s", Count: uint64(i), Data: data}); err != nil {
		t.Error(err)
		return false
	}
	return true
}

// A member that keeps up gets every value as it is forwarded; one that
// cannot take for a while gets, when it takes, the newest value once
// instead of the backlog.
func TestAMemberThatLagsTakesTheNewestValueOnce(t *testing.T) {
	f := newFixture(t)
	a, b, c := &fakePeer{id: "a"}, &slowPeer{fakePeer: fakePeer{id: "b"}}, &fakePeer{id: "c"}
	f.hub.Join(b, doc1)
	f.hub.Join(c, doc1)
	f.update(a, "user", "ana")
	f.hub.Tick()
	f.update(a, "cursor", 0)
	b.take()
	b.hold()
	for i := 1; i <= 10; i++ {
		f.clock.Advance(50 * time.Millisecond)
		f.hub.Tick()
		f.update(a, "cursor", i) // a leading edge each: forwarded at once
	}
	if got := cursors(t, c.take(), "a"); fmt.Sprint(got) != "[0 1 2 3 4 5 6 7 8 9 10]" {
		t.Errorf("c, which keeps up, got cursors %v, want every one at once", got)
	}
	if got := b.take(); len(got) != 0 {
		t.Fatalf("b got %d messages while it could not take", len(got))
	}
	b.release()
	if got := cursors(t, b.take(), "a"); fmt.Sprint(got) != "[10]" {
		t.Errorf("b got cursors %v after its lag, want [10]: the newest, not the backlog", got)
	}
	if n := testutil.ToFloat64(f.hub.metrics.updates.WithLabelValues("superseded")); n != 9 {
		t.Errorf("superseded = %v, want 9 (cursors 1-9, for b)", n)
	}
	if fd := f.hub.rooms[doc1].feed; len(fd.entries) != 0 || fd.bytes != 0 {
		t.Errorf("the feed holds %d entries (%d bytes) once every member took everything", len(fd.entries), fd.bytes)
	}
}

// A member that falls further behind than the feed holds is sent the room
// when it takes again: a goodbye for a peer that left meanwhile, and each
// live peer's newest state, in rising counts; nothing older.
func TestAMemberFarBehindIsSentTheRoom(t *testing.T) {
	f := newFixture(t)
	a, b, c := &fakePeer{id: "a"}, &slowPeer{fakePeer: fakePeer{id: "b"}}, &fakePeer{id: "c"}
	for _, p := range []Peer{a, b, c} {
		f.hub.Join(p, doc1)
	}
	f.update(a, "user", "ana")
	f.update(c, "user", "cy")
	b.take()
	b.hold()
	f.hub.Leave(c)
	for i := 1; i <= maxFeedEntries+10; i++ {
		f.clock.Advance(50 * time.Millisecond)
		f.hub.Tick()
		f.hub.Touch(b) // its pongs keep it
		f.update(a, "cursor", i)
	}
	if fd := f.hub.rooms[doc1].feed; len(fd.entries) > maxFeedEntries {
		t.Fatalf("the feed holds %d entries, over its bound of %d", len(fd.entries), maxFeedEntries)
	}
	b.release()
	got := b.take()
	if len(got) != 2 {
		t.Fatalf("b got %d messages after falling behind, want c's goodbye and a's snapshot", len(got))
	}
	if got[0].msg.SenderID != "c" || got[0].body.Type != TypeGoodbye {
		t.Errorf("first: %s from %s, want c's goodbye", got[0].body.Type, got[0].msg.SenderID)
	}
	if got[1].msg.SenderID != "a" || got[1].body.Type != TypeSnapshot || value(t, got[1].body.State["cursor"]) != uint64(maxFeedEntries+10) {
		t.Errorf("second: %s from %s (%v), want a's snapshot with the newest cursor", got[1].body.Type, got[1].msg.SenderID, got[1].body.State)
	}
	if got[1].msg.Count <= got[0].msg.Count {
		t.Error("the room's counts do not rise")
	}
	f.clock.Advance(50 * time.Millisecond)
	f.hub.Tick()
	f.update(a, "cursor", "after")
	if c := cursors(t, append(got, b.take()...), "a"); c[len(c)-1] != "after" {
		t.Errorf("b's cursors of a end %v, want the update after the room", c)
	}
	if n := testutil.ToFloat64(f.hub.metrics.updates.WithLabelValues("resent_room")); n != 1 {
		t.Errorf("resent_room = %v, want 1", n)
	}
}

// A peer that joins while a member lags gets the room as it is at its
// first take, and every value after it: never an older one.
func TestANewcomerNeverGetsAnOlderValue(t *testing.T) {
	f := newFixture(t)
	a, b, d := &fakePeer{id: "a"}, &slowPeer{fakePeer: fakePeer{id: "b"}}, &slowPeer{fakePeer: fakePeer{id: "d"}}
	f.hub.Join(b, doc1)
	f.update(a, "user", "ana")
	f.update(a, "cursor", 0)
	b.hold()
	d.hold()
	f.update(a, "cursor", 1) // held for the tick's trailing edge
	f.clock.Advance(50 * time.Millisecond)
	f.hub.Tick()
	f.hub.Join(d, doc1) // d is sent the room when it takes
	f.update(a, "cursor", 2)
	f.clock.Advance(50 * time.Millisecond)
	f.hub.Tick()
	f.update(a, "cursor", 3)
	f.clock.Advance(50 * time.Millisecond)
	f.hub.Tick()
	d.release()
	b.release()
	for _, p := range []*slowPeer{b, d} {
		got := cursors(t, p.take(), "a")
		if len(got) == 0 || got[len(got)-1] != uint64(3) {
			t.Fatalf("%s got cursors %v, want the last to be 3", p.id, got)
		}
	}
}

// A peer's first presence message brings it the room again (a stock
// client may not have listened when it joined by syncing), after what it
// took before, in rising counts and never an older value.
func TestTheGreetingKeepsOrder(t *testing.T) {
	f := newFixture(t)
	a, n := &fakePeer{id: "a"}, &slowPeer{fakePeer: fakePeer{id: "n"}}
	f.hub.Join(n, doc1) // joined by syncing: not greeted yet
	f.update(a, "user", "ana")
	f.update(a, "cursor", 0)
	n.hold()
	f.update(a, "cursor", 1) // held for the trailing edge
	f.clock.Advance(50 * time.Millisecond)
	f.hub.Tick()
	f.update(a, "cursor", 2)
	f.update(n, "cursor", "n-1") // n speaks: the room, at its next take
	f.update(a, "cursor", 3)
	n.release()
	f.clock.Advance(50 * time.Millisecond)
	f.hub.Tick()
	f.update(a, "cursor", 4)
	f.clock.Advance(50 * time.Millisecond)
	f.hub.Tick()
	got := cursors(t, n.take(), "a")
	for i := 1; i < len(got); i++ {
		if got[i].(uint64) < got[i-1].(uint64) {
			t.Fatalf("n got cursors %v: an older value after a newer one", got)
		}
	}
	if len(got) == 0 || got[len(got)-1] != uint64(4) {
		t.Fatalf("n got cursors %v, want the last to be 4", got)
	}
}

// A member of a room that was dropped (its last member left) takes
// nothing from it; the room made again for the next member reaches it.
func TestARoomMadeAgain(t *testing.T) {
	f := newFixture(t)
	x, y := &slowPeer{fakePeer: fakePeer{id: "x"}}, &fakePeer{id: "y"}
	remote := func(count uint64, v any) {
		f.hub.ApplyRemote("node1", doc1, Delta{Peer: "a", Registers: map[string]Register{
			"cursor": {Clock: Clock{Count: count, Session: "s"}, Value: enc(v)},
		}})
	}
	f.hub.Join(x, doc1)
	remote(1, 1)
	x.take()
	x.hold()
	f.clock.Advance(50 * time.Millisecond)
	f.hub.Tick()
	remote(3, 3)   // for x, which does not take it
	f.hub.Leave(x) // the room is dropped
	f.hub.Join(y, doc1)
	remote(4, 4) // must reach y
	x.release()
	if got := x.take(); len(got) != 0 {
		t.Errorf("x took %d messages after it left", len(got))
	}
	if got := cursors(t, y.take(), "a"); len(got) == 0 || got[len(got)-1] != uint64(4) {
		t.Fatalf("y got cursors %v, want the last to be 4", got)
	}
}

// Many peers updating at once while the hub ticks and members take at
// their own pace: every member sees relay counts rise, and ends with every
// peer's last value of every channel.
func TestFeedOrderUnderConcurrency(t *testing.T) {
	f := newFixture(t)
	const senders, updates = 8, 300
	fast, slow := &fakePeer{id: "w1"}, &slowPeer{fakePeer: fakePeer{id: "w2"}}
	f.hub.Join(fast, doc1)
	f.hub.Join(slow, doc1)
	stop := make(chan struct{})
	ticked := make(chan struct{})
	go func() {
		defer close(ticked)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
				// The clock stands still: ticks as fast as this loop would
				// otherwise carry it past the peers' TTL.
				f.hub.Tick()
				if i%3 == 0 {
					slow.hold()
				} else {
					slow.release()
				}
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
	slow.release()
	for range 2 { // the trailing edges
		f.clock.Advance(time.Second)
		f.hub.Tick()
	}
	for _, w := range []*fakePeer{fast, &slow.fakePeer} {
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

// The rule of what replaces what, on its own: a goodbye is never replaced
// by a later snapshot (the peer left, then came back), a partial snapshot
// replaces the updates of its channels only, and a whole message all of
// its sender's older ones.
func TestWhatReplacesWhat(t *testing.T) {
	up := func(s, ch string) entry { return entry{msg: Message{SenderID: s}, channel: ch} }
	part := func(s string, chs ...string) entry { return entry{msg: Message{SenderID: s}, channels: chs} }
	whole := entry{msg: Message{SenderID: "a"}, whole: true}
	bye := entry{msg: Message{SenderID: "a"}, whole: true, goodbye: true}
	for _, tc := range []struct {
		name string
		es   []entry
		want string
	}{
		{"an update replaces the same channel's", []entry{up("a", "x"), up("a", "y"), up("a", "x")}, "[false true true]"},
		{"not another sender's", []entry{up("a", "x"), up("b", "x")}, "[true true]"},
		{"a partial snapshot its channels'", []entry{up("a", "x"), up("a", "z"), part("a", "x", "y")}, "[false true true]"},
		{"an update not a partial snapshot", []entry{part("a", "x", "y"), up("a", "x")}, "[true true]"},
		{"a whole message everything", []entry{up("a", "x"), part("a", "x", "y"), whole}, "[false false true]"},
		{"a snapshot not a goodbye", []entry{up("a", "x"), bye, whole}, "[false true true]"},
		{"a goodbye a goodbye", []entry{bye, up("a", "x"), bye}, "[false false true]"},
	} {
		var r replaced
		if got := fmt.Sprint(r.newest(tc.es, nil)); got != tc.want {
			t.Errorf("%s: kept %s, want %s", tc.name, got, tc.want)
		}
	}
}

// newest agrees with the rule stated directly, on takes small and large
// (past manyKeys its lookups are maps).
func TestNewestFollowsTheRule(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	covered := func(es []entry, i int, ch string) bool {
		for _, e := range es[i+1:] {
			if e.msg.SenderID == es[i].msg.SenderID && (e.channel == ch || slices.Contains(e.channels, ch)) {
				return true
			}
		}
		return false
	}
	want := func(es []entry, i int) bool { // live
		for _, e := range es[i+1:] {
			if e.msg.SenderID == es[i].msg.SenderID && e.whole && (!es[i].goodbye || e.goodbye) {
				return false
			}
		}
		switch {
		case es[i].whole:
			return true
		case len(es[i].channels) > 0:
			for _, ch := range es[i].channels {
				if !covered(es, i, ch) {
					return true
				}
			}
			return false
		}
		return !covered(es, i, es[i].channel)
	}
	var r replaced
	var live []bool
	for round := range 2000 {
		n := 1 + rng.IntN(120)
		senders, channels := 1+rng.IntN(10), 1+rng.IntN(6)
		es := make([]entry, n)
		for i := range es {
			e := entry{msg: Message{SenderID: fmt.Sprint("p", rng.IntN(senders))}}
			switch k := rng.IntN(10); {
			case k == 0:
				e.whole, e.goodbye = true, true
			case k == 1:
				e.whole = true
			case k < 4:
				for c := range channels {
					if rng.IntN(2) == 0 {
						e.channels = append(e.channels, fmt.Sprint("c", c))
					}
				}
				if len(e.channels) == 0 {
					e.channels = []string{"c0"}
				}
			default:
				e.channel = fmt.Sprint("c", rng.IntN(channels))
			}
			es[i] = e
		}
		live = r.newest(es, live) // one replaced for every round: what it met before is forgotten
		got := live
		for i := range es {
			if got[i] != want(es, i) {
				t.Fatalf("round %d, entry %d of %d (%+v): live %v, want %v", round, i, n, es[i], got[i], !got[i])
			}
		}
	}
}

// sendIn hands the hub p's update of channel in a document, under p's next
// count.
func (f *fixture) sendIn(p Peer, documentID, channel string, v any) {
	f.t.Helper()
	f.count[p.ID()]++
	data, _ := cbor.Marshal(map[string]any{"__presence": presenceMessage{Type: TypeUpdate, Channel: channel, Value: enc(v)}})
	if _, err := f.hub.Receive(p, documentID, Message{SenderID: p.ID(), SessionID: "s-" + p.ID(), Count: f.count[p.ID()], Data: data}); err != nil {
		f.t.Fatal(err)
	}
}

// risingPerSource fails unless the counts got rise per (senderId,
// sessionId), as a stock client requires: it drops any other message.
func risingPerSource(t *testing.T, got []received) {
	t.Helper()
	last := map[string]uint64{}
	for _, g := range got {
		k := g.msg.SenderID + ":" + g.msg.SessionID
		if c, ok := last[k]; ok && g.msg.Count <= c {
			t.Fatalf("%s: count %d after %d: a stock client drops it", k, g.msg.Count, c)
		}
		last[k] = g.msg.Count
	}
}

// A member of two documents takes from their feeds in turn, so messages
// of the two reach it out of their counts' order: each document's come
// under a session of its own, in which they rise.
func TestCountsRisePerSessionAcrossDocuments(t *testing.T) {
	const doc2 = "jN3pd9agHvY1zVqDCHrDTE3fDh1"
	for round := range 50 {
		f := newFixture(t)
		r := &slowPeer{fakePeer: fakePeer{id: "r"}}
		s, u := &fakePeer{id: "s"}, &fakePeer{id: "u"}
		f.hub.Join(r, doc1)
		f.hub.Join(r, doc2)
		f.sendIn(s, doc1, "user", "sam")
		f.sendIn(s, doc2, "user", "sam")
		f.sendIn(u, doc2, "user", "uma")
		r.hold()
		f.clock.Advance(time.Second)
		f.hub.Tick()
		f.sendIn(u, doc2, "cursor", round) // doc2's feed is the first r is told of
		f.sendIn(s, doc1, "cursor", 1)
		f.sendIn(s, doc2, "cursor", 2)
		r.release()
		got := r.take()
		risingPerSource(t, got)
		if c := cursors(t, filterDoc(got, doc1), "s"); fmt.Sprint(c) != "[1]" {
			t.Fatalf("round %d: s's cursors in doc1: %v, want [1]", round, c)
		}
	}
}

// filterDoc keeps what was received about one document.
func filterDoc(got []received, documentID string) []received {
	var out []received
	for _, g := range got {
		if g.doc == documentID {
			out = append(out, g)
		}
	}
	return out
}

// A connection replaced by a newer one of its peer, which joins only some
// of its documents, leaves the others' feeds: what it would never take
// does not stay there.
func TestAReplacedConnectionLeavesTheFeeds(t *testing.T) {
	const doc2 = "jN3pd9agHvY1zVqDCHrDTE3fDh1"
	f := newFixture(t)
	old, repl := &slowPeer{fakePeer: fakePeer{id: "p"}}, &fakePeer{id: "p"}
	other := &fakePeer{id: "o"}
	f.hub.Join(old, doc1)
	f.hub.Join(old, doc2)
	f.hub.Join(other, doc2)
	old.hold() // it is closing: it takes nothing more
	f.hub.Join(repl, doc1)
	f.hub.Leave(old) // ignored: the peer went on as repl
	f.sendIn(&fakePeer{id: "w"}, doc2, "cursor", 1)
	other.take()
	fd := f.hub.rooms[doc2].feed
	if len(fd.entries) != 0 || fd.waiting != 0 {
		t.Fatalf("doc2's feed holds %d entries, %d members waiting, after every live member took", len(fd.entries), fd.waiting)
	}
}

// A feed drops what no member needs as it goes: with members that each
// take every other message, always one of them waiting, it stays small,
// and none is sent the room for falling behind.
func TestAFeedKeepsOnlyWhatAMemberNeeds(t *testing.T) {
	f := newFixture(t)
	b, c := &slowPeer{fakePeer: fakePeer{id: "b"}}, &slowPeer{fakePeer: fakePeer{id: "c"}}
	f.hub.Join(b, doc1)
	f.hub.Join(c, doc1)
	w := &fakePeer{id: "w"}
	f.update(w, "user", "wu")
	b.hold()
	c.hold()
	fd := f.hub.rooms[doc1].feed
	most := 0
	for i := 1; i <= 2*maxFeedEntries; i++ {
		f.clock.Advance(50 * time.Millisecond)
		f.hub.Tick()
		f.hub.Touch(b)
		f.hub.Touch(c)
		f.update(w, "cursor", i)
		p := []*slowPeer{b, c}[i%2]
		p.release() // takes what it was told of, then waits again
		p.hold()
		most = max(most, len(fd.entries))
	}
	b.release()
	c.release()
	if most > 256 {
		t.Errorf("the feed held up to %d entries; members were never more than two behind", most)
	}
	if n := testutil.ToFloat64(f.hub.metrics.updates.WithLabelValues("resent_room")); n != 0 {
		t.Errorf("the room was resent %v times to members that kept up", n)
	}
	for _, p := range []*slowPeer{b, c} {
		if got := cursors(t, p.take(), "w"); len(got) == 0 || got[len(got)-1] != uint64(2*maxFeedEntries) {
			t.Errorf("%s's last cursor of w is not the last sent", p.id)
		}
	}
}

// Past tellAtOnce members, the rest are told on goroutines of their own,
// which Close waits for: every member has then got every final value, in
// rising counts.
func TestABigRoomIsToldOnSeveralGoroutines(t *testing.T) {
	f := newFixture(t)
	f.hub.tellAtOnce = 3
	members := make([]*fakePeer, 20)
	for i := range members {
		members[i] = &fakePeer{id: fmt.Sprint("m", i)}
		f.hub.Join(members[i], doc1)
	}
	w := &fakePeer{id: "w"}
	for i := 1; i <= 50; i++ {
		f.clock.Advance(50 * time.Millisecond)
		f.hub.Tick()
		for _, m := range members {
			f.hub.Touch(m)
		}
		f.update(w, "cursor", i)
	}
	if err := f.hub.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, m := range members {
		got := m.take()
		risingPerSource(t, got)
		if c := cursors(t, got, "w"); len(c) == 0 || c[len(c)-1] != uint64(50) {
			t.Fatalf("%s had not got w's last cursor when Close returned", m.id)
		}
	}
}

// lazyPeer takes only when the test says: it keeps the feed it was told of.
type lazyPeer struct {
	id   string
	told *Feed
}

func (p *lazyPeer) ID() string            { return p.id }
func (p *lazyPeer) PresenceReady(f *Feed) { p.told = f }

// A member that takes several entries at once costs one allocation, the
// list of what it is sent: what a take works in is kept from take to take.
func TestTakingSeveralEntriesAllocatesOnlyTheirList(t *testing.T) {
	clock := &fakeClock{now: time.Unix(0, 0)}
	h := newHub(t, Config{Now: clock.Now, TTL: 1000 * time.Hour, Logger: testenv.QuietLogger()})
	member := &lazyPeer{id: "m"}
	h.Join(member, doc1)
	for i := range 4 {
		sender := nopPeer{fmt.Sprint("s", i)}
		h.Join(sender, doc1)
		for n := uint64(1); n <= 2; n++ { // the second replaces the first
			data, _ := cbor.Marshal(map[string]any{"__presence": map[string]any{"type": "update", "channel": "cursor", "value": n}})
			h.Receive(sender, doc1, Message{SenderID: sender.id, SessionID: "s", Count: n, Data: data})
			clock.Advance(50 * time.Millisecond)
			h.Tick()
		}
	}
	f := member.told
	if f == nil {
		t.Fatal("the member was never told")
	}
	f.Take(member) // the greeting
	for i := range 4 {
		data, _ := cbor.Marshal(map[string]any{"__presence": map[string]any{"type": "update", "channel": "cursor", "value": 10 + i}})
		for n := uint64(3); n <= 4; n++ {
			h.Receive(nopPeer{fmt.Sprint("s", i)}, doc1, Message{SenderID: fmt.Sprint("s", i), SessionID: "s", Count: n, Data: data})
		}
		clock.Advance(50 * time.Millisecond)
		h.Tick()
	}
	f.mu.Lock()
	from, to := f.readers["m"].next, f.end()
	f.mu.Unlock()
	if to-from < 4 {
		t.Fatalf("%d entries waiting for the member, want several", to-from)
	}
	var d Delivery
	allocs := testing.AllocsPerRun(100, func() {
		f.mu.Lock()
		d = f.deliver(member, from, to)
		f.mu.Unlock()
	})
	if len(d.Messages) != 4 {
		t.Fatalf("a take of %d messages, want each sender's newest of 4", len(d.Messages))
	}
	if allocs > 1 {
		t.Errorf("a take of several entries made %v allocations, want 1", allocs)
	}
}
