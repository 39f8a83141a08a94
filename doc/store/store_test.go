package store

import (
	"context"
	"errors"
	"slices"
	"sort"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// A suite is what the tests every Store passes need of one implementation.
type suite struct {
	// open makes a new, empty store for t and returns a function that
	// opens it; called again, after a Close, it opens the same store
	// again, with what it holds.
	open func(t *testing.T) func() Store
	// refused is a document id the store refuses to write, to make a
	// batch fail in its middle.
	refused string
}

// run runs every test of the suite, each on a store of its own.
func (s suite) run(t *testing.T) {
	tests := []struct {
		name string
		test func(t *testing.T, open func() Store, refused string)
	}{
		{"ADocumentLoadsAsItsSnapshotAndItsChunksInOrder", testRoundTrip},
		{"ADocumentNeverWrittenIsNotFound", testNotFound},
		{"ACompactionKeepsWhatItDoesNotCover", testCompaction},
		{"JournalsAreReplacedAndDeletedPerNodeAndListed", testJournals},
		{"TheSavedDocumentIsStoredAndLeftByACompaction", testSaved},
		{"ABatchOfSeveralDocumentsIsStoredWholeOrNotAtAll", testBatch},
		{"CloseIsSafeTwice", testCloseTwice},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.test(t, s.open(t), s.refused) })
	}
}

const doc = "2V1gTqvB7nGGBsZjsvqkHx4HKrQw" // the tests' document

// load returns what s holds of id, failing t on an error.
func load(t *testing.T, s Store, id string) Stored {
	t.Helper()
	st, err := s.Load(context.Background(), id)
	if err != nil {
		t.Fatalf("load %s: %v", id, err)
	}
	return st
}

// write writes one batch, failing t on an error.
func write(t *testing.T, s Store, batch ...Write) {
	t.Helper()
	if err := s.Write(context.Background(), batch); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// chunks returns a Write's chunks from strings.
func chunks(cs ...string) [][]byte {
	out := make([][]byte, len(cs))
	for i, c := range cs {
		out[i] = []byte(c)
	}
	return out
}

// reads returns what st holds as strings: its snapshot ("" if none), then
// its chunks.
func reads(st Stored) (string, []string) {
	out := make([]string, len(st.Chunks))
	for i, c := range st.Chunks {
		out[i] = string(c)
	}
	return string(st.Snapshot), out
}

// closed closes s, failing t on an error.
func closed(t *testing.T, s Store) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
}

func testRoundTrip(t *testing.T, open func() Store, _ string) {
	s := open()
	write(t, s, Write{DocumentID: doc, Chunks: chunks("one")})
	write(t, s, Write{DocumentID: doc, Chunks: chunks("two", "three")})
	if snap, cs := reads(load(t, s, doc)); snap != "" || !slices.Equal(cs, []string{"one", "two", "three"}) {
		t.Fatalf("loaded snapshot %q and chunks %q, want none and one, two, three", snap, cs)
	}
	// A compaction with Covers nil replaces every chunk; the chunks it
	// carries are appended after.
	write(t, s, Write{DocumentID: doc, Snapshot: []byte("one two three"), Chunks: chunks("four")})
	write(t, s, Write{DocumentID: doc, Chunks: chunks("five")})
	check := func(when string) {
		t.Helper()
		if snap, cs := reads(load(t, s, doc)); snap != "one two three" || !slices.Equal(cs, []string{"four", "five"}) {
			t.Fatalf("%s: loaded snapshot %q and chunks %q, want the compaction's and four, five", when, snap, cs)
		}
	}
	check("after a compaction")
	closed(t, s)
	s = open()
	defer s.Close()
	check("opened again")
}

