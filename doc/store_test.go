package doc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/automerge/automerge-go"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/tandemhq/tandem/doc/amcheck/amtest"
	"github.com/tandemhq/tandem/doc/amsync"
	"github.com/tandemhq/tandem/internal/testenv"
)

func storedHas(t testing.TB, s Store, key, want string) bool {
	t.Helper()
	c := newClient("reader")
	stored, err := s.Load(context.Background(), testDoc)
	if errors.Is(err, ErrNotFound) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	if stored.Snapshot != nil {
		if err := c.doc.LoadIncremental(stored.Snapshot); err != nil {
			t.Fatal(err)
		}
	}
	for _, ch := range stored.Chunks {
		if err := c.doc.LoadIncremental(ch); err != nil {
			t.Fatal(err)
		}
	}
	return c.get(t, key) == want
}

func TestChangesReachDiskWithinFlushInterval(t *testing.T) {
	s := openStore(t, t.TempDir())
	h := newTestHub(t, s, Config{FlushInterval: 50 * time.Millisecond})
	a := newClient("a")
	a.setText(t, "title", "durable")
	a.sync(t, h, false)
	// The bound is generous for a shared machine; the design target is
	// FlushInterval plus one fsync.
	testenv.WaitWithin(t, "the change on disk", 2*time.Second, func() bool { return storedHas(t, s, "title", "durable") })
}

func TestDocumentSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	h := newTestHub(t, s, Config{})
	a := newClient("a")
	for i := 0; i < 10; i++ {
		a.setText(t, "n", fmt.Sprint(i))
		a.sync(t, h, false)
	}
	if err := h.Close(context.Background()); err != nil { // flushes
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	h2 := newTestHub(t, openStore(t, dir), Config{})
	b := newClient("b")
	b.sync(t, h2, true)
	if got := b.get(t, "n"); got != "9" {
		t.Fatalf("after restart b sees %q, want 9", got)
	}
}

