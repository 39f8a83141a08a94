package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	bbolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

func TestBolt(t *testing.T) {
	suite{
		open: func(t *testing.T) func() Store {
			dir := t.TempDir()
			return func() Store { return openBolt(t, dir) }
		},
		refused: "", // bbolt takes no bucket without a name
	}.run(t)
}

// openBolt opens the embedded store in dir, closed when t ends.
func openBolt(t testing.TB, dir string) *Bolt {
	t.Helper()
	s, err := OpenBolt(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestStorageIDIsStable(t *testing.T) {
	dir := t.TempDir()
	s := openBolt(t, dir)
	id, err := s.StorageID()
	if err != nil || len(id) != 36 {
		t.Fatalf("id %q, err %v", id, err)
	}
	s.Close()
	again, err := openBolt(t, dir).StorageID()
	if err != nil || again != id {
		t.Fatalf("after reopen %q (err %v), want %q", again, err, id)
	}
	if _, err := os.Stat(filepath.Join(dir, "tandem.db")); err != nil {
		t.Fatal(err)
	}
}

// A chunk written beside a large snapshot costs the chunk's pages, not the
// snapshot's: bbolt rewrites a leaf whole, large values and all, when a
// key in it changes, so the snapshot lives apart from the chunks.
func TestAChunkDoesNotRewriteTheSnapshot(t *testing.T) {
	s := openBolt(t, t.TempDir())
	ctx := context.Background()
	big := make([]byte, 2<<20)
	if err := s.Write(ctx, []Write{{DocumentID: doc, Snapshot: big}}); err != nil {
		t.Fatal(err)
	}
	before := s.db.Stats().TxStats
	for i := range 10 {
		if err := s.Write(ctx, []Write{{DocumentID: doc, Chunks: [][]byte{{byte(i), 1, 2, 3}}}}); err != nil {
			t.Fatal(err)
		}
	}
	after := s.db.Stats().TxStats
	if alloc := after.GetPageAlloc() - before.GetPageAlloc(); alloc > 10*64<<10 {
		t.Fatalf("ten 4-byte chunks allocated %d bytes of pages beside a 2 MiB snapshot", alloc)
	}
	stored, err := s.Load(ctx, doc)
	if err != nil || len(stored.Snapshot) != len(big) || len(stored.Chunks) != 10 {
		t.Fatalf("loaded a snapshot of %d bytes and %d chunks (err %v)", len(stored.Snapshot), len(stored.Chunks), err)
	}
}

// A file that keeps a document's snapshot in the document's own bucket, as
// earlier versions wrote it, loads; the next snapshot moves it.
func TestASnapshotInItsEarlierPlaceLoads(t *testing.T) {
	dir := t.TempDir()
	s := openBolt(t, dir)
	ctx := context.Background()
	writeEarlierLayout(t, s, "earlier", "chunk")
	stored, err := s.Load(ctx, doc)
	if err != nil || string(stored.Snapshot) != "earlier" || len(stored.Chunks) != 1 {
		t.Fatalf("loaded %q and %d chunks (err %v)", stored.Snapshot, len(stored.Chunks), err)
	}
	if err := s.Write(ctx, []Write{{DocumentID: doc, Snapshot: []byte("now")}}); err != nil {
		t.Fatal(err)
	}
	stored, err = s.Load(ctx, doc)
	if err != nil || string(stored.Snapshot) != "now" || len(stored.Chunks) != 0 {
		t.Fatalf("after a new snapshot: loaded %q and %d chunks (err %v)", stored.Snapshot, len(stored.Chunks), err)
	}
}

// An earlier version run on the file after this one compacted a document
// writes its snapshot in the earlier place and does not see this one's:
// both are read, so that neither's changes are lost.
func TestBothSnapshotPlacesAreRead(t *testing.T) {
	s := openBolt(t, t.TempDir())
	ctx := context.Background()
	if err := s.Write(ctx, []Write{{DocumentID: doc, Snapshot: []byte("this version's")}}); err != nil {
		t.Fatal(err)
	}
	writeEarlierLayout(t, s, "the earlier version's", "a chunk after it")
	stored, err := s.Load(ctx, doc)
	if err != nil || string(stored.Snapshot) != "this version's" || len(stored.Chunks) != 2 ||
		string(stored.Chunks[0]) != "the earlier version's" || string(stored.Chunks[1]) != "a chunk after it" {
		t.Fatalf("loaded %q and chunks %q (err %v)", stored.Snapshot, stored.Chunks, err)
	}
}

// writeEarlierLayout writes the test document as an earlier version of
// the store wrote one, over what the file holds of it: a bucket of "docs"
// with the snapshot under "s" and one chunk.
func writeEarlierLayout(t *testing.T, s *Bolt, snapshot, chunk string) {
	t.Helper()
	err := s.db.Update(func(tx *bbolt.Tx) error {
		docs := tx.Bucket(bucketDocs)
		if err := docs.DeleteBucket([]byte(doc)); err != nil && !errors.Is(err, berrors.ErrBucketNotFound) {
			return err
		}
		b, err := docs.CreateBucket([]byte(doc))
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
