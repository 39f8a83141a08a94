package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	bbolt "go.etcd.io/bbolt"
)

// Bolt is the embedded store: one bbolt file under the data directory,
// pure Go, nothing to install. Each document is a bucket of "docs" holding
// its incremental chunks under "c" + an 8-byte sequence number, and a
// bucket of "snapshots" holding its snapshot under "s". The two are apart
// because bbolt rewrites a leaf, large values and all, whenever a key in
// it changes: a snapshot beside the chunks would be written again with
// every chunk. (Files written before keep a snapshot under "s" in the
// document's own bucket; it is read there until a compaction covers it,
// and as well as the other if an earlier version wrote it after this one.)
// A compaction deletes only what its Write.Covers says the snapshot
// holds, as PostgreSQL does: hubs may share the file (tests run two, as
// two nodes). A document's saved form for new readers is in "saved",
// under its id.
type Bolt struct {
	db        *bbolt.DB
	closeOnce sync.Once
	closeErr  error
	// A write lets go of the file's pages it read (dropResident) if the
	// last one that did was dropEvery ago or more: each costs a walk of
	// the whole mapping, and the pages one write reads are few.
	dropEvery time.Duration
	dropped   atomic.Int64 // when a write last let go, Unix ns
}

var _ Store = (*Bolt)(nil)

var (
	bucketDocs = []byte("docs")
	bucketSnap = []byte("snapshots") // a bucket per document
	bucketMeta = []byte("meta")
	bucketJrnl = []byte("mention-journals") // a bucket per document, a key per node
	bucketSave = []byte("saved")            // a key per document
	keySnap    = []byte("s")
	chunkTag   = byte('c')
	keyStorage = []byte("storage-id")
)

// OpenBolt opens (creating if needed) the store in dir.
func OpenBolt(dir string) (*Bolt, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	path := filepath.Join(dir, "tandem.db")
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: 2 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		// Files from before awareness/lastseen also hold a "last-seen"
		// bucket: that package copies it, this one leaves it alone.
		for _, name := range [][]byte{bucketDocs, bucketSnap, bucketMeta, bucketJrnl, bucketSave} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("init %s: %w", path, err)
	}
	return &Bolt{db: db, dropEvery: 100 * time.Millisecond}, nil
}

// Load implements Store.
func (s *Bolt) Load(_ context.Context, documentID string) (Stored, error) {
	var out Stored
	err := s.db.View(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketDocs).Bucket([]byte(documentID))
		if b == nil {
			return ErrNotFound
		}
		// bbolt's memory is only valid inside the transaction: copy out.
		if sb := tx.Bucket(bucketSnap).Bucket([]byte(documentID)); sb != nil {
			out.Snapshot = append([]byte(nil), sb.Get(keySnap)...)
		}
		if v := tx.Bucket(bucketSave).Get([]byte(documentID)); v != nil {
			out.Saved = append([]byte(nil), v...)
		}
		err := b.ForEach(func(k, v []byte) error {
			switch {
			case string(k) == string(keySnap) && out.Snapshot == nil: // an earlier version's place
				out.Snapshot = append([]byte(nil), v...)
			case string(k) == string(keySnap):
				// Both places hold one: an earlier version ran on this
				// file after this one compacted and wrote its own. Each
				// may hold what the other lacks; both are read, the
				// earlier one before the chunks that came after it, and
				// the room takes each change once.
				out.Chunks = append([][]byte{append([]byte(nil), v...)}, out.Chunks...)
			case len(k) == 9 && k[0] == chunkTag:
				out.Chunks = append(out.Chunks, append([]byte(nil), v...))
			}
			return nil
		})
		if j := tx.Bucket(bucketJrnl).Bucket([]byte(documentID)); err == nil && j != nil {
			out.Journals = map[string][]byte{}
			err = j.ForEach(func(node, data []byte) error {
				out.Journals[string(node)] = append([]byte(nil), data...)
				return nil
			})
		}
		dropResident(tx)
		return err
	})
	return out, err
}

// Journals implements Store.
func (s *Bolt) Journals(context.Context) ([]Journal, error) {
	var out []Journal
	err := s.db.View(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketJrnl).ForEachBucket(func(docID []byte) error {
			return tx.Bucket(bucketJrnl).Bucket(docID).ForEach(func(node, data []byte) error {
				out = append(out, Journal{DocumentID: string(docID), Node: string(node), Data: append([]byte(nil), data...)})
				return nil
			})
		})
	})
	return out, err
}

