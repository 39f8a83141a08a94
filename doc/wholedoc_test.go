package doc

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/automerge/automerge-go"

	"github.com/tandemhq/tandem/doc/amcheck/amtest"
	"github.com/tandemhq/tandem/doc/amdoc"
	"github.com/tandemhq/tandem/doc/amsync"
	"github.com/tandemhq/tandem/doc/guard"
)

// A peer that reads sync messages of version 2 (automerge 0.6 and later)
// sends a server that has nothing of a document the whole document saved,
// and its other changes joined in one entry.

// v2Message is a version 2 message from a peer at heads carrying one
// entry: entry.
func v2Message(heads []automerge.ChangeHash, entry []byte) []byte {
	m := amsync.Message{V2: true, Heads: make([]amsync.Hash, len(heads))}
	for i := range heads {
		m.Heads[i] = amsync.Hash(heads[i])
	}
	if entry != nil {
		m.Changes = [][]byte{entry}
	}
	return m.Encode()
}

// TestAWholeDocumentFromAPeerIsTakenStoredAndSentOn sends the hub a
// document saved by automerge as the one entry of a version 2 message:
// its changes are taken, each stored, and a reader gets them, before and
// after a restart.
func TestAWholeDocumentFromAPeerIsTakenStoredAndSentOn(t *testing.T) {
	s := openStore(t, t.TempDir())
	h := newTestHub(t, s, Config{})
	a := newClient("a")
	a.setText(t, "title", "whole")
	a.setText(t, "body", "sent as a document")
	a.setText(t, "title", "whole, twice")
	if err := h.Sync(context.Background(), a.peer, SyncMessage{DocumentID: testDoc,
		Data: v2Message(a.doc.Heads(), a.doc.Save())}); err != nil {
		t.Fatal(err)
	}
	stored := flushedStored(t, h, s)
	heads := make([]amsync.Hash, 0)
	cs, err := a.doc.Changes()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		heads = append(heads, amsync.Hash(c.Hash()))
	}
	if !storedHolds(stored, heads) {
		t.Fatalf("the store does not hold every change of the document")
	}
	b := newClient("b")
	b.sync(t, h, true)
	if b.get(t, "title") != "whole, twice" || b.get(t, "body") != "sent as a document" || !sameHeads(b.doc.Heads(), a.doc.Heads()) {
		t.Fatalf("b sees title %q, body %q", b.get(t, "title"), b.get(t, "body"))
	}
	h.Close(context.Background())

	h2 := newTestHub(t, s, Config{})
	c := newClient("c")
	c.sync(t, h2, true)
	if c.get(t, "title") != "whole, twice" || !sameHeads(c.doc.Heads(), a.doc.Heads()) {
		t.Fatalf("after a restart c sees title %q", c.get(t, "title"))
	}
}

// TestJoinedChangesFromAPeerAreTaken sends the hub changes joined in one
// entry of a version 2 message, on top of what it has: they are taken and
// sent on.
func TestJoinedChangesFromAPeerAreTaken(t *testing.T) {
	h := newTestHub(t, openStore(t, t.TempDir()), Config{})
	a := newClient("a")
	a.setText(t, "title", "first")
	a.sync(t, h, false)
	before := a.doc.Heads()
	a.setText(t, "title", "second")
	a.setText(t, "body", "joined")
	cs, err := a.doc.Changes(before...)
	if err != nil {
		t.Fatal(err)
	}
	var joined []byte
	for _, c := range cs {
		joined = append(joined, c.Save()...)
	}
	if err := h.Sync(context.Background(), a.peer, SyncMessage{DocumentID: testDoc, Data: v2Message(a.doc.Heads(), joined)}); err != nil {
		t.Fatal(err)
	}
	h.Flush(context.Background())
	b := newClient("b")
	b.sync(t, h, true)
	if b.get(t, "title") != "second" || b.get(t, "body") != "joined" {
		t.Fatalf("b sees title %q, body %q", b.get(t, "title"), b.get(t, "body"))
	}
}