func testCompaction(t *testing.T, open func() Store, _ string) {
	s := open()
	defer s.Close()
	// Chunks of this node's ("a…") and of another's that this node has
	// not seen ("b…"); a compaction of this node covers its own.
	write(t, s, Write{DocumentID: doc, Chunks: chunks("a1", "b1")})
	write(t, s, Write{DocumentID: doc, Chunks: chunks("a2")})
	write(t, s, Write{DocumentID: doc, Chunks: chunks("b2")})
	var asked []string
	covers := func(prefix ...string) func([]byte) bool {
		asked = nil
		return func(chunk []byte) bool {
			asked = append(asked, string(chunk))
			for _, p := range prefix {
				if strings.HasPrefix(string(chunk), p) {
					return true
				}
			}
			return false
		}
	}
	// The chunks a compaction carries are appended after it: Covers is
	// not asked about them.
	write(t, s, Write{DocumentID: doc, Snapshot: []byte("a1 a2"), Chunks: chunks("a3"), Covers: covers("a")})
	if snap, cs := reads(load(t, s, doc)); snap != "a1 a2" || !slices.Equal(cs, []string{"b1", "b2", "a3"}) {
		t.Fatalf("after a compaction covering a's: snapshot %q and chunks %q, want a1 a2 and b1, b2, a3", snap, cs)
	}
	if sort.Strings(asked); !slices.Equal(asked, []string{"a1", "a2", "b1", "b2"}) {
		t.Fatalf("Covers was asked about %q, want every chunk stored before the compaction, once", asked)
	}
	// A compaction by a node that has seen b2 only: the snapshot stored
	// before (another node's, with changes this one lacks) stays, and so
	// does b1; they load with the rest.
	write(t, s, Write{DocumentID: doc, Snapshot: []byte("b2 a3"), Covers: covers("b2", "a3")})
	if sort.Strings(asked); !slices.Equal(asked, []string{"a1 a2", "a3", "b1", "b2"}) {
		t.Fatalf("Covers was asked about %q, want the snapshot and the chunks stored before, once", asked)
	}
	snap, cs := reads(load(t, s, doc))
	if got := slices.Sorted(slices.Values(append(cs, snap))); !slices.Equal(got, []string{"a1 a2", "b1", "b2 a3"}) {
		t.Fatalf("after a compaction covering b2 and a3: snapshot %q and chunks %q, want a1 a2, b1 and b2 a3", snap, cs)
	}
	// A compaction that covers everything leaves its snapshot alone.
	write(t, s, Write{DocumentID: doc, Snapshot: []byte("all"), Covers: covers("")})
	if snap, cs := reads(load(t, s, doc)); snap != "all" || len(cs) != 0 {
		t.Fatalf("after a compaction covering everything: snapshot %q and chunks %q", snap, cs)
	}
}

func testNotFound(t *testing.T, open func() Store, _ string) {
	s := open()
	defer s.Close()
	write(t, s, Write{DocumentID: "another", Chunks: chunks("of another document")})
	if st, err := s.Load(context.Background(), doc); !errors.Is(err, ErrNotFound) {
		t.Fatalf("loading a document never written: %+v, %v; want ErrNotFound", st, err)
	}
}

