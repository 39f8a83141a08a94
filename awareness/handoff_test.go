package awareness

import (
	"testing"

	"github.com/fxamacker/cbor/v2"
)

// verifiedPeer is a fake peer whose identity a token vouches for.
type verifiedPeer struct {
	fakePeer
	identity Identity
}

func (p *verifiedPeer) Identity() Identity { return p.identity }

// speak delivers a presence message from any peer with its next clock.
func (f *fixture) speak(p Peer, m presenceMessage) {
	f.t.Helper()
	f.count[p.ID()]++
	data, err := cbor.Marshal(map[string]any{"__presence": m})
	if err != nil {
		f.t.Fatal(err)
	}
	ok, err := f.hub.Receive(p, doc1, Message{SenderID: p.ID(), SessionID: "s-" + p.ID(), Count: f.count[p.ID()], Data: data})
	if !ok || err != nil {
		f.t.Fatalf("Receive: %v %v", ok, err)
	}
}

func peerView(t *testing.T, h *Hub, peer string) PeerView {
	t.Helper()
	for _, v := range h.DocumentPresence(doc1) {
		if v.PeerID == peer {
			return v
		}
	}
	t.Fatalf("%s is not in the document", peer)
	return PeerView{}
}

// TestLocalPeerNeverTakesAnotherUsersRemoteRecord: a connection here with
// the peer id of another user's peer on another node gets a record of its
// own. Its identity is its token's, the other user's values are not shown
// in its name, and its leaving writes no last-seen for the other user.
func TestLocalPeerNeverTakesAnotherUsersRemoteRecord(t *testing.T) {
	f := newFixture(t)
	rep := &fakeReplicator{users: map[string]Status{}}
	f.hub.cfg.Replicator = rep
	obs := &fakePeer{id: "obs"}
	f.update(obs, "cursor", "0@o")
	// The victim's peer, on node a, is well ahead in clocks.
	later := Clock{Count: 50, Session: "s-victim"}
	f.hub.ApplyRemote("node-a", doc1, Delta{Peer: "p", User: "victim", Registers: map[string]Register{
		ChannelUser: {Clock: later, Value: enc(map[string]any{"id": "victim", "name": "Victim"})},
		"cursor":    {Clock: later, Value: enc("9@v")},
	}})
	obs.take()

	mallory := &verifiedPeer{fakePeer: fakePeer{id: "p"}, identity: Identity{UserID: "mallory", Name: "Mallory"}}
	f.speak(mallory, presenceMessage{Type: TypeHeartbeat})
	got := obs.take()
	if len(got) == 0 || got[0].msg.SenderID != "p" || got[0].body.Type != TypeGoodbye {
		t.Fatalf("obs got %+v, want first a goodbye for the victim's values under p", got)
	}
	v := peerView(t, f.hub, "p")
	if v.UserID != "mallory" || v.Name != "Mallory" || v.Cursor != nil {
		t.Fatalf("p shows as %+v: it must be mallory's, from the token, with none of the victim's values", v)
	}
	for _, d := range rep.deltas {
		if d.Peer == "p" && d.User != "mallory" {
			t.Fatalf("published %+v: this node spoke for another node's peer", d)
		}
	}
	f.hub.Leave(mallory)
	if f.seen.Has("victim") {
		t.Fatal("a last-seen was stored for the victim, who never left")
	}
	if !f.seen.Has("mallory") {
		t.Fatal("mallory's own leaving stored no last-seen")
	}
}