func TestCompaction(t *testing.T) {
	s := openStore(t, t.TempDir())
	h := newTestHub(t, s, Config{CompactAfter: 4})
	a := newClient("a")
	for i := 0; i < 10; i++ {
		a.setText(t, "n", fmt.Sprint(i))
		a.sync(t, h, false)
		if err := h.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	stored := flushedStored(t, h, s)
	if stored.Snapshot == nil || len(stored.Chunks) >= 4 {
		t.Fatalf("snapshot %d bytes, %d chunks: want a snapshot and fewer than 4 chunks",
			len(stored.Snapshot), len(stored.Chunks))
	}
	if !storedHas(t, s, "n", "9") {
		t.Fatal("compacted document lost the last change")
	}
}

func TestEvictionAndReload(t *testing.T) {
	s := openStore(t, t.TempDir())
	h := newTestHub(t, s, Config{FlushInterval: 10 * time.Millisecond, EvictAfter: 20 * time.Millisecond})
	a := newClient("a")
	a.setText(t, "title", "kept")
	a.sync(t, h, false)
	h.Leave(a.peer, testDoc)
	testenv.WaitFor(t, "eviction", func() bool { return h.Stats().Rooms == 0 })
	b := newClient("b")
	b.sync(t, h, true)
	if got := b.get(t, "title"); got != "kept" {
		t.Fatalf("after eviction b sees %q", got)
	}
}

// A room of a document with no changes leaves memory with its last peer,
// not EvictAfter later: a client that connects, asks for a few hundred
// absent documents and leaves, again and again, kept a room (about 2.5
// KiB) for each for a minute. A document with changes stays its time.
func TestARoomOfAnAbsentDocumentLeavesWithItsLastPeer(t *testing.T) {
	h := newTestHub(t, openStore(t, t.TempDir()), Config{EvictAfter: time.Hour, UnavailableGrace: time.Millisecond})
	a := newClient("a")
	a.setText(t, "title", "kept")
	a.sync(t, h, false)
	h.Leave(a.peer, testDoc)
	const absent = "4NMNnkMhL8jXrdJ9jamS58PAVdXu"
	asker := &fakePeer{id: "asker", told: make(chan struct{}, 1)}
	if err := h.Sync(context.Background(), asker, SyncMessage{DocumentID: absent, Data: (&amsync.Message{}).Encode(), Request: true}); err != nil {
		t.Fatal(err)
	}
	h.Leave(asker, absent)
	if err := h.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A new document's first message counts in arriving from acquire
	// until it is applied: its room, empty until then, stays.
	const coming = "jN3pd9agHvY1zVqDCHrDTE3fDh1"
	r := roomOf(t, h, coming)
	r.mu.Lock()
	r.arriving++
	r.mu.Unlock()
	h.evictIdle(time.Now())
	h.mu.Lock()
	_, stayed := h.rooms[absent]
	_, kept := h.rooms[testDoc]
	_, waited := h.rooms[coming]
	h.mu.Unlock()
	if stayed {
		t.Error("the absent document's room stayed")
	}
	if !kept {
		t.Error("the document with changes left before EvictAfter")
	}
	if !waited {
		t.Error("the room of a document whose first message is on its way left")
	}
	r.mu.Lock()
	r.arriving--
	r.mu.Unlock()
}

func TestDamagedChunkIsSkipped(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	h := newTestHub(t, s, Config{})
	a := newClient("a")
	a.setText(t, "title", "whole")
	a.sync(t, h, false)
	if err := h.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(context.Background(), []Write{{DocumentID: testDoc, Chunks: [][]byte{[]byte("garbage")}}}); err != nil {
		t.Fatal(err)
	}
	h2 := newTestHub(t, s, Config{})
	b := newClient("b")
	b.sync(t, h2, true)
	if got := b.get(t, "title"); got != "whole" {
		t.Fatalf("b sees %q", got)
	}
}

// failingStore fails its first n writes.
type failingStore struct {
	Store
	mu    sync.Mutex
	fails int
}

func (f *failingStore) Write(ctx context.Context, b []Write) error {
	f.mu.Lock()
	if f.fails > 0 {
		f.fails--
		f.mu.Unlock()
		return errors.New("disk on fire")
	}
	f.mu.Unlock()
	return f.Store.Write(ctx, b)
}

// TestFailedWriteIsRetried: a change whose writes fail is written by a
// later try, and its author hears of it only then.
func TestFailedWriteIsRetried(t *testing.T) {
	for _, compactAfter := range []int{1, 64} { // with and without compaction
		t.Run(fmt.Sprint("compactAfter=", compactAfter), func(t *testing.T) {
			s := &failingStore{Store: openStore(t, t.TempDir()), fails: 2}
			h := newTestHub(t, s, Config{CompactAfter: compactAfter})
			a := newClient("a")
			a.setText(t, "first", "1")
			a.sync(t, h, false)
			for i := 0; ; i++ {
				acked := len(a.peer.syncsSoFar()) > 0
				if storedHas(t, s, "first", "1") {
					break
				}
				if acked {
					t.Fatal("the change was acknowledged before it was stored")
				}
				if i == 10 {
					t.Fatal("the change was never stored")
				}
				h.Flush(context.Background())
			}
			h.Flush(context.Background()) // the write that stored it has released its messages
			a.sync(t, h, false)
			a.setText(t, "second", "2")
			a.sync(t, h, false)
			if !storedHas(t, s, "first", "1") || !storedHas(t, s, "second", "2") {
				t.Fatal("a change was lost across failed writes")
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.fails != 0 {
				t.Fatalf("%d writes were still to fail", s.fails)
			}
		})
	}
}

func TestStorageIDIsStable(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	id, err := s.StorageID()
	if err != nil || len(id) != 36 {
		t.Fatalf("id %q, err %v", id, err)
	}
	s.Close()
	again, err := openStore(t, dir).StorageID()
	if err != nil || again != id {
		t.Fatalf("after reopen %q (err %v), want %q", again, err, id)
	}
	if _, err := os.Stat(filepath.Join(dir, "tandem.db")); err != nil {
		t.Fatal(err)
	}
}

// A document an earlier version stored (a snapshot automerge saved, then
// incremental chunks) loads, is rewritten as change bytes at the next
// compaction, and what is stored then loads in automerge-go.
func TestADocumentStoredByAnEarlierVersionLoads(t *testing.T) {
	s := openStore(t, t.TempDir())
	old := automerge.New()
	if err := old.RootMap().Set("title", "from before"); err != nil {
		t.Fatal(err)
	}
	old.Commit("one")
	snapshot := old.Save()
	old.SaveIncremental()
	if err := old.RootMap().Set("later", "a chunk"); err != nil {
		t.Fatal(err)
	}
	old.Commit("two")
	if err := s.Write(context.Background(), []Write{{DocumentID: testDoc, Snapshot: snapshot, Chunks: [][]byte{old.SaveIncremental()}}}); err != nil {
		t.Fatal(err)
	}
	h := newTestHub(t, s, Config{})
	a := newClient("a")
	a.sync(t, h, true)
	if a.get(t, "title") != "from before" || a.get(t, "later") != "a chunk" {
		t.Fatalf("a reads title %q, later %q", a.get(t, "title"), a.get(t, "later"))
	}
	a.setText(t, "new", "written now")
	a.sync(t, h, false)
	stored := flushedStored(t, h, s)
	if stored.Snapshot == nil || len(stored.Chunks) != 0 || stored.Snapshot[8] != 1 {
		t.Fatalf("stored: a snapshot of %d bytes (type %d), %d chunks; want the document rewritten as change chunks",
			len(stored.Snapshot), stored.Snapshot[8], len(stored.Chunks))
	}
	d, err := automerge.Load(stored.Snapshot)
	if err != nil {
		t.Fatalf("automerge-go does not load what is stored: %v", err)
	}
	if !sameHeads(d.Heads(), a.doc.Heads()) {
		t.Fatal("what automerge-go loads is not the document")
	}
}

// A chunk written beside a large snapshot costs the chunk's pages, not the
// snapshot's: bbolt rewrites a leaf whole, large values and all, when a
// key in it changes, so the snapshot lives apart from the chunks.
func TestAChunkDoesNotRewriteTheSnapshot(t *testing.T) {
	s := openStore(t, t.TempDir())
	ctx := context.Background()
	big := make([]byte, 2<<20)
	if err := s.Write(ctx, []Write{{DocumentID: testDoc, Snapshot: big}}); err != nil {
		t.Fatal(err)
	}
	before := s.db.Stats().TxStats
	for i := range 10 {
		if err := s.Write(ctx, []Write{{DocumentID: testDoc, Chunks: [][]byte{{byte(i), 1, 2, 3}}}}); err != nil {
			t.Fatal(err)
		}
	}
	after := s.db.Stats().TxStats
	if alloc := after.GetPageAlloc() - before.GetPageAlloc(); alloc > 10*64<<10 {
		t.Fatalf("ten 4-byte chunks allocated %d bytes of pages beside a 2 MiB snapshot", alloc)
	}
	stored, err := s.Load(ctx, testDoc)
	if err != nil || len(stored.Snapshot) != len(big) || len(stored.Chunks) != 10 {
		t.Fatalf("loaded a snapshot of %d bytes and %d chunks (err %v)", len(stored.Snapshot), len(stored.Chunks), err)
	}
}

// A file that keeps a document's snapshot in the document's own bucket, as
// earlier versions wrote it, loads; the next snapshot moves it.
func TestASnapshotInItsEarlierPlaceLoads(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	ctx := context.Background()
	writeEarlierLayout(t, s, "earlier", "chunk")
	stored, err := s.Load(ctx, testDoc)
	if err != nil || string(stored.Snapshot) != "earlier" || len(stored.Chunks) != 1 {
		t.Fatalf("loaded %q and %d chunks (err %v)", stored.Snapshot, len(stored.Chunks), err)
	}
	if err := s.Write(ctx, []Write{{DocumentID: testDoc, Snapshot: []byte("now")}}); err != nil {
		t.Fatal(err)
	}
	stored, err = s.Load(ctx, testDoc)
	if err != nil || string(stored.Snapshot) != "now" || len(stored.Chunks) != 0 {
		t.Fatalf("after a new snapshot: loaded %q and %d chunks (err %v)", stored.Snapshot, len(stored.Chunks), err)
	}
}

// An earlier version run on the file after this one compacted a document
// writes its snapshot in the earlier place and does not see this one's:
// both are read, so that neither's changes are lost.
func TestBothSnapshotPlacesAreRead(t *testing.T) {
	s := openStore(t, t.TempDir())
	ctx := context.Background()
	if err := s.Write(ctx, []Write{{DocumentID: testDoc, Snapshot: []byte("this version's")}}); err != nil {
		t.Fatal(err)
	}
	writeEarlierLayout(t, s, "the earlier version's", "a chunk after it")
	stored, err := s.Load(ctx, testDoc)
	if err != nil || string(stored.Snapshot) != "this version's" || len(stored.Chunks) != 2 ||
		string(stored.Chunks[0]) != "the earlier version's" || string(stored.Chunks[1]) != "a chunk after it" {
		t.Fatalf("loaded %q and chunks %q (err %v)", stored.Snapshot, stored.Chunks, err)
	}
}

// writeEarlierLayout writes the test document as an earlier version of
// the store wrote one, over what the file holds of it: a bucket of "docs"
// with the snapshot under "s" and one chunk.
func writeEarlierLayout(t *testing.T, s *BoltStore, snapshot, chunk string) {
	t.Helper()
	err := s.db.Update(func(tx *bolt.Tx) error {
		docs := tx.Bucket(bucketDocs)
		if err := docs.DeleteBucket([]byte(testDoc)); err != nil && !errors.Is(err, berrors.ErrBucketNotFound) {
			return err
		}
		b, err := docs.CreateBucket([]byte(testDoc))
		if err != nil {
			return err
		}
		if err := b.Put(keySnap, []byte(snapshot)); err != nil {
			return err
		}
		return b.Put([]byte{chunkTag, 0, 0, 0, 0, 0, 0, 0, 1}, []byte(chunk))
	})
	if err != nil {
		t.Fatal(err)
	}
}

// flushedStored flushes the hub and returns what the store holds of the
// test document.
func flushedStored(t *testing.T, h *Hub, s Store) Stored {
	t.Helper()
	if err := h.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	stored, err := s.Load(context.Background(), testDoc)
	if err != nil {
		t.Fatal(err)
	}
	return stored
}

// The embedded store keeps a saved document beside the document's
// changes, replaced by the next, kept through a compaction and a reopen.
func TestTheEmbeddedStoreStoresTheSavedDocument(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openStore(t, dir)
	all := amtest.Typing(3)
	if err := s.Write(ctx, []Write{{DocumentID: testDoc, Chunks: [][]byte{all[0]}}}); err != nil {
		t.Fatal(err)
	}
	for _, saved := range []string{"first", "second"} {
		if err := s.Write(ctx, []Write{{DocumentID: testDoc, Saved: []byte(saved)}}); err != nil {
			t.Fatal(err)
		}
		if got, err := s.Load(ctx, testDoc); err != nil || string(got.Saved) != saved {
			t.Fatalf("loaded saved %q (err %v), want %q", got.Saved, err, saved)
		}
	}
	if err := s.Write(ctx, []Write{{DocumentID: testDoc, Snapshot: bytes.Join(all, nil)}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got, err := openStore(t, dir).Load(ctx, testDoc); err != nil || string(got.Saved) != "second" {
		t.Fatalf("after a compaction and a reopen: saved %q (err %v)", got.Saved, err)
	}
}
