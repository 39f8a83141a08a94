package doc

import (
	"sync"
	"testing"

	"github.com/automerge/automerge-go"
	"github.com/fxamacker/cbor/v2"

	"github.com/tandemhq/tandem/doc/store"
	"github.com/tandemhq/tandem/internal/testenv"
)

// link is a bus between two hubs in one process: what one publishes, the
// other receives, in order, on a goroutine of the link's. While lossy is
// set, changes are lost on the way, as on a bus that dropped them.
type link struct {
	to    *Hub
	queue chan []byte

	mu    sync.Mutex
	lossy bool
}

func (l *link) PublishDocument(_ string, payload []byte) {
	var m clusterMsg
	if err := cbor.Unmarshal(payload, &m); err != nil {
		panic(err)
	}
	l.mu.Lock()
	lost := l.lossy && m.Kind == kindChanges
	l.mu.Unlock()
	if !lost {
		l.queue <- payload
	}
}

func (l *link) setLossy(on bool) {
	l.mu.Lock()
	l.lossy = on
	l.mu.Unlock()
}

// linkedHubs starts two hubs, each with a store of its own, joined by links.
func linkedHubs(t *testing.T) (h1, h2 *Hub, to1, to2 *link) {
	t.Helper()
	return linkedHubsOn(t, openStore(t, t.TempDir()), openStore(t, t.TempDir()), Config{})
}

// linkedHubsOn starts two hubs on these stores with cfg, joined by links.
func linkedHubsOn(t *testing.T, s1, s2 store.Store, cfg Config) (h1, h2 *Hub, to1, to2 *link) {
	t.Helper()
	to1, to2 = &link{queue: make(chan []byte, 64)}, &link{queue: make(chan []byte, 64)}
	cfg.Cluster = to2
	h1 = newTestHub(t, s1, cfg)
	cfg.Cluster = to1
	h2 = newTestHub(t, s2, cfg)
	to1.to, to2.to = h1, h2
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, l := range []*link{to1, to2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case p := <-l.queue:
					if err := l.to.ReceiveRemote(testDoc, p); err != nil {
						t.Error(err)
					}
				}
			}
		}()
	}
	t.Cleanup(func() { close(stop); wg.Wait() }) // before the hubs close
	return h1, h2, to1, to2
}

// sameHubHeads reports whether both hubs have the test document at the
// same heads.
func sameHubHeads(h1, h2 *Hub) bool {
	a, ok1 := h1.Heads(testDoc)
	b, ok2 := h2.Heads(testDoc)
	if !ok1 || !ok2 || len(a) != len(b) {
		return false
	}
	for i := range a {
		if string(a[i]) != string(b[i]) {
			return false
		}
	}
	return true
}

// A change lost between nodes is repaired by the heads exchange, in both
// directions: the node that lacks it announces its heads and is sent the
// change (chg), and the node that has it announces its heads and is asked
// for what follows the other's (want, then chg). Repeated.
func TestHeadsExchangeRepairsLostChanges(t *testing.T) {
	h1, h2, _, to2 := linkedHubs(t)
	a, b := newClient("a"), newClient("b")
	b.sync(t, h2, true) // node 2 holds the room, waiting for the document
	a.setText(t, "title", "start")
	a.sync(t, h1, false)
	testenv.WaitFor(t, "the first change on node 2", func() bool { return sameHubHeads(h1, h2) })
	b.sync(t, h2, false)

	for round := range 50 {
		to2.setLossy(true)
		want := a.get(t, "title") + "+"
		a.setText(t, "title", want)
		a.sync(t, h1, false) // accepted and stored on node 1; lost on its way to node 2
		to2.setLossy(false)
		if sameHubHeads(h1, h2) {
			t.Fatalf("round %d: the change reached node 2 though it was lost", round)
		}
		if round%2 == 0 {
			h2.AnnounceHeads(testDoc) // node 1 has more: it answers chg
		} else {
			h1.AnnounceHeads(testDoc) // node 2 lacks a head: it answers want
		}
		testenv.WaitFor(t, "the lost change repaired", func() bool { return sameHubHeads(h1, h2) })
		b.sync(t, h2, false)
		if got := b.get(t, "title"); got != want {
			t.Fatalf("round %d: a peer of node 2 reads %q, node 1 accepted %q", round, got, want)
		}
	}
}