func testJournals(t *testing.T, open func() Store, _ string) {
	ctx := context.Background()
	s := open()
	defer s.Close()
	journals := func(id string) map[string]string {
		t.Helper()
		out := map[string]string{}
		for n, d := range load(t, s, id).Journals {
			out[n] = string(d)
		}
		return out
	}
	listed := func() []string {
		t.Helper()
		js, err := s.Journals(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, j := range js {
			out = append(out, j.DocumentID+"/"+j.Node+"="+string(j.Data))
		}
		sort.Strings(out)
		return out
	}
	write(t, s, Write{DocumentID: doc, Chunks: chunks("one"), Journals: map[string][]byte{"a": []byte("1"), "b": []byte("2")}})
	write(t, s, Write{DocumentID: "another", Chunks: chunks("of another"), Journals: map[string][]byte{"a": []byte("x")}})
	write(t, s, Write{DocumentID: doc, Journals: map[string][]byte{"a": []byte("3")}})
	write(t, s, Write{DocumentID: doc, Snapshot: []byte("one"), Journals: map[string][]byte{"b": {}}})
	if got := journals(doc); len(got) != 1 || got["a"] != "3" {
		t.Fatalf("journals after replacing a's, deleting b's and a compaction: %v, want a=3", got)
	}
	if got, want := listed(), []string{doc + "/a=3", "another/a=x"}; !slices.Equal(got, want) {
		t.Fatalf("Journals() = %q, want %q", got, want)
	}
	write(t, s, Write{DocumentID: doc, Journals: map[string][]byte{"a": {}}})
	if got := journals(doc); len(got) != 0 {
		t.Fatalf("journals after deleting the last: %v", got)
	}
	if got, want := listed(), []string{"another/a=x"}; !slices.Equal(got, want) {
		t.Fatalf("Journals() after deleting = %q, want %q", got, want)
	}
}

func testSaved(t *testing.T, open func() Store, _ string) {
	s := open()
	write(t, s, Write{DocumentID: doc, Chunks: chunks("one")})
	if saved := load(t, s, doc).Saved; saved != nil {
		t.Fatalf("a document never saved loads saved %q", saved)
	}
	for _, saved := range []string{"first", "second"} {
		write(t, s, Write{DocumentID: doc, Saved: []byte(saved)})
		if got := load(t, s, doc).Saved; string(got) != saved {
			t.Fatalf("loaded saved %q, want %q", got, saved)
		}
	}
	write(t, s, Write{DocumentID: doc, Snapshot: []byte("one"), Chunks: chunks("two")})
	if got := load(t, s, doc).Saved; string(got) != "second" {
		t.Fatalf("after a compaction: saved %q, want second", got)
	}
	closed(t, s)
	s = open()
	defer s.Close()
	if got := load(t, s, doc).Saved; string(got) != "second" {
		t.Fatalf("opened again: saved %q, want second", got)
	}
}

func testBatch(t *testing.T, open func() Store, refused string) {
	ctx := context.Background()
	s := open()
	defer s.Close()
	ids := []string{"first", "second", "third"}
	var batch []Write
	for _, id := range ids {
		batch = append(batch, Write{DocumentID: id, Chunks: chunks("of " + id), Journals: map[string][]byte{"n": []byte(id)}})
	}
	write(t, s, batch...)
	for _, id := range ids {
		st := load(t, s, id)
		if _, cs := reads(st); !slices.Equal(cs, []string{"of " + id}) || string(st.Journals["n"]) != id {
			t.Fatalf("%s loaded chunks %q, journals %q", id, cs, st.Journals)
		}
	}
	// A batch that fails in its middle stores none of it.
	failing := []Write{
		{DocumentID: "first", Chunks: chunks("more"), Journals: map[string][]byte{"n": {}}},
		{DocumentID: "fourth", Chunks: chunks("of fourth")},
		{DocumentID: refused, Chunks: chunks("refused")},
		{DocumentID: "second", Snapshot: []byte("compacted")},
	}
	if err := s.Write(ctx, failing); err == nil {
		t.Fatalf("a batch writing document %q succeeded", refused)
	}
	for _, id := range ids {
		st := load(t, s, id)
		if snap, cs := reads(st); snap != "" || !slices.Equal(cs, []string{"of " + id}) || string(st.Journals["n"]) != id {
			t.Fatalf("after a failed batch %s loads snapshot %q, chunks %q, journals %q: part of it was stored", id, snap, cs, st.Journals)
		}
	}
	if _, err := s.Load(ctx, "fourth"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after a failed batch, the document it made loads (err %v)", err)
	}
}

func testCloseTwice(t *testing.T, open func() Store, _ string) {
	s := open()
	write(t, s, Write{DocumentID: doc, Chunks: chunks("one")})
	for i := range 2 {
		if err := s.Close(); err != nil {
			t.Fatalf("close %d: %v", i+1, err)
		}
	}
}

// TestADownStoreFailsWritesOnlyWhileDown: a Down passes reads through and
// fails writes while it is set down, storing nothing of them.
func TestADownStoreFailsWritesOnlyWhileDown(t *testing.T) {
	s := &Down{Store: openBolt(t, t.TempDir())}
	write(t, s, Write{DocumentID: doc, Chunks: chunks("one")})
	s.SetDown(true)
	if err := s.Write(context.Background(), []Write{{DocumentID: doc, Chunks: chunks("two")}}); err == nil {
		t.Fatal("a write while down succeeded")
	}
	if _, cs := reads(load(t, s, doc)); !slices.Equal(cs, []string{"one"}) {
		t.Fatalf("while down, loaded %q", cs)
	}
	s.SetDown(false)
	write(t, s, Write{DocumentID: doc, Chunks: chunks("three")})
	if _, cs := reads(load(t, s, doc)); strings.Join(cs, " ") != "one three" {
		t.Fatalf("up again, loaded %q", cs)
	}
}
