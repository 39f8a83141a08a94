package doc

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/automerge/automerge-go"
	"github.com/jackc/pgx/v5"

	"github.com/tandemhq/tandem/transport/wire"

	"github.com/tandemhq/tandem/internal/testenv"
)

// postgresURL is the database the PostgreSQL tests use. CI starts
// PostgreSQL; a test that cannot reach it fails rather than skips.
func openPostgres(t testing.TB) *PostgresStore {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := OpenPostgresStore(ctx, testenv.PostgresURL())
	if err != nil {
		t.Fatalf("PostgreSQL at %s: %v", testenv.PostgresURL(), err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// randomDocID returns a fresh valid document id, so tests sharing the
// database never meet.
func randomDocID(t testing.TB) string {
	var u [16]byte
	rand.Read(u[:])
	return wire.NewDocumentID(u)
}

// In a new database, presence's last-seen store may make tandem_last_seen
// before the documents' first migration runs: the migration still runs.
func TestPostgresMigratesAfterLastSeenMadeItsTable(t *testing.T) {
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, testenv.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	var b [6]byte
	rand.Read(b[:])
	name := fmt.Sprintf("tandem_fresh_%x", b)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Exec(context.Background(), "DROP DATABASE "+name+" WITH (FORCE)") })
	u, err := url.Parse(testenv.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	fresh, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	_, err = fresh.Exec(ctx, `CREATE TABLE tandem_last_seen (user_id text PRIMARY KEY, seen_at timestamptz NOT NULL)`)
	fresh.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s, err := OpenPostgresStore(ctx, u.String())
	if err != nil {
		t.Fatalf("migrating a database whose tandem_last_seen exists: %v", err)
	}
	s.Close()
}

func TestPostgresStoreRoundTrip(t *testing.T) {
	ctx := context.Background()
	s := openPostgres(t)
	openPostgres(t) // a second node migrating at the same time is harmless
	id := randomDocID(t)
	if _, err := s.Load(ctx, id); err != ErrNotFound {
		t.Fatalf("unknown document: %v", err)
	}
	d := automerge.New()
	for i := 0; i < 3; i++ {
		d.RootMap().Set("n", fmt.Sprint(i))
		d.Commit("edit")
		if err := s.Write(ctx, []Write{{DocumentID: id, Chunks: [][]byte{d.SaveIncremental()}}}); err != nil {
			t.Fatal(err)
		}
	}
	got := loadDoc(t, s, id)
	if v, _ := got.RootMap().Get("n"); v.Str() != "2" {
		t.Fatalf("loaded n = %v", v)
	}
	sid, err := s.StorageID(ctx)
	if again, _ := openPostgres(t).StorageID(ctx); err != nil || again != sid {
		t.Fatalf("storage id %q then %q (err %v)", sid, again, err)
	}
}

// TestPostgresCompactionKeepsUnseenChanges: node A compacts while node B
// has stored changes A never saw, in the chunks nodes write (incremental:
// their dependencies are in other chunks); B's changes must survive, and
// so must a change A applied after it took its snapshot.
func TestPostgresCompactionKeepsUnseenChanges(t *testing.T) {
	ctx := context.Background()
	s := openPostgres(t)
	id := randomDocID(t)
	a := automerge.New()
	a.RootMap().Set("base", "x")
	a.Commit("base")
	s.Write(ctx, []Write{{DocumentID: id, Chunks: [][]byte{a.SaveIncremental()}}})
	b := loadDoc(t, s, id) // node B loads the document, as a room does
	b.SaveIncremental()    // what it loaded is stored
	for i := range 3 {
		b.RootMap().Set(fmt.Sprint("from-b-", i), "y")
		b.Commit("b")
		s.Write(ctx, []Write{{DocumentID: id, Chunks: [][]byte{b.SaveIncremental()}}}) // B's own edits
	}
	a.RootMap().Set("from-a", "z")
	a.Commit("a")
	r := roomWith(t, a)
	n := r.log.Len()
	w := Write{DocumentID: id, Snapshot: joinChanges(r.log, span(0, n)), Covers: r.coverage(n)}
	// Between A's snapshot and its write, another node's change reaches
	// A's document: it is not in the snapshot, so its chunk must stay.
	late, _ := automerge.Load(b.Save())
	late.SaveIncremental()
	late.RootMap().Set("late", "w")
	late.Commit("late")
	lateChunk := late.SaveIncremental()
	s.Write(ctx, []Write{{DocumentID: id, Chunks: [][]byte{lateChunk}}})
	lateChanges, err := readChanges(nil, late.Save())
	if err != nil {
		t.Fatal(err)
	}
	addInOrder(r, lateChanges)
	if err := s.Write(ctx, []Write{w}); err != nil {
		t.Fatal(err)
	}
	got := loadDoc(t, s, id)
	for _, k := range []string{"base", "from-a", "from-b-0", "from-b-1", "from-b-2", "late"} {
		if v, _ := got.RootMap().Get(k); v.Kind() != automerge.KindStr {
			t.Errorf("%s lost by the compaction", k)
		}
	}
	stored, _ := s.Load(ctx, id)
	if stored.Snapshot == nil || len(stored.Chunks) != 4 {
		t.Errorf("after compaction: snapshot %v, %d chunks; want the snapshot, B's three chunks and the late one", stored.Snapshot != nil, len(stored.Chunks))
	}

	// A compaction by a node that has everything removes every chunk.
	all := roomWith(t, got)
	n = all.log.Len()
	if err := s.Write(ctx, []Write{{DocumentID: id, Snapshot: joinChanges(all.log, span(0, n)), Covers: all.coverage(n)}}); err != nil {
		t.Fatal(err)
	}
	if stored, _ := s.Load(ctx, id); stored.Snapshot == nil || len(stored.Chunks) != 0 {
		t.Errorf("a snapshot holding everything left %d chunks", len(stored.Chunks))
	}
}

// roomWith returns a room whose log holds d's changes.
func roomWith(t testing.TB, d *automerge.Doc) *room {
	t.Helper()
	r := newRoom(testDoc)
	cs, err := readChanges(nil, d.Save())
	if err != nil {
		t.Fatal(err)
	}
	addInOrder(r, cs)
	return r
}

func loadDoc(t testing.TB, s Store, id string) *automerge.Doc {
	t.Helper()
	stored, err := s.Load(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	d := automerge.New()
	if stored.Snapshot != nil {
		if err := d.LoadIncremental(stored.Snapshot); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range stored.Chunks {
		if err := d.LoadIncremental(c); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

func TestPostgresStoreJournals(t *testing.T) {
	testJournals(t, openPostgres(t), randomDocID(t))
}

// A saved document is stored beside the document's changes, replaced by
// the next, and kept through a compaction.
func TestPostgresStoresTheSavedDocument(t *testing.T) {
	ctx := context.Background()
	s := openPostgres(t)
	id := randomDocID(t)
	d := automerge.New()
	d.RootMap().Set("n", "1")
	d.Commit("edit")
	if err := s.Write(ctx, []Write{{DocumentID: id, Chunks: [][]byte{d.SaveIncremental()}}}); err != nil {
		t.Fatal(err)
	}
	for _, saved := range []string{"first", "second"} {
		if err := s.Write(ctx, []Write{{DocumentID: id, Saved: []byte(saved)}}); err != nil {
			t.Fatal(err)
		}
		if got, err := s.Load(ctx, id); err != nil || string(got.Saved) != saved {
			t.Fatalf("loaded saved %q (err %v), want %q", got.Saved, err, saved)
		}
	}
	if err := s.Write(ctx, []Write{{DocumentID: id, Snapshot: d.Save()}}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Load(ctx, id); err != nil || string(got.Saved) != "second" {
		t.Fatalf("after a compaction: saved %q (err %v)", got.Saved, err)
	}
}
