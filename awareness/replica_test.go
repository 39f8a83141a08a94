package awareness

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"

	"github.com/tandemhq/tandem/internal/testenv"
)

// fakeReplicator records what a hub publishes for other nodes.
type fakeReplicator struct {
	mu      sync.Mutex
	deltas  []Delta
	leaves  []bool // per delta: published as a leave
	rosters [][]string
	asked   []string
	users   map[string]Status
	deaf    map[string]bool // documents this node does not hear (Hears)
}

func (f *fakeReplicator) PublishPresence(_ string, payload []byte, leave bool) {
	var m nodeMsg
	if err := cbor.Unmarshal(payload, &m); err != nil {
		panic(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch m.Kind {
	case kindDelta:
		f.deltas = append(f.deltas, *m.Delta)
		f.leaves = append(f.leaves, leave)
	case kindRoster:
		f.rosters = append(f.rosters, m.Peers)
	}
}
func (f *fakeReplicator) AskState(documentID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, documentID)
}
func (f *fakeReplicator) PublishUserStatus(u string, s Status) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.users[u] = s
}
func (f *fakeReplicator) WatchUsers([]string, bool) {}
func (f *fakeReplicator) Hears(doc string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.deaf[doc]
}

// TestTwoNodes wires two hubs through their deltas, as the bus does.
func TestTwoNodes(t *testing.T) {
	f1, f2 := newFixture(t), newFixture(t)
	r1 := &fakeReplicator{users: map[string]Status{}}
	f1.hub.cfg.Replicator = r1
	a, b := &fakePeer{id: "a"}, &fakePeer{id: "b"}
	f2.update(b, "cursor", "1@b") // b is on node 2
	f1.update(a, "user", map[string]any{"id": "ana"})
	f1.update(a, "cursor", "7@x")
	if r1.users["ana"] != StatusOnline {
		t.Fatalf("node 1 published ana as %q", r1.users["ana"])
	}
	for _, d := range r1.deltas {
		f2.hub.ApplyRemote("node1", doc1, d)
	}
	var cursor any
	for _, g := range b.take() {
		if g.msg.SenderID == "a" && g.body.Type == TypeUpdate && g.body.Channel == "cursor" {
			cursor = value(t, g.body.Value)
		}
	}
	if cursor != "7@x" {
		t.Fatalf("b did not get a's cursor across nodes (got %v)", cursor)
	}
	if v := f2.hub.UserPresence(t.Context(), "ana"); v.Status != StatusOnline {
		t.Fatalf("node 2 sees ana %s", v.Status)
	}
	if got := f1.hub.LocalState(doc1); len(got) != 1 || got[0].Peer != "a" {
		t.Fatalf("node 1's local state = %+v", got)
	}
	if got := f2.hub.LocalState(doc1); len(got) != 1 || got[0].Peer != "b" {
		t.Fatalf("node 2's local state must hold only its own peers: %+v", got)
	}

	f2.hub.NodeGone("node1")
	var bye bool
	for _, g := range b.take() {
		bye = bye || (g.msg.SenderID == "a" && g.body.Type == TypeGoodbye)
	}
	if !bye {
		t.Fatal("b got no goodbye for a when node 1 died")
	}
	if v := f2.hub.UserPresence(t.Context(), "ana"); v.Status != StatusOffline {
		t.Fatalf("after node 1 died node 2 sees ana %s", v.Status)
	}
}

// TestRemotePeerOutlivesRoom: the last local member leaves while a remote
// peer is still known; its node dying later must not trip over the room.
func TestRemotePeerOutlivesRoom(t *testing.T) {
	f := newFixture(t)
	b := &fakePeer{id: "b"}
	f.hub.Join(b, doc1)
	f.hub.ApplyRemote("node1", doc1, Delta{Peer: "a", Registers: map[string]Register{
		"cursor": {Clock: Clock{Count: 1, Session: "s"}, Value: enc("1@x")},
	}})
	f.hub.Leave(b)
	f.hub.NodeGone("node1")
	if len(f.hub.peers) != 0 || len(f.hub.rooms) != 0 {
		t.Fatalf("left behind %d peers and %d rooms", len(f.hub.peers), len(f.hub.rooms))
	}
}

// goodbyeFor reports whether p was told that peer left.
func goodbyeFor(p *fakePeer, peer string) bool {
	bye := false
	for _, g := range p.take() {
		bye = bye || (g.msg.SenderID == peer && g.body.Type == TypeGoodbye)
	}
	return bye
}

