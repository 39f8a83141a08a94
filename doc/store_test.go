package doc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/automerge/automerge-go"

	"github.com/tandemhq/tandem/doc/amsync"
	"github.com/tandemhq/tandem/doc/store"
	"github.com/tandemhq/tandem/internal/testenv"
)

func storedHas(t testing.TB, s store.Store, key, want string) bool {
	t.Helper()
	c := newClient("reader")
	stored, err := s.Load(context.Background(), testDoc)
	if errors.Is(err, store.ErrNotFound) {
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
	if err := s.Write(context.Background(), []store.Write{{DocumentID: testDoc, Chunks: [][]byte{[]byte("garbage")}}}); err != nil {
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
	store.Store
	mu    sync.Mutex
	fails int
}

func (f *failingStore) Write(ctx context.Context, b []store.Write) error {
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
	if err := s.Write(context.Background(), []store.Write{{DocumentID: testDoc, Snapshot: snapshot, Chunks: [][]byte{old.SaveIncremental()}}}); err != nil {
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

// flushedStored flushes the hub and returns what the store holds of the
// test document.
func flushedStored(t *testing.T, h *Hub, s store.Store) store.Stored {
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

// A compaction keeps the changes it has not seen: node A compacts while
// node B has stored changes A never saw, in the chunks nodes write
// (incremental: their dependencies are in other chunks); B's changes must
// survive, and so must a change A applied after it took its snapshot. In
// both stores: PostgreSQL is shared by the nodes of a cluster, and hubs
// may share a bbolt file (tests do).
func TestACompactionKeepsChangesItHasNotSeen(t *testing.T) {
	for name, open := range map[string]func(t *testing.T) store.Store{
		"bolt":     func(t *testing.T) store.Store { return openStore(t, t.TempDir()) },
		"postgres": func(t *testing.T) store.Store { return openPostgres(t) },
	} {
		t.Run(name, func(t *testing.T) { testCompactionKeepsChangesItHasNotSeen(t, open(t)) })
	}
}

func testCompactionKeepsChangesItHasNotSeen(t *testing.T, s store.Store) {
	ctx := context.Background()
	id := testDoc
	a := automerge.New()
	a.RootMap().Set("base", "x")
	a.Commit("base")
	s.Write(ctx, []store.Write{{DocumentID: id, Chunks: [][]byte{a.SaveIncremental()}}})
	b := loadDoc(t, s, id) // node B loads the document, as a room does
	b.SaveIncremental()    // what it loaded is stored
	for i := range 3 {
		b.RootMap().Set(fmt.Sprint("from-b-", i), "y")
		b.Commit("b")
		s.Write(ctx, []store.Write{{DocumentID: id, Chunks: [][]byte{b.SaveIncremental()}}}) // B's own edits
	}
	a.RootMap().Set("from-a", "z")
	a.Commit("a")
	r := roomWith(t, a)
	n := r.log.Len()
	w := store.Write{DocumentID: id, Snapshot: joinChanges(r.log, span(0, n)), Covers: r.coverage(n)}
	// Between A's snapshot and its write, another node's change reaches
	// A's document: it is not in the snapshot, so its chunk must stay.
	late, _ := automerge.Load(b.Save())
	late.SaveIncremental()
	late.RootMap().Set("late", "w")
	late.Commit("late")
	lateChunk := late.SaveIncremental()
	s.Write(ctx, []store.Write{{DocumentID: id, Chunks: [][]byte{lateChunk}}})
	lateChanges, err := readChanges(nil, late.Save())
	if err != nil {
		t.Fatal(err)
	}
	addInOrder(r, lateChanges)
	if err := s.Write(ctx, []store.Write{w}); err != nil {
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
	if err := s.Write(ctx, []store.Write{{DocumentID: id, Snapshot: joinChanges(all.log, span(0, n)), Covers: all.coverage(n)}}); err != nil {
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

func loadDoc(t testing.TB, s store.Store, id string) *automerge.Doc {
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

// openPostgres opens the PostgreSQL store in a schema of the test's own.
// CI starts PostgreSQL; a test that cannot reach it fails rather than
// skips.
func openPostgres(t testing.TB) *store.Postgres {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := store.OpenPostgres(ctx, testenv.PostgresSchema(t))
	if err != nil {
		t.Fatalf("PostgreSQL at %s: %v", testenv.PostgresURL(), err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
