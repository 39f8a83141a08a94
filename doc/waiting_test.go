package doc

import (
	"crypto/sha256"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/tandemhq/tandem/doc/amcheck"
	"github.com/tandemhq/tandem/doc/amcheck/amtest"
)

// heapLive returns the bytes the heap holds after a collection.
func heapLive() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// waitingChange returns a change by actor n of ops puts that depends on
// a change nobody has.
func waitingChange(n, ops int) []byte {
	missing := sha256.Sum256([]byte("never sent"))
	c := amtest.Change{Actors: [][]byte{[]byte(fmt.Sprintf("actor-%08d", n))}, Seq: 1, StartOp: 1, Deps: [][32]byte{missing}}
	for range ops {
		c.Ops = append(c.Ops, amtest.Put(amcheck.OpID{}, "k"))
	}
	chunk, _ := amtest.Encode(c)
	return chunk
}

// A change that waits for a dependency holds what the waiting budget is
// charged for it, and no more: not its operations read out one by one
// (80 bytes and more each, where it is charged 16), nor the message it
// came in (a small change in a large message).
func TestAWaitingChangeHoldsNoMoreThanItIsCharged(t *testing.T) {
	for _, tc := range []struct {
		name string
		// send sends the i-th waiting change.
		send func(t *testing.T, h *Hub, p Peer, i int)
	}{{
		name: "many operations",
		send: func(t *testing.T, h *Hub, p Peer, i int) {
			if err := sendChanges(h, testDoc, p, waitingChange(i, 50_000)); err != nil {
				t.Fatal(err)
			}
		},
	}, {
		name: "in a large message",
		send: func(t *testing.T, h *Hub, p Peer, i int) {
			// A change of 1 MiB the document has already, sent again
			// with the waiting one.
			known, _ := amtest.Encode(amtest.Change{Actors: [][]byte{[]byte("known")}, Seq: 1, StartOp: 1,
				Message: strings.Repeat("m", 1<<20)})
			if i == 0 {
				if err := sendChanges(h, testDoc, p, known); err != nil {
					t.Fatal(err)
				}
			}
			if err := sendChanges(h, testDoc, p, known, waitingChange(i, 1)); err != nil {
				t.Fatal(err)
			}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			h := newTestHub(t, openStore(t, t.TempDir()), Config{})
			p := &fakePeer{id: "p"}
			tc.send(t, h, p, 0)
			before, charged := heapLive(), h.waiting.Load()
			const n = 8
			for i := 1; i <= n; i++ {
				tc.send(t, h, p, i)
			}
			p.takeSyncs()
			grown, charged := heapLive()-before, h.waiting.Load()-charged
			if charged <= 0 {
				t.Fatal("nothing waits")
			}
			t.Logf("%d waiting changes: charged %d bytes, the heap grew by %d", n, charged, grown)
			// The margin: a few hundred bytes a change for the queue's
			// entry, and the room's replies.
			if grown > charged+n*1024+256<<10 {
				t.Fatalf("%d waiting changes are charged %d bytes and hold %d", n, charged, grown)
			}
		})
	}
}