// writeJournals applies a Write's journals.
func writeJournals(tx *bbolt.Tx, w Write) error {
	if len(w.Journals) == 0 {
		return nil
	}
	all := tx.Bucket(bucketJrnl)
	b, err := all.CreateBucketIfNotExists([]byte(w.DocumentID))
	if err != nil {
		return err
	}
	for node, data := range w.Journals {
		if len(data) == 0 {
			err = b.Delete([]byte(node))
		} else {
			err = b.Put([]byte(node), data)
		}
		if err != nil {
			return err
		}
	}
	if k, _ := b.Cursor().First(); k == nil {
		return all.DeleteBucket([]byte(w.DocumentID))
	}
	return nil
}

// Write implements Store: the whole batch is one transaction and one fsync.
func (s *Bolt) Write(_ context.Context, batch []Write) error {
	if len(batch) == 0 {
		return nil
	}
	defer s.dropAfterWrite()
	return s.db.Update(func(tx *bbolt.Tx) error {
		docs, snaps := tx.Bucket(bucketDocs), tx.Bucket(bucketSnap)
		for _, w := range batch {
			key := []byte(w.DocumentID)
			b, err := docs.CreateBucketIfNotExists(key)
			if err != nil {
				return err
			}
			if w.Snapshot != nil {
				if err := compact(b, snaps, w); err != nil {
					return err
				}
			}
			if err := appendChunks(b, w.Chunks); err != nil {
				return err
			}
			if err := writeJournals(tx, w); err != nil {
				return err
			}
			if w.Saved != nil {
				if err := tx.Bucket(bucketSave).Put(key, w.Saved); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// dropAfterWrite lets go of the file's pages a write read, at most once
// every dropEvery.
func (s *Bolt) dropAfterWrite() {
	now, last := time.Now().UnixNano(), s.dropped.Load()
	if now-last < int64(s.dropEvery) || !s.dropped.CompareAndSwap(last, now) {
		return
	}
	s.db.View(func(tx *bbolt.Tx) error {
		dropResident(tx)
		return nil
	})
}

// compact writes w's snapshot in place of the document's and deletes what
// it covers: each stored chunk, and the snapshot it replaces, for which
// w.Covers reports true (all of them if Covers is nil). A chunk it does
// not cover stays where it is; a snapshot it does not cover becomes a
// chunk after the others. b is the document's bucket of chunks.
func compact(b, snaps *bbolt.Bucket, w Write) error {
	covers := w.Covers
	if covers == nil {
		covers = func([]byte) bool { return true }
	}
	key := []byte(w.DocumentID)
	var kept []byte // the snapshot replaced, if not covered
	sb := snaps.Bucket(key)
	if sb == nil {
		var err error
		if sb, err = snaps.CreateBucket(key); err != nil {
			return err
		}
	} else if old := sb.Get(keySnap); old != nil && !covers(old) {
		kept = append([]byte(nil), old...)
	}
	if err := sb.Put(keySnap, w.Snapshot); err != nil {
		return err
	}
	var covered [][]byte // keys: a bucket is not changed while it is walked
	err := b.ForEach(func(k, v []byte) error {
		chunk := string(k) == string(keySnap) || (len(k) == 9 && k[0] == chunkTag) // the earlier place's snapshot is a chunk now
		if chunk && covers(v) {
			covered = append(covered, append([]byte(nil), k...))
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, k := range covered {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	if kept != nil {
		return appendChunks(b, [][]byte{kept})
	}
	return nil
}

// appendChunks appends chunks to the document's bucket b, each under the
// bucket's next sequence number.
func appendChunks(b *bbolt.Bucket, chunks [][]byte) error {
	for _, c := range chunks {
		seq, err := b.NextSequence()
		if err != nil {
			return err
		}
		var k [9]byte
		k[0] = chunkTag
		binary.BigEndian.PutUint64(k[1:], seq)
		if err := b.Put(k[:], c); err != nil {
			return err
		}
	}
	return nil
}

// StorageID returns this store's stable identity, made on first use. The
// server announces it as its storageId in the peer handshake.
func (s *Bolt) StorageID() (string, error) {
	var id string
	err := s.db.Update(func(tx *bbolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if v := meta.Get(keyStorage); v != nil {
			id = string(v)
			return nil
		}
		id = newUUID()
		return meta.Put(keyStorage, []byte(id))
	})
	return id, err
}

// Close implements Store.
func (s *Bolt) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.db.Close() })
	return s.closeErr
}
