package lastseen

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/tandemhq/tandem/awareness"
)

// Bolt keeps last-seen times in <data dir>/last-seen.db: one bucket, the
// user id as key, Unix milliseconds (8 bytes, big-endian) as value.
type Bolt struct {
	db        *bolt.DB
	closeOnce sync.Once
	closeErr  error
}

var (
	_ awareness.LastSeenStore   = (*Bolt)(nil)
	_ awareness.LastSeenBatcher = (*Bolt)(nil)
)

var bucketSeen = []byte("last-seen")

// legacyFile is the documents' bbolt file, which held the last-seen
// bucket before presence had a store of its own.
const legacyFile = "tandem.db"

// OpenBolt opens (creating if needed) the store in dir. Open it before the
// documents' store: a new file takes the times the documents' file holds.
func OpenBolt(dir string) (*Bolt, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	path := filepath.Join(dir, "last-seen.db")
	_, statErr := os.Stat(path)
	fresh := errors.Is(statErr, os.ErrNotExist)
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bucketSeen)
		return err
	})
	if err == nil && fresh {
		err = copyLegacy(db, filepath.Join(dir, legacyFile))
	}
	if err != nil {
		db.Close()
		os.Remove(path) // the copy is tried again at the next open
		return nil, fmt.Errorf("init %s: %w", path, err)
	}
	return &Bolt{db: db}, nil
}

// copyLegacy copies the last-seen bucket of the documents' file, if there
// is one, into db.
func copyLegacy(db *bolt.DB, legacy string) error {
	if _, err := os.Stat(legacy); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	old, err := bolt.Open(legacy, 0o600, &bolt.Options{ReadOnly: true, Timeout: 2 * time.Second})
	if err != nil {
		return fmt.Errorf("read the last-seen times of %s: %w", legacy, err)
	}
	defer old.Close()
	return old.View(func(otx *bolt.Tx) error {
		ob := otx.Bucket(bucketSeen)
		if ob == nil {
			return nil
		}
		return db.Update(func(tx *bolt.Tx) error {
			b := tx.Bucket(bucketSeen)
			return ob.ForEach(func(k, v []byte) error { return b.Put(k, v) })
		})
	})
}

// SaveLastSeen records when a user was last seen; an older time than the
// one stored is ignored.
func (s *Bolt) SaveLastSeen(ctx context.Context, userID string, at time.Time) error {
	return s.SaveLastSeenBatch(ctx, map[string]time.Time{userID: at})
}

// SaveLastSeenBatch stores many users' times in one transaction. A user id
// bbolt cannot key (empty, or over 32 KiB) fails it with
// awareness.ErrUnstorable.
func (s *Bolt) SaveLastSeenBatch(_ context.Context, at map[string]time.Time) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSeen)
		for userID, t := range at {
			if v := b.Get([]byte(userID)); len(v) == 8 && int64(binary.BigEndian.Uint64(v)) >= t.UnixMilli() {
				continue
			}
			var v [8]byte
			binary.BigEndian.PutUint64(v[:], uint64(t.UnixMilli()))
			if err := b.Put([]byte(userID), v[:]); err != nil {
				if errors.Is(err, berrors.ErrKeyTooLarge) || errors.Is(err, berrors.ErrKeyRequired) {
					return fmt.Errorf("%w: user id of %d bytes: %w", awareness.ErrUnstorable, len(userID), err)
				}
				return err
			}
		}
		return nil
	})
}

// LastSeen returns when a user was last seen, if ever.
func (s *Bolt) LastSeen(_ context.Context, userID string) (time.Time, bool, error) {
	var at time.Time
	var ok bool
	err := s.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketSeen).Get([]byte(userID)); len(v) == 8 {
			at, ok = time.UnixMilli(int64(binary.BigEndian.Uint64(v))).UTC(), true
		}
		return nil
	})
	return at, ok, err
}

// Close closes the file; safe to call twice.
func (s *Bolt) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.db.Close() })
	return s.closeErr
}