// TestPeerMovesToAnotherNode: a tab whose socket dropped reconnects to
// another node with its peer id. There it keeps its presence, with no
// goodbye; the first node hands it over without a word in its name, keeps
// showing it as the other node's and stores no last-seen.
func TestPeerMovesToAnotherNode(t *testing.T) {
	f1, f2 := newFixture(t), newFixture(t)
	r1 := &fakeReplicator{users: map[string]Status{}}
	r2 := &fakeReplicator{users: map[string]Status{}}
	f1.hub.cfg.Replicator, f2.hub.cfg.Replicator = r1, r2
	o1, o2 := &fakePeer{id: "o1"}, &fakePeer{id: "o2"}
	f1.update(o1, "cursor", "1@o")
	f2.update(o2, "cursor", "2@o")
	ana := Identity{UserID: "ana", Name: "Ana"}
	tab1 := &verifiedPeer{fakePeer: fakePeer{id: "tab"}, identity: ana}
	f1.speak(tab1, presenceMessage{Type: TypeUpdate, Channel: "cursor", Value: enc("5@a")})
	for _, d := range r1.deltas {
		f2.hub.ApplyRemote("node1", doc1, d)
	}
	o1.take()
	o2.take()

	tab2 := &verifiedPeer{fakePeer: fakePeer{id: "tab"}, identity: ana}
	f2.count["tab"] = f1.count["tab"] // the same client, its session going on
	f2.speak(tab2, presenceMessage{Type: TypeHeartbeat})
	for _, g := range o2.take() {
		if g.msg.SenderID == "tab" && g.body.Type == TypeGoodbye {
			t.Fatal("node 2 said goodbye for a tab that only moved to it")
		}
	}
	if v := peerView(t, f2.hub, "tab"); v.UserID != "ana" || v.Name != "Ana" || v.Cursor != "5@a" {
		t.Fatalf("on node 2 the tab shows as %+v", v)
	}

	published := len(r1.deltas)
	f1.hub.Handoff(tab1, "node2")
	f1.hub.Leave(tab1) // the old socket's close: ignored
	for _, g := range o1.take() {
		if g.msg.SenderID == "tab" {
			t.Fatalf("node 1 sent %+v in the name of a tab now on node 2", g.body)
		}
	}
	if len(r1.deltas) != published {
		t.Fatalf("node 1 published %+v for a tab now on node 2", r1.deltas[published:])
	}
	if f1.seen.Has("ana") {
		t.Fatal("node 1 stored a last-seen for ana, who is on node 2")
	}
	if v := f1.hub.UserPresence(t.Context(), "ana"); v.Status != StatusOnline {
		t.Fatalf("node 1 sees ana %s", v.Status)
	}
	if r1.users["ana"] != StatusOffline {
		t.Fatalf("node 1 still says ana is %q on it", r1.users["ana"])
	}

	// Node 2 now speaks for the tab, and node 1 hears it.
	f2.speak(tab2, presenceMessage{Type: TypeUpdate, Channel: "cursor", Value: enc("6@a")})
	f2.hub.Tick() // the cursor went out this tick already: it leaves on the trailing edge
	for _, d := range r2.deltas {
		f1.hub.ApplyRemote("node2", doc1, d)
	}
	f1.hub.Tick()
	var cursor any
	for _, g := range o1.take() {
		switch {
		case g.msg.SenderID != "tab":
		case g.body.Channel == "cursor":
			cursor = value(t, g.body.Value)
		case g.body.State["cursor"] != nil: // with what else changed with it
			cursor = value(t, g.body.State["cursor"])
		}
	}
	if cursor != "6@a" {
		t.Fatalf("node 1 did not forward the tab's cursor from node 2 (got %v)", cursor)
	}
}

// TestHandoffOfLastMember: when the moved tab was the document's only
// member here, the room goes and the user with it, but no last-seen is
// stored: the user did not leave.
func TestHandoffOfLastMember(t *testing.T) {
	f := newFixture(t)
	tab := &verifiedPeer{fakePeer: fakePeer{id: "tab"}, identity: Identity{UserID: "ana"}}
	f.speak(tab, presenceMessage{Type: TypeUpdate, Channel: "cursor", Value: enc("1@a")})
	f.hub.Handoff(tab, "node2")
	if len(f.hub.peers) != 0 || len(f.hub.rooms) != 0 {
		t.Fatalf("left behind %d peers and %d rooms", len(f.hub.peers), len(f.hub.rooms))
	}
	if f.seen.Has("ana") {
		t.Fatal("a last-seen was stored for a user who moved to another node")
	}
}
