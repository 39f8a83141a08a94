package doc

import (
	"context"
	"errors"
	"testing"

	"github.com/automerge/automerge-go"
	"github.com/tandemhq/tandem/doc/guard"
)

// TestRefusedChangeIsKnownByItsHash: a change the guard refused is refused
// again, sent again, by its hash: the guard does not run a second time.
// Changes refused as a whole are known again only all together; the
// others in a message refused for one change are not remembered; and a
// change whose checksum is not its hash is never remembered, so that no
// one can make the hub remember another's change.
func TestRefusedChangeIsKnownByItsHash(t *testing.T) {
	probe := newClient("probe")
	listChange(t, probe, "x", 80)
	pcs, err := probe.doc.Changes()
	if err != nil {
		t.Fatal(err)
	}
	eighty := costOf(t, pcs) // a change of 81 ops
	// A change of 101 ops is over ChangeBytes; the small change and two
	// of 81 ops are over DocumentBytes, each of them alone is not.
	h := newTestHub(t, openStore(t, t.TempDir()), Config{Limits: guard.Limits{ChangeBytes: eighty + 15*guard.OpBytes, DocumentBytes: 2*eighty + 5*guard.OpBytes}})
	send := func(c *client, cs []*automerge.Change) error {
		return h.Sync(context.Background(), c.peer, SyncMessage{DocumentID: testDoc, Data: messageWithChanges(c.doc.Heads(), cs)})
	}
	changes := func(c *client, since ...automerge.ChangeHash) []*automerge.Change {
		cs, err := c.doc.Changes(since...)
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}

	big := newClient("big")
	listChange(t, big, "small", 10)
	small := changes(big)
	listChange(t, big, "big", 100) // 101 ops
	all := changes(big)
	if err := send(big, all); !errors.Is(err, ErrLimit) {
		t.Fatalf("a change of 101 ops: err = %v, want ErrLimit", err)
	}
	if s := h.RefusalStats(); s.ByGuard != 1 || s.ByMemory != 0 || s.Remembered != 1 {
		t.Fatalf("after the refusal: %+v, want one by the guard and one change remembered", s)
	}
	if err := send(big, all); !errors.Is(err, ErrLimit) {
		t.Fatalf("the same change again: err = %v, want ErrLimit", err)
	}
	if s := h.RefusalStats(); s.ByGuard != 1 || s.ByMemory != 1 {
		t.Fatalf("the retry: %+v, want it refused by memory, the guard not run again", s)
	}
	if err := send(big, small); err != nil {
		t.Fatalf("the small change alone: %v, want it taken", err)
	}

	two := newClient("two")
	listChange(t, two, "x", 80)
	first := changes(two)
	listChange(t, two, "y", 80)
	if err := send(two, changes(two)); !errors.Is(err, ErrLimit) {
		t.Fatalf("a message past the document's limit: err = %v, want ErrLimit", err)
	}
	if err := send(two, changes(two)); !errors.Is(err, ErrLimit) || h.RefusalStats().ByMemory != 2 {
		t.Fatalf("the same message again: err = %v, stats %+v, want it refused by memory", err, h.RefusalStats())
	}
	if err := send(two, first); err != nil {
		t.Fatalf("one of the changes alone: %v, want it taken", err)
	}

	forged := newClient("forged")
	listChange(t, forged, "f", 200)
	cs := changes(forged)
	chunk := cs[0].Save()
	chunk[4] ^= 0xff // checksum
	for range 2 {
		err := h.Sync(context.Background(), forged.peer, SyncMessage{DocumentID: testDoc, Data: messageWithRawChanges(chunk)})
		if !errors.Is(err, ErrRefused) {
			t.Fatalf("a bad checksum: err = %v, want ErrRefused", err)
		}
	}
	if s := h.RefusalStats(); s.ByMemory != 2 {
		t.Fatalf("a change with a bad checksum was remembered: %+v", s)
	}
}
