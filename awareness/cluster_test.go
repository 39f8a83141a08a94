package awareness

import (
	"testing"

	"github.com/fxamacker/cbor/v2"
)

// wire hands every presence message r published to the hub of another
// node, as the bus does, and returns how many it handed.
func wire(t *testing.T, r *fakeReplicator, from string, to *Hub) int {
	t.Helper()
	r.mu.Lock()
	deltas, rosters := r.deltas, r.rosters
	r.deltas, r.leaves, r.rosters = nil, nil, nil
	r.mu.Unlock()
	for _, d := range deltas {
		payload, _ := cbor.Marshal(nodeMsg{Kind: kindDelta, Delta: &d})
		if err := to.ReceiveRemote(from, doc1, payload); err != nil {
			t.Fatal(err)
		}
	}
	for _, peers := range rosters {
		payload, _ := cbor.Marshal(nodeMsg{Kind: kindRoster, Peers: peers})
		if err := to.ReceiveRemote(from, doc1, payload); err != nil {
			t.Fatal(err)
		}
	}
	return len(deltas) + len(rosters)
}

// Over the protocol's bytes: a node's deltas reach the other; a goodbye is
// published as a leave (never dropped for a full queue) and nothing else
// is; SendState repeats the whole state; a roster naming a peer the
// receiver has no state of makes it ask for the state, once per window.
func TestPresenceProtocolBetweenNodes(t *testing.T) {
	f1, f2 := newFixture(t), newFixture(t)
	r1, r2 := &fakeReplicator{users: map[string]Status{}}, &fakeReplicator{users: map[string]Status{}}
	f1.hub.cfg.Replicator, f2.hub.cfg.Replicator = r1, r2
	a, b := &fakePeer{id: "a"}, &fakePeer{id: "b"}
	f2.update(b, "cursor", "1@b")
	f1.update(a, "cursor", "7@x")
	r1.mu.Lock()
	for i, leave := range r1.leaves {
		if leave {
			t.Fatalf("delta %d of a peer that stays was published as a leave: %+v", i, r1.deltas[i])
		}
	}
	r1.mu.Unlock()
	wire(t, r1, "node1", f2.hub)
	if got := f2.hub.DocumentPresence(doc1); len(got) != 2 {
		t.Fatalf("node 2 shows %d peers, want a and b", len(got))
	}

	// Node 3 lost a's state on its way: node 1's rosters name a, and node
	// 3 asks for the state, once however many rosters come.
	f3 := newFixture(t)
	r3 := &fakeReplicator{users: map[string]Status{}}
	f3.hub.cfg.Replicator = r3
	f3.update(&fakePeer{id: "c"}, "cursor", "2@c")
	for range 3 {
		f1.hub.AnnounceRoster(doc1)
		wire(t, r1, "node1", f3.hub)
	}
	r3.mu.Lock()
	asked := len(r3.asked)
	r3.mu.Unlock()
	if asked != 1 {
		t.Fatalf("node 3 asked for the state %d times after three rosters naming a peer it lacks, want 1", asked)
	}
	f1.hub.SendState(doc1) // the answer to the ask
	if n := wire(t, r1, "node1", f3.hub); n != 1 {
		t.Fatalf("SendState published %d messages, want one delta for a", n)
	}
	if got := f3.hub.DocumentPresence(doc1); len(got) != 2 {
		t.Fatalf("after the state came node 3 shows %d peers, want a and c", len(got))
	}

	// a leaves: its goodbye is a leave, and node 2 lets a go.
	f1.hub.Leave(a)
	r1.mu.Lock()
	n := len(r1.leaves)
	last := n > 0 && r1.leaves[n-1] && r1.deltas[n-1].IsGoodbye()
	r1.mu.Unlock()
	if !last {
		t.Fatal("a's goodbye was not published as a leave")
	}
	wire(t, r1, "node1", f2.hub)
	if got := f2.hub.DocumentPresence(doc1); len(got) != 1 {
		t.Fatalf("after a left node 2 shows %d peers, want b alone", len(got))
	}
}

// Garbage from the bus is an error to the caller; a kind from a newer node
// is ignored.
func TestReceiveRemoteRefusesGarbage(t *testing.T) {
	f := newFixture(t)
	if err := f.hub.ReceiveRemote("node1", doc1, []byte{0xff, 0x01}); err == nil {
		t.Fatal("garbage was taken without an error")
	}
	future, _ := cbor.Marshal(nodeMsg{Kind: "from-a-newer-node"})
	if err := f.hub.ReceiveRemote("node1", doc1, future); err != nil {
		t.Fatalf("an unknown kind: %v", err)
	}
}
