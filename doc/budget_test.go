package doc

import (
	"context"
	"errors"
	"testing"

	"github.com/tandemhq/tandem/doc/amcheck"
	"github.com/tandemhq/tandem/doc/amcheck/amtest"
	"github.com/tandemhq/tandem/doc/amsync"
	"github.com/tandemhq/tandem/doc/guard"
)

func sendChanges(h *Hub, doc string, p Peer, chunks ...[]byte) error {
	return h.Sync(context.Background(), p, SyncMessage{DocumentID: doc, Data: messageWithRawChanges(chunks...)})
}

// Changes sent before the one they depend on wait in the guard's queue,
// and count against the document's limit as they come: one small message
// can no longer release more than the limit at once.
func TestWaitingChangesCountAgainstTheLimits(t *testing.T) {
	cs := amtest.Chain(5, 300, 0)
	c, err := amcheck.ParseSyncChange(cs[1], amcheck.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	each := guard.Cost(&c)
	h := newTestHub(t, openStore(t, t.TempDir()), Config{Limits: guard.Limits{DocumentBytes: 3*each + each/2}})
	p := &fakePeer{id: "p"}
	for i := 1; i <= 3; i++ { // three changes waiting for the first
		if err := sendChanges(h, testDoc, p, cs[i]); err != nil {
			t.Fatalf("change %d, waiting: %v", i+1, err)
		}
	}
	if err := sendChanges(h, testDoc, p, cs[4]); !errors.Is(err, ErrLimit) {
		t.Fatalf("a fifth change would make four waiting, past the limit: err = %v, want ErrLimit", err)
	}
	if err := sendChanges(h, testDoc, p, cs[0]); !errors.Is(err, ErrLimit) {
		t.Fatalf("the first change would take the document past its limit: err = %v, want ErrLimit", err)
	}
	if heads, _ := h.Heads(testDoc); len(heads) != 0 {
		t.Fatal("the document took changes over its limit")
	}
}

// The changes waiting for a dependency are bounded node-wide too.
func TestWaitingChangesAreBoundedPerNode(t *testing.T) {
	cs := amtest.Chain(3, 10, 2000)
	h := newTestHub(t, openStore(t, t.TempDir()), Config{Limits: guard.Limits{WaitingBytes: int64(len(cs[1])) + 1000}})
	p := &fakePeer{id: "p"}
	if err := sendChanges(h, testDoc, p, cs[1]); err != nil {
		t.Fatal(err)
	}
	const other = "3z6nXk1ZJj2Lu7JkH2nF7C8tZ5pH"
	if err := sendChanges(h, other, p, cs[2]); !errors.Is(err, ErrBusy) {
		t.Fatalf("a second document's waiting change: err = %v, want ErrBusy", err)
	}
	// Once the first document's change is applied, its queue is empty
	// and the node takes waiting changes again.
	if err := sendChanges(h, testDoc, p, cs[0]); err != nil {
		t.Fatal(err)
	}
	if err := sendChanges(h, other, p, cs[2]); err != nil {
		t.Fatalf("after the queue emptied: %v", err)
	}
}

// Changes with no operations are not free: a document's changes are
// bounded in bytes (long commit messages) and in number.
func TestDocumentsAreBoundedInBytesAndChanges(t *testing.T) {
	t.Run("bytes", func(t *testing.T) {
		h := newTestHub(t, openStore(t, t.TempDir()), Config{Limits: guard.Limits{DocumentBytes: 100 << 10, ChangeBytes: 32 << 10}})
		p := &fakePeer{id: "p"}
		cs := amtest.Chain(20, 0, 10<<10)
		var err error
		n := 0
		for ; n < len(cs) && err == nil; n++ {
			err = sendChanges(h, testDoc, p, cs[n])
		}
		if !errors.Is(err, ErrLimit) || n < 9 || n > 10 {
			t.Fatalf("change %d of 10 KiB: err = %v; want ErrLimit at the tenth", n, err)
		}
	})
	t.Run("changes", func(t *testing.T) {
		h := newTestHub(t, openStore(t, t.TempDir()), Config{Limits: guard.Limits{DocumentChanges: 5}})
		p := &fakePeer{id: "p"}
		cs := amtest.Chain(6, 1, 0)
		for i := range 5 {
			if err := sendChanges(h, testDoc, p, cs[i]); err != nil {
				t.Fatal(err)
			}
		}
		if err := sendChanges(h, testDoc, p, cs[5]); !errors.Is(err, ErrLimit) {
			t.Fatalf("a sixth change: err = %v, want ErrLimit", err)
		}
	})
}

// A change that waits for one the peer left out (a bloom filter's false
// positive) is answered with a need for the one left out, not for the
// change the peer already sent: a stock client sends nothing twice on one
// sync state, so asking for the waiting change would stall the document.
func TestTheRoomAsksForWhatAWaitingChangeLacks(t *testing.T) {
	h := newTestHub(t, openStore(t, t.TempDir()), Config{})
	p := &fakePeer{id: "p"}
	cs := amtest.Chain(2, 1, 0)
	c1, err := amcheck.ParseSyncChange(cs[0], amcheck.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	c2, err := amcheck.ParseSyncChange(cs[1], amcheck.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	// heads [c2], no need, no have, the change c2.
	m := amsync.Message{Heads: []amsync.Hash{c2.Hash}, Changes: [][]byte{cs[1]}}
	msg := m.Encode()
	if err := h.Sync(context.Background(), p, SyncMessage{DocumentID: testDoc, Data: msg}); err != nil {
		t.Fatal(err)
	}
	replies := p.takeSyncs()
	if len(replies) == 0 {
		t.Fatal("no reply")
	}
	sm, err := parseSyncMessage(replies[len(replies)-1])
	if err != nil {
		t.Fatal(err)
	}
	if len(sm.msg.Need) != 1 || sm.msg.Need[0] != c1.Hash {
		t.Fatalf("the reply needs %x, want only the change left out (%x)", sm.msg.Need, c1.Hash[:4])
	}
}

// What a peer keeps waiting lasts no longer than its membership: leaving
// the document gives its share of the node's waiting budget back.
func TestAPeersWaitingChangesLeaveWithIt(t *testing.T) {
	cs := amtest.Chain(3, 10, 2000)
	h := newTestHub(t, openStore(t, t.TempDir()), Config{Limits: guard.Limits{WaitingBytes: int64(len(cs[1])) + 1000}})
	p, q := &fakePeer{id: "p"}, &fakePeer{id: "q"}
	if err := sendChanges(h, testDoc, p, cs[1]); err != nil {
		t.Fatal(err)
	}
	const other = "3z6nXk1ZJj2Lu7JkH2nF7C8tZ5pH"
	if err := sendChanges(h, other, q, cs[2]); !errors.Is(err, ErrBusy) {
		t.Fatalf("while p's change waits: err = %v, want ErrBusy", err)
	}
	h.Leave(p, testDoc)
	if err := sendChanges(h, other, q, cs[2]); err != nil {
		t.Fatalf("after p left: %v", err)
	}
}