// A leave that never arrived (lost on the bus) is repaired by the next
// roster of the peer's node: the peer is no longer in it.
func TestRosterRepairsALostLeave(t *testing.T) {
	f1, f2 := newFixture(t), newFixture(t)
	r1 := &fakeReplicator{users: map[string]Status{}}
	f1.hub.cfg.Replicator = r1
	a, b := &fakePeer{id: "a"}, &fakePeer{id: "b"}
	f2.update(b, "cursor", "1@b")
	f1.update(a, "cursor", "7@x")
	for _, d := range r1.deltas {
		f2.hub.ApplyRemote("node1", doc1, d)
	}
	r1.deltas = nil
	if missing := f2.hub.ApplyRoster("node1", doc1, f1.hub.LocalRoster(doc1)); missing {
		t.Fatal("node 2 misses a peer node 1 listed")
	}
	b.take()

	f1.hub.Leave(a)
	var leaves int
	for _, d := range r1.deltas {
		if d.Peer == "a" && d.IsGoodbye() {
			leaves++
		}
	}
	if leaves != 1 {
		t.Fatalf("node 1 published %d goodbyes for a, want 1 (deltas %+v)", leaves, r1.deltas)
	}
	// The goodbye is lost: node 2 still shows a, until node 1's roster.
	if len(f2.hub.DocumentPresence(doc1)) != 2 {
		t.Fatal("node 2 should still show a before the roster")
	}
	if f2.hub.ApplyRoster("node1", doc1, f1.hub.LocalRoster(doc1)) {
		t.Fatal("an empty roster misses nothing")
	}
	if !goodbyeFor(b, "a") {
		t.Fatal("b got no goodbye for a after node 1's roster left it out")
	}
	if v := f2.hub.UserPresence(t.Context(), "a"); v.Status != StatusOffline {
		t.Fatalf("node 2 sees a's user %s", v.Status)
	}
}

// A state that never arrived is asked for again: the roster names a peer
// the receiving node has no presence of.
func TestRosterTellsOfAMissingState(t *testing.T) {
	f := newFixture(t)
	b := &fakePeer{id: "b"}
	f.update(b, "cursor", "1@b")
	if !f.hub.ApplyRoster("node1", doc1, []string{"a"}) {
		t.Fatal("a roster naming an unknown peer should say something is missing")
	}
}

// nodeLivesOn passes n beats of 2 s: node1 heard alive, b heard, a tick.
func nodeLivesOn(f *fixture, b *fakePeer, n int) {
	for range n {
		f.clock.Advance(2 * time.Second)
		f.hub.NodeAlive("node1")
		f.hub.Touch(b)
		f.hub.Tick()
	}
}

// remotePeerA is a hub with a remote TTL of 9 s where local peer b sees
// peer a of node1.
func remotePeerA(t *testing.T) (*fixture, *fakePeer) {
	f := newFixture(t)
	f.hub.cfg.RemoteTTL = 9 * time.Second
	b := &fakePeer{id: "b"}
	f.update(b, "cursor", "1@b")
	f.hub.ApplyRemote("node1", doc1, Delta{Peer: "a", Registers: map[string]Register{
		"cursor": {Clock: Clock{Count: 1, Session: "s"}, Value: enc("1@x")},
	}})
	return f, b
}

// A remote peer whose node's rosters stop arriving (lost, say) expires
// after the remote TTL, as a local peer does after its TTL, even while its
// node's heartbeats go on.
func TestRemotePeerExpiresUnheardOf(t *testing.T) {
	f, b := remotePeerA(t)
	f.hub.ApplyRoster("node1", doc1, []string{"a"})
	b.take()
	nodeLivesOn(f, b, 4) // rosters naming a stop arriving
	if goodbyeFor(b, "a") {
		t.Fatal("a expired within the remote TTL")
	}
	f.clock.Advance(2 * time.Second)
	f.hub.Touch(b)
	f.hub.Tick()
	if !goodbyeFor(b, "a") {
		t.Fatal("a did not expire after the remote TTL")
	}
}

