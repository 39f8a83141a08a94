package doc

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// states reports which members of the test document hold a sync state.
func states(h *Hub) map[string]bool {
	h.mu.Lock()
	r := h.rooms[testDoc]
	h.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]bool{}
	for id, m := range r.members {
		out[id] = m.state != nil
	}
	return out
}

// Members level with the room and quiet give up their sync states; one
// that then writes gets a state made from the heads it was level at (its
// answers name those, not the document's whole history), and every peer
// still converges.
func TestQuietLevelMembersRest(t *testing.T) {
	h := newTestHub(t, openStore(t, t.TempDir()), Config{})
	a, b := newClient("a"), newClient("b")
	for i := range 2000 { // a history whose bloom filter would be kilobytes
		a.setText(t, "n", fmt.Sprint(i))
	}
	a.level(t, h, false)
	b.level(t, h, false)
	// b came with nothing: it was sent everything without a sync state.
	if got := states(h); !got["a"] || got["b"] {
		t.Fatalf("sync states %v before they were dropped, want a's only", got)
	}
	h.dropIdleSyncStates(time.Now()) // not quiet for long enough yet
	if got := states(h); !got["a"] {
		t.Fatalf("sync states %v right after use, want a's kept", got)
	}
	h.dropIdleSyncStates(time.Now().Add(keepIdleSyncState + time.Second))
	if got := states(h); got["a"] || got["b"] {
		t.Fatalf("sync states %v after they were dropped, want none", got)
	}
	if n := testutil.ToFloat64(h.syncStatesDropped); n != 1 {
		t.Errorf("sync states dropped = %v, want 1", n)
	}

	// The state made again names the heads a was level at: its first
	// message is small, where a new state's would carry a bloom filter of
	// the whole history.
	h.mu.Lock()
	r := h.rooms[testDoc]
	h.mu.Unlock()
	r.mu.Lock()
	msg, ok := r.syncState(r.members["a"]).GenerateMessage()
	r.mu.Unlock()
	if ok && len(msg.Bytes()) > 1000 {
		t.Errorf("a dropped state made again says %d bytes: not the heads a was level at", len(msg.Bytes()))
	}
	b.level(t, h, false)
	b.setText(t, "n", "from b")
	b.level(t, h, false)
	a.receiveUntil(t, h, testDoc, "b's change", func() bool { return a.get(t, "n") == "from b" })
	if !sameHeads(a.doc.Heads(), b.doc.Heads()) {
		t.Fatal("a and b differ after b wrote with no sync state")
	}
}