// TestAWholeDocumentPassesTheGuard sends documents whose changes the guard
// refuses, or that pass the document's limit, or whose changes do not
// reach the heads they state: each is refused, and the document keeps
// what it had.
func TestAWholeDocumentPassesTheGuard(t *testing.T) {
	h := newTestHub(t, openStore(t, t.TempDir()), Config{Limits: guard.Limits{DocumentBytes: 64 << 10}})
	a, twin := newClient("a"), newClient("twin")
	twin.doc.SetActorID(a.doc.ActorID())
	a.setText(t, "title", "a's")
	a.sync(t, h, false)
	twin.setText(t, "title", "twin's") // the same actor's first change again

	paste, err := amdoc.Save(amtest.Paste(100_000))
	if err != nil {
		t.Fatal(err)
	}
	lying := bytes.Clone(twin.doc.Save())
	lying, err = amdocWithHeads(lying, automerge.ChangeHash(bytes.Repeat([]byte{0x77}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		doc  []byte
		want error
	}{
		{"a sequence number taken", twin.doc.Save(), ErrRefused},
		{"past the document's limit", paste, ErrLimit},
		{"heads it does not reach", lying, ErrRefused},
	} {
		err := h.Sync(context.Background(), twin.peer, SyncMessage{DocumentID: testDoc, Data: v2Message(nil, tc.doc)})
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
	}
	b := newClient("b")
	b.sync(t, h, true)
	if got := b.get(t, "title"); got != "a's" || !sameHeads(b.doc.Heads(), a.doc.Heads()) {
		t.Fatalf("b sees %q", got)
	}
}

// amdocWithHeads returns a document chunk of one head stating head as it,
// its checksum made right.
func amdocWithHeads(doc []byte, head automerge.ChangeHash) ([]byte, error) {
	_, k := binary.Uvarint(doc[9:])
	b := doc[9+k:]
	n, k := binary.Uvarint(b)
	b = b[k:]
	for range n {
		l, k := binary.Uvarint(b)
		b = b[k+int(l):]
	}
	if nh, k := binary.Uvarint(b); nh != 1 {
		return nil, errors.New("not a document of one head")
	} else {
		b = b[k:]
	}
	copy(b[:32], head[:])
	sum := sha256.Sum256(doc[8:])
	copy(doc[4:8], sum[:4])
	return doc, nil
}

// TestTheDocumentsOfAMessageShareItsHeadroom sends, in one entry, many
// documents that each write a megabyte of changes from a kilobyte: the
// same one over and over, then many of their own. The same one is read
// once (each copy read, they passed the document's limit together);
// different ones share what the document may still hold, so that the
// reading stops once they have written that (each with the whole
// headroom, all were read and the guard refused them after: found by
// attacking the node from outside, where 2.9 MB held 3.5 GB).
func TestTheDocumentsOfAMessageShareItsHeadroom(t *testing.T) {
	const copies = 16
	zeros := func(actor byte) []byte {
		d := automerge.New()
		d.SetActorID(fmt.Sprintf("%032x", actor))
		if err := d.RootMap().Set("blob", make([]byte, 1<<20)); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Commit("blob"); err != nil {
			t.Fatal(err)
		}
		return d.Save()
	}
	h := newTestHub(t, openStore(t, t.TempDir()), Config{Limits: guard.Limits{DocumentBytes: 8 << 20}})
	p := newClient("p")

	one := zeros(1)
	var entry []byte
	for range copies {
		entry = append(entry, one...)
	}
	if err := h.Sync(context.Background(), p.peer, SyncMessage{DocumentID: testDoc, Data: v2Message(nil, entry)}); err != nil {
		t.Fatalf("the same document %d times: %v", copies, err)
	}

	entry = entry[:0]
	for i := range copies {
		entry = append(entry, zeros(byte(2+i))...)
	}
	err := h.Sync(context.Background(), p.peer, SyncMessage{DocumentID: testDoc, Data: v2Message(nil, entry)})
	if !errors.Is(err, ErrLimit) || !errors.Is(err, amdoc.ErrLoadLimit) {
		t.Errorf("%d documents of a megabyte into 8 MB: %v, want the reading stopped at the headroom (ErrLimit, amdoc.ErrLoadLimit)", copies, err)
	}
}
