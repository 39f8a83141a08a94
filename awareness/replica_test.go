package awareness

import (
	"sync"
	"testing"
)

// fakeReplicator records what a hub publishes for other nodes.
type fakeReplicator struct {
	mu     sync.Mutex
	deltas []Delta
	users  map[string]Status
}

func (f *fakeReplicator) PublishPresence(_ string, d Delta) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deltas = append(f.deltas, d)
}
func (f *fakeReplicator) PublishUserStatus(u string, s Status) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.users[u] = s
}
func (f *fakeReplicator) WatchUsers([]string, bool) {}

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