// Applying another node's changes costs automerge's time; the bus that
// hands them over also carries presence and goodbyes, which must not wait
// for it (the soak saw goodbyes 15 s late while many documents started at
// once). Receive queues changes in the lane and returns; ephemerals go to
// the local peers at once, and the changes are applied in order later.
func TestReceiveDoesNotWaitForApplying(t *testing.T) {
	h := newTestHub(t, openStore(t, t.TempDir()), Config{Cluster: &fakeCluster{}})
	local := newClient("local")
	local.setText(t, "title", "here")
	local.sync(t, h, false)

	other, err := automerge.Load(local.doc.Save())
	if err != nil {
		t.Fatal(err)
	}
	var payloads [][]byte
	for i := range 3 {
		before := other.Heads()
		other.RootMap().Set("title", string(rune('a'+i)))
		other.Commit("remote")
		cs, err := other.Changes(before...)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := cbor.Marshal(clusterMsg{Kind: kindChanges, Data: automerge.SaveChanges(cs)})
		payloads = append(payloads, p)
	}
	// Applying waits for the room's apply lock, held here: the lane takes
	// the first message and waits.
	r := roomOf(t, h, testDoc)
	r.applyMu.Lock()
	released := false
	t.Cleanup(func() {
		if !released {
			r.applyMu.Unlock()
		}
	})
	for _, p := range payloads {
		if err := h.ReceiveRemote(testDoc, p); err != nil { // returns while the first waits in the lane
			t.Fatal(err)
		}
	}
	testenv.WaitFor(t, "the lane to take the first changes", func() bool { return len(h.lane) == len(payloads)-1 })
	eph, _ := cbor.Marshal(clusterMsg{Kind: kindEphemeral, Eph: &clusterEphemeral{Sender: "remote-peer", Session: "s", Count: 1, Data: []byte{0xa0}}})
	if err := h.ReceiveRemote(testDoc, eph); err != nil {
		t.Fatal(err)
	}
	local.peer.mu.Lock()
	got := len(local.peer.ephemerals)
	local.peer.mu.Unlock()
	if got != 1 {
		t.Fatalf("the local peer got %d ephemerals while the lane was busy, want 1", got)
	}

	released = true
	r.applyMu.Unlock()
	testenv.WaitFor(t, "the changes applied in order", func() bool {
		heads, ok := h.Heads(testDoc)
		return ok && len(heads) == 1 && string(heads[0]) == string(other.Heads()[0][:])
	})
	local.sync(t, h, false)
	if v := local.get(t, "title"); v != "c" {
		t.Fatalf("the local peer reads %q, want the last remote change %q", v, "c")
	}
}

// Garbage from the bus is an error to the caller, and a kind from a newer
// node is ignored; neither touches the document.
func TestReceiveRefusesGarbage(t *testing.T) {
	h := newTestHub(t, openStore(t, t.TempDir()), Config{Cluster: &fakeCluster{}})
	c := newClient("c")
	c.setText(t, "title", "kept")
	c.sync(t, h, false)
	before, _ := h.Heads(testDoc)
	if err := h.ReceiveRemote(testDoc, []byte{0xff, 0x00, 0x13}); err == nil {
		t.Fatal("garbage was taken without an error")
	}
	future, _ := cbor.Marshal(clusterMsg{Kind: "from-a-newer-node", Data: []byte("x")})
	if err := h.ReceiveRemote(testDoc, future); err != nil {
		t.Fatalf("an unknown kind: %v", err)
	}
	bad, _ := cbor.Marshal(clusterMsg{Kind: kindChanges, Data: []byte("not automerge")})
	if err := h.ReceiveRemote(testDoc, bad); err != nil {
		t.Fatal(err)
	}
	// A want from the start, answered from the lane after the bad changes.
	want, _ := cbor.Marshal(clusterMsg{Kind: kindWant})
	if err := h.ReceiveRemote(testDoc, want); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the lane past the bad changes", func() bool {
		return h.cfg.Cluster.(*fakeCluster).count() > 0
	})
	after, _ := h.Heads(testDoc)
	if len(after) != 1 || string(after[0]) != string(before[0]) {
		t.Fatal("the document changed")
	}
}
