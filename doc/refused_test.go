package doc

import (
	"context"
	"errors"
	"testing"

	"github.com/automerge/automerge-go"
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
	h := newTestHub(t, openStore(t, t.TempDir()), Config{Limits: Limits{ChangeBytes: eighty + 15*opBytes, DocumentBytes: 2*eighty + 5*opBytes}})
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

// TestRefusalMemoryIsBounded: past its bounds the memory forgets the least
// recently used entries, in count and in bytes.
func TestRefusalMemoryIsBounded(t *testing.T) {
	rf := newRefusals(&Config{RefusedChanges: 3, RefusedChangeBytes: 1 << 20})
	c := newClient("c")
	var chunks [][]byte
	for i := range 5 {
		listChange(t, c, "k", i)
		cs, err := c.doc.Changes()
		if err != nil {
			t.Fatal(err)
		}
		chunks = append(chunks, cs[len(cs)-1].Save())
	}
	cause := ErrRefused
	for _, ch := range chunks {
		rf.refused(testDoc, [][]byte{ch}, cause, Limits{ChangeBytes: 1 << 20})
	}
	if s := rf.stats(); s.Remembered != 3 {
		t.Fatalf("%d remembered, want 3", s.Remembered)
	}
	for i, ch := range chunks {
		got := rf.check(testDoc, [][]byte{ch}) != nil
		if want := i >= 2; got != want {
			t.Errorf("chunk %d: known %v, want %v", i, got, want)
		}
	}
	if rf.check("another document", [][]byte{chunks[4]}) != nil {
		t.Error("a refusal in one document refused another's change")
	}

	per := int64(len(testDoc)+len(cause.Error())) + refusalOverhead
	rf = newRefusals(&Config{RefusedChanges: 100, RefusedChangeBytes: 2 * per})
	for _, ch := range chunks {
		rf.refused(testDoc, [][]byte{ch}, cause, Limits{ChangeBytes: 1 << 20})
	}
	if s := rf.stats(); s.Remembered != 2 || s.Bytes != 2*per {
		t.Fatalf("%+v, want 2 entries of %d bytes", s, per)
	}
}