// While this node does not hear a document's channel (its subscription is
// being made again after a Redis failover), a remote peer's silence there
// proves nothing: the peer stays. Once the channel is heard, the remote
// TTL applies again.
func TestRemotePeerStaysWhileItsDocumentIsNotHeard(t *testing.T) {
	f, b := remotePeerA(t)
	r := &fakeReplicator{users: map[string]Status{}, deaf: map[string]bool{doc1: true}}
	f.hub.cfg.Replicator = r
	f.hub.ApplyRoster("node1", doc1, []string{"a"})
	b.take()
	nodeLivesOn(f, b, 10) // its rosters cannot come
	if goodbyeFor(b, "a") {
		t.Fatal("a expired while its document was not heard")
	}
	r.mu.Lock()
	delete(r.deaf, doc1)
	r.mu.Unlock()
	f.clock.Advance(2 * time.Second)
	f.hub.Touch(b)
	f.hub.Tick()
	if !goodbyeFor(b, "a") {
		t.Fatal("a did not expire once its document was heard again")
	}
}

// A node that never sent a roster (an older one, during an upgrade) keeps
// its peers alive by its heartbeats, as before.
func TestPeersOfANodeWithoutRostersLiveByItsHeartbeat(t *testing.T) {
	f, b := remotePeerA(t)
	b.take()
	nodeLivesOn(f, b, 10)
	if goodbyeFor(b, "a") {
		t.Fatal("a peer of a node without rosters expired")
	}
}

// gatedLastSeen is a LastSeenBatcher whose writes wait for release, as a
// slow database would.
type gatedLastSeen struct {
	testenv.MemoryLastSeen
	release chan struct{}
	batches atomic.Int32
}

func (s *gatedLastSeen) SaveLastSeen(ctx context.Context, u string, at time.Time) error {
	<-s.release
	return s.MemoryLastSeen.SaveLastSeen(ctx, u, at)
}

func (s *gatedLastSeen) SaveLastSeenBatch(ctx context.Context, at map[string]time.Time) error {
	<-s.release
	s.batches.Add(1)
	for u, t := range at {
		s.MemoryLastSeen.SaveLastSeen(ctx, u, t)
	}
	return nil
}

// A node dies with a thousand users: the other node takes them offline
// without waiting for the store, and stores their last-seen times in a few
// batches once the store answers.
func TestLastSeenIsWrittenOffThePresencePath(t *testing.T) {
	store := &gatedLastSeen{release: make(chan struct{})}
	h := newHub(t, Config{LastSeen: store, Logger: testenv.QuietLogger()})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { h.Run(ctx); close(ran) }()
	t.Cleanup(func() { cancel(); <-ran })
	b := &fakePeer{id: "b"}
	h.Join(b, doc1)
	const users = 1000
	for i := range users {
		h.ApplyRemote("node1", doc1, Delta{Peer: fmt.Sprint("p", i), User: fmt.Sprint("u", i), Registers: map[string]Register{
			"cursor": {Clock: Clock{Count: 1, Session: "s"}, Value: enc(i)},
		}})
	}
	done := make(chan struct{})
	go func() { h.NodeGone("node1"); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		close(store.release)
		t.Fatal("NodeGone waited for the last-seen store")
	}
	if v := h.UserPresence(context.Background(), "u7"); v.Status != StatusOffline {
		t.Fatalf("u7 is %s", v.Status)
	}
	close(store.release)
	testenv.WaitFor(t, fmt.Sprint(users, " last-seen times stored"), func() bool { return store.Len() == users })
	if n := store.batches.Load(); n > 10 {
		t.Fatalf("%d batches for %d users", n, users)
	}
}

// A node this one took for dead comes back (Redis was away longer than
// the node TTL): its whole presence, sent again with the clocks it had,
// brings its peers back. The tombstones this node wrote on a guess give
// way to the peer's own node.
func TestPeersOfANodeTakenForDeadComeBack(t *testing.T) {
	f := newFixture(t)
	b := &fakePeer{id: "b"}
	f.update(b, "cursor", "1@b")
	state := Delta{Peer: "a", User: "ana", Registers: map[string]Register{
		"cursor": {Clock: Clock{Count: 3, Session: "s"}, Value: enc("7@x")},
	}}
	f.hub.ApplyRemote("node1", doc1, state)
	f.hub.NodeGone("node1")
	if !goodbyeFor(b, "a") {
		t.Fatal("no goodbye when node 1 was taken for dead")
	}
	f.hub.ApplyRemote("node1", doc1, state) // its answer to the hello, unchanged
	var back bool
	for _, v := range f.hub.DocumentPresence(doc1) {
		back = back || v.PeerID == "a"
	}
	if !back {
		t.Fatal("a did not come back with its node's presence")
	}
	if f.hub.ApplyRoster("node1", doc1, []string{"a"}) {
		t.Fatal("the roster still misses a")
	}
}

