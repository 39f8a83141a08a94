package lastseen

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/goleak"

	"github.com/tandemhq/tandem/awareness"
	"github.com/tandemhq/tandem/internal/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type store interface {
	awareness.LastSeenStore
	awareness.LastSeenBatcher
	Close() error
}

func openBolt(t *testing.T, dir string) *Bolt {
	t.Helper()
	s, err := OpenBolt(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func openPostgres(t *testing.T) *Postgres {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := OpenPostgres(ctx, testenv.PostgresURL())
	if err != nil {
		t.Fatalf("PostgreSQL at %s: %v", testenv.PostgresURL(), err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// prefix makes user ids no other run of the test has used (PostgreSQL is
// shared).
func prefix(t *testing.T) string {
	var b [6]byte
	rand.Read(b[:])
	return "u" + hex.EncodeToString(b[:])
}

// keepsTheNewest: an unknown user is not found; an older time never
// overwrites a newer one, one at a time or in a batch of 500.
func keepsTheNewest(t *testing.T, s store, p string) {
	ctx := context.Background()
	if _, ok, err := s.LastSeen(ctx, p+"-ana"); ok || err != nil {
		t.Fatalf("unknown user: ok=%v err=%v", ok, err)
	}
	later := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	for _, at := range []time.Time{later, later.Add(-time.Hour)} {
		if err := s.SaveLastSeen(ctx, p+"-ana", at); err != nil {
			t.Fatal(err)
		}
	}
	if got, ok, err := s.LastSeen(ctx, p+"-ana"); err != nil || !ok || !got.Equal(later) {
		t.Fatalf("LastSeen = %v %v %v, want %v", got, ok, err, later)
	}
	at := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	if err := s.SaveLastSeen(ctx, p+"-0", at.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	batch := map[string]time.Time{}
	for i := range 500 {
		batch[fmt.Sprint(p, "-", i)] = at
	}
	if err := s.SaveLastSeenBatch(ctx, batch); err != nil {
		t.Fatal(err)
	}
	for i, want := range map[int]time.Time{0: at.Add(time.Hour), 1: at, 499: at} {
		got, ok, err := s.LastSeen(ctx, fmt.Sprint(p, "-", i))
		if err != nil || !ok || !got.Equal(want) {
			t.Fatalf("user %d: LastSeen = %v %v %v, want %v", i, got, ok, err, want)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
}

func TestBoltKeepsTheNewest(t *testing.T) {
	dir := t.TempDir()
	keepsTheNewest(t, openBolt(t, dir), "b")
	again := openBolt(t, dir)
	if _, ok, _ := again.LastSeen(context.Background(), "b-ana"); !ok {
		t.Fatal("a time was lost across a reopen")
	}
}

func TestPostgresKeepsTheNewest(t *testing.T) {
	openPostgres(t) // a second node starting at the same time is harmless
	keepsTheNewest(t, openPostgres(t), prefix(t))
}

// A data directory from before this package keeps its last-seen times in
// the documents' file: the first open copies them, and a later open does
// not copy again over newer times.
func TestBoltTakesTheTimesOfTheDocumentsFile(t *testing.T) {
	dir := t.TempDir()
	old, err := bolt.Open(filepath.Join(dir, legacyFile), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	then := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	err = old.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketSeen)
		if err != nil {
			return err
		}
		if _, err := tx.CreateBucketIfNotExists([]byte("docs")); err != nil {
			return err
		}
		var v [8]byte
		binary.BigEndian.PutUint64(v[:], uint64(then.UnixMilli()))
		return b.Put([]byte("ana"), v[:])
	})
	old.Close()
	if err != nil {
		t.Fatal(err)
	}
	s := openBolt(t, dir)
	ctx := context.Background()
	if got, ok, err := s.LastSeen(ctx, "ana"); err != nil || !ok || !got.Equal(then) {
		t.Fatalf("after the first open: %v %v %v, want %v", got, ok, err, then)
	}
	later := then.Add(time.Hour)
	if err := s.SaveLastSeen(ctx, "ana", later); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if got, _, _ := openBolt(t, dir).LastSeen(ctx, "ana"); !got.Equal(later) {
		t.Fatalf("after a reopen: %v, want %v", got, later)
	}
}
