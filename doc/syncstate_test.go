package doc

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/tandemhq/tandem/doc/amsync"
)

// unknownHeads returns n hashes no document here holds.
func unknownHeads(n, seed int) []amsync.Hash {
	out := make([]amsync.Hash, n)
	for i := range out {
		out[i] = sha256.Sum256(binary.AppendUvarint([]byte{byte(seed)}, uint64(i)))
	}
	slices.SortFunc(out, func(a, b amsync.Hash) int { return bytes.Compare(a[:], b[:]) })
	return out
}

// A connection's sync states are charged to it before a message is read
// into them: one that names 10,000 heads in document after document is
// refused once they would pass Config.SyncStateBytes, with nothing of
// the message applied, and what it was charged is given back as it
// leaves. Before, every such message was kept until the peer's next
// (2 connections × 16 documents × 16 MB held 800 MiB), counted nowhere.
func TestASyncStateIsChargedToItsConnection(t *testing.T) {
	const bound = 2 << 20
	h := newTestHub(t, openStore(t, t.TempDir()), Config{SyncStateBytes: bound})
	c := newClient("writer")
	c.setText(t, "k", "v")
	c.sync(t, h, false)

	p := &fakePeer{id: "greedy"}
	heads := unknownHeads(amsync.MaxHeads, 1) // 320 KB named, kept as the peer's heads
	msg := (&amsync.Message{Heads: heads, Have: []amsync.Have{{}}}).Encode()
	var refusedAt int
	for i := range 64 {
		err := h.Sync(context.Background(), p, SyncMessage{DocumentID: docID(i), Data: msg})
		if errors.Is(err, ErrRefused) && errors.Is(err, errSyncState) {
			refusedAt = i
			break
		}
		if err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
	}
	if refusedAt == 0 {
		t.Fatal("64 documents of 10,000 heads each were all kept")
	}
	if held := testutil.ToFloat64(h.syncStates.gauge); held > bound {
		t.Fatalf("the sync states hold %.0f bytes, over the bound %d", held, bound)
	}
	// Another connection is not held up by it.
	other := &fakePeer{id: "other"}
	if err := h.Sync(context.Background(), other, SyncMessage{DocumentID: docID(0), Data: msg}); err != nil {
		t.Fatalf("another connection: %v", err)
	}
	for i := range refusedAt {
		h.Leave(p, docID(i))
	}
	h.Leave(other, docID(0))
	h.Leave(c.peer, testDoc)
	if held := testutil.ToFloat64(h.syncStates.gauge); held > 0 {
		t.Fatalf("%.0f bytes still charged after every peer left", held)
	}
}

func docID(i int) string { return fmt.Sprintf("2gzyVEWRbEhwBcRvStKvD3gB%04d", i) }

// A filter with more bits set than it was made for could set is refused
// with an error, as input automerge never makes.
func TestASaturatedFilterIsRefused(t *testing.T) {
	h := newTestHub(t, openStore(t, t.TempDir()), Config{})
	c := newClient("writer")
	for i := range 200 {
		c.setText(t, "k", fmt.Sprint(i))
	}
	c.sync(t, h, false)
	bits := make([]byte, 20) // made for 16 entries, every bit set
	for i := range bits {
		bits[i] = 0xff
	}
	filter := append([]byte{16, 10, 7}, bits...)
	p := &fakePeer{id: "liar"}
	msg := (&amsync.Message{Heads: unknownHeads(1, 2), Have: []amsync.Have{{Bloom: filter}}}).Encode()
	err := h.Sync(context.Background(), p, SyncMessage{DocumentID: testDoc, Data: msg})
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "bloom filter") {
		t.Fatalf("err = %v, want a refused filter", err)
	}
	if len(p.takeSyncs()) != 0 {
		t.Fatal("the refused message was answered")
	}
	// The writer goes on.
	c.setText(t, "k", "after")
	c.sync(t, h, false)
}

// Peers that ask for the whole document, many at once or one again and
// again, share one copy of its bytes while a queue holds it: a reader
// asking for a 4 MB document over and over made a copy a time, each held
// in its connection's queue until written.
func TestPeersAskingForTheWholeDocumentShareOneCopy(t *testing.T) {
	h := newTestHub(t, openStore(t, t.TempDir()), Config{})
	c := newClient("writer")
	for i := range 100 {
		c.setText(t, "k", fmt.Sprint(i))
	}
	c.sync(t, h, false)
	ask := (&amsync.Message{Have: []amsync.Have{{}}}).Encode()
	var peers []*sharingPeer
	for i := range 4 {
		p := &sharingPeer{fakePeer: &fakePeer{id: fmt.Sprintf("reader%d", i)}}
		peers = append(peers, p)
		for range 3 {
			if err := h.Sync(context.Background(), p, SyncMessage{DocumentID: testDoc, Data: ask, Request: true}); err != nil {
				t.Fatal(err)
			}
			// Not bare: the next request is answered again.
			heads := (&amsync.Message{Heads: unknownHeads(1, i), Have: []amsync.Have{{}}}).Encode()
			if err := h.Sync(context.Background(), p, SyncMessage{DocumentID: testDoc, Data: heads}); err != nil {
				t.Fatal(err)
			}
		}
	}
	h.Flush(context.Background())
	var first *SharedSync
	copies := 0
	for _, p := range peers {
		p.smu.Lock()
		for _, s := range p.shared {
			if len(s.Data) < 1000 {
				continue // not the document
			}
			copies++
			if first == nil {
				first = s
			} else if s != first {
				t.Errorf("%s was sent a copy of its own", p.id)
			}
		}
		p.smu.Unlock()
	}
	if copies < 4 {
		t.Fatalf("the document was sent %d times, want at least once to each of 4 peers", copies)
	}
}