// A tab that reloads keeps its peer id (the application passes one) but
// starts a new session, whose counts start again at one: it must be seen
// at once, here and on the other nodes, though the others still hold the
// tombstone of its old session, counted far higher (it stayed invisible
// until its new count passed the old one).
func TestAReloadedPeerWithTheSamePeerIDIsSeen(t *testing.T) {
	f1, f2 := newFixture(t), newFixture(t)
	r1 := &fakeReplicator{users: map[string]Status{}}
	f1.hub.cfg.Replicator = r1
	b, c := &fakePeer{id: "b"}, &fakePeer{id: "c"}
	f1.hub.Join(c, doc1) // c watches on a's node
	f2.hub.Join(b, doc1) // b on the other node
	a := &fakePeer{id: "a"}
	for range 50 {
		f1.update(a, "cursor", "1@x")
	}
	f1.hub.Leave(a)
	f1.clock.Advance(time.Second)
	f1.hub.Tick()

	// The reload: a new connection, a new session, count 1.
	a2 := &fakePeer{id: "a"}
	data, err := cbor.Marshal(map[string]any{"__presence": presenceMessage{Type: TypeUpdate, Channel: "cursor", Value: enc("2@y")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f1.hub.Receive(a2, doc1, Message{SenderID: "a", SessionID: "after-reload", Count: 1, Data: data}); err != nil {
		t.Fatal(err)
	}
	f1.clock.Advance(time.Second)
	f1.hub.Tick()
	for _, d := range r1.deltas {
		f2.hub.ApplyRemote("node1", doc1, d)
	}
	f2.clock.Advance(time.Second)
	f2.hub.Tick()
	for name, p := range map[string]*fakePeer{"c, on a's node": c, "b, on the other node": b} {
		var cursor any
		for _, g := range p.take() {
			if g.msg.SenderID == "a" && g.body.Type == TypeUpdate && g.body.Channel == "cursor" {
				cursor = value(t, g.body.Value)
			}
		}
		if cursor != "2@y" {
			t.Errorf("%s: a's cursor after the reload is %v, want 2@y", name, cursor)
		}
	}
}

// A peer says goodbye and comes back on the same connection (a page left
// and shown again), and its goodbye is lost on the bus: its next delta
// carries the tombstone the goodbye set, which hides values the members on
// the other node still hold (an old selection). They hear the goodbye
// then, and the peer's whole state after it, never the old values again.
func TestATombstoneThatHidesHeldValuesSaysGoodbye(t *testing.T) {
	f1, f2 := newFixture(t), newFixture(t)
	r1 := &fakeReplicator{users: map[string]Status{}}
	f1.hub.cfg.Replicator = r1
	b := &fakePeer{id: "b"}
	f2.hub.Join(b, doc1)
	a := &fakePeer{id: "a"}
	f1.snapshot(a, map[string]any{"user": map[string]any{"id": "ana", "name": "Ana"}, "cursor": "1@x", "selection": "1@x-3@x"})
	for _, d := range r1.deltas {
		f2.hub.ApplyRemote("node1", doc1, d)
	}
	b.take()

	f1.send(a, presenceMessage{Type: TypeGoodbye})
	f1.clock.Advance(time.Second)
	f1.hub.Tick()
	r1.deltas = nil // a's goodbye is lost
	f1.snapshot(a, map[string]any{"user": map[string]any{"id": "ana", "name": "Ana"}, "cursor": "2@y"})
	for _, d := range r1.deltas {
		f2.hub.ApplyRemote("node1", doc1, d)
	}
	var got []received
	var types []string
	for _, g := range b.take() {
		if g.msg.SenderID == "a" {
			got, types = append(got, g), append(types, g.body.Type)
		}
	}
	if len(types) < 2 || types[0] != TypeGoodbye || types[1] != TypeSnapshot {
		t.Fatalf("b got %v from a, want a goodbye, then a snapshot", types)
	}
	if snap := got[1]; snap.body.State["selection"] != nil || value(t, snap.body.State["cursor"]) != "2@y" {
		t.Fatalf("the snapshot after the goodbye is %+v, want a's cursor 2@y and no old selection", snap.body.State)
	}
	for _, g := range got[2:] {
		if g.body.Type == TypeGoodbye || g.body.Channel == "selection" || g.body.State["selection"] != nil {
			t.Fatalf("after the snapshot b got %+v", g.body)
		}
	}
	if v := peerView(t, f2.hub, "a"); v.Cursor != "2@y" {
		t.Fatalf("node 2 shows a as %+v", v)
	}
}
