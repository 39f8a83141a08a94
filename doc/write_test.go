package doc

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/automerge/automerge-go"

	"github.com/tandemhq/tandem/doc/amcheck/amtest"
	"github.com/tandemhq/tandem/doc/amsync"
	"github.com/tandemhq/tandem/doc/store"
)

// restPeer is a server-side peer, as the REST API makes one per write.
type restPeer struct{ id string }

func (p restPeer) ID() string                    { return p.id }
func (restPeer) SendSync(string, []byte)         {}
func (restPeer) SendDocUnavailable(string)       {}
func (restPeer) SendEphemeral(string, Ephemeral) {}

// changesSince returns d's changes since heads, as chunks one after
// another.
func changesSince(t testing.TB, d *automerge.Doc, heads ...automerge.ChangeHash) []byte {
	t.Helper()
	cs, err := d.Changes(heads...)
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	for _, c := range cs {
		out = append(out, c.Save()...)
	}
	return out
}

func hashesOf(hs []automerge.ChangeHash) []amsync.Hash {
	out := make([]amsync.Hash, len(hs))
	for i, h := range hs {
		out[i] = amsync.Hash(h)
	}
	slices.SortFunc(out, func(a, b amsync.Hash) int { return bytes.Compare(a[:], b[:]) })
	return out
}

// A backend's change written outside any socket reaches the document's
// peers as a peer's change does, and the store holds it before Write
// returns: while the store fails, Write fails too.
func TestAWrittenChangeIsStoredThenReachesThePeers(t *testing.T) {
	s := &store.Down{Store: openStore(t, t.TempDir())}
	h := newTestHub(t, s, Config{})
	a := newClient("a")
	a.setText(t, "title", "one")
	a.sync(t, h, false)

	backend, err := automerge.Load(a.doc.Save())
	if err != nil {
		t.Fatal(err)
	}
	before := backend.Heads()
	if err := backend.RootMap().Set("from", "backend"); err != nil {
		t.Fatal(err)
	}
	if _, err := backend.Commit("rest"); err != nil {
		t.Fatal(err)
	}
	change := changesSince(t, backend, before...)

	s.SetDown(true)
	if _, err := h.Write(context.Background(), restPeer{"rest-1"}, testDoc, change); err == nil {
		t.Fatal("Write returned while the store could not hold the change")
	}
	s.SetDown(false)
	got, err := h.Write(context.Background(), restPeer{"rest-2"}, testDoc, change)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, hashesOf(backend.Heads())) {
		t.Fatalf("Write returned %x, want the change's hash", got)
	}
	stored, err := s.Load(context.Background(), testDoc)
	if err != nil {
		t.Fatal(err)
	}
	all := slices.Concat(append([][]byte{stored.Snapshot}, stored.Chunks...)...)
	if !bytes.Contains(all, change) {
		t.Fatal("the store does not hold the written change")
	}
	a.sync(t, h, false)
	if v := a.get(t, "from"); v != "backend" {
		t.Fatalf("the peer sees from=%q, want backend", v)
	}
	if n := h.Stats().Peers; n != 1 {
		t.Fatalf("%d peers in the document after the writes, want the one client", n)
	}
}

// A change that depends on a change the document lacks is not applied,
// and its peer leaves no change waiting behind it.
func TestAWrittenChangeWithoutItsDependenciesIsNotApplied(t *testing.T) {
	h := newTestHub(t, openStore(t, t.TempDir()), Config{})
	a := newClient("a")
	a.setText(t, "title", "one")
	a.sync(t, h, false)
	other := automerge.New()
	other.RootMap().Set("x", "1")
	other.Commit("first")
	first := other.Heads()
	other.RootMap().Set("x", "2")
	other.Commit("second")
	_, err := h.Write(context.Background(), restPeer{"rest"}, testDoc, changesSince(t, other, first...))
	if !errors.Is(err, ErrMissingDependencies) {
		t.Fatalf("Write: %v, want ErrMissingDependencies", err)
	}
	r, err := h.Read(context.Background(), testDoc, ReadQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.Heads, hashesOf(a.doc.Heads())) {
		t.Fatal("the document changed")
	}
}

// Bytes that are not change chunks, and changes the guard refuses, are
// refused before anything applies.
func TestWrittenBytesAreCheckedAsAPeersChanges(t *testing.T) {
	h := newTestHub(t, openStore(t, t.TempDir()), Config{})
	a := newClient("a")
	a.setText(t, "title", "one")
	a.sync(t, h, false)
	if _, err := h.Write(context.Background(), restPeer{"r1"}, testDoc, a.doc.Save()); !errors.Is(err, ErrNotChanges) {
		t.Fatalf("a saved document: %v, want ErrNotChanges", err)
	}
	if _, err := h.Write(context.Background(), restPeer{"r2"}, testDoc, []byte("hello")); !errors.Is(err, ErrNotChanges) {
		t.Fatalf("garbage: %v, want ErrNotChanges", err)
	}
	// A change chunk that reads but fails the checksum.
	c := changesSince(t, a.doc)
	c[len(c)-1] ^= 1
	if _, err := h.Write(context.Background(), restPeer{"r3"}, testDoc, c); !errors.Is(err, ErrNotChanges) {
		t.Fatalf("a bad checksum: %v, want ErrNotChanges", err)
	}
}

// A read returns the document's changes whole, up to given heads, or
// since them; heads the document lacks are refused, and a document with
// no changes is not found.
func TestReadReturnsTheChangesAtAndSinceHeads(t *testing.T) {
	h := newTestHub(t, openStore(t, t.TempDir()), Config{})
	a := newClient("a")
	a.setText(t, "title", "one")
	a.sync(t, h, false)
	mid := a.doc.Heads()
	a.setText(t, "title", "two")
	a.sync(t, h, false)
	ctx := context.Background()
	whole, err := h.Read(ctx, testDoc, ReadQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(whole.Changes, changesSince(t, a.doc)) || !slices.Equal(whole.Heads, hashesOf(a.doc.Heads())) {
		t.Fatal("the whole read differs from the client's changes")
	}
	at, err := h.Read(ctx, testDoc, ReadQuery{At: hashesOf(mid)})
	if err != nil {
		t.Fatal(err)
	}
	if old, _ := a.doc.Changes(); !bytes.Equal(at.Changes, old[0].Save()) || !slices.Equal(at.Heads, hashesOf(mid)) {
		t.Fatal("the read at the first heads is not the first change")
	}
	since, err := h.Read(ctx, testDoc, ReadQuery{Since: hashesOf(mid)})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(since.Changes, changesSince(t, a.doc, mid...)) {
		t.Fatal("the read since the first heads is not the second change")
	}
	if _, err := h.Read(ctx, testDoc, ReadQuery{At: []amsync.Hash{{1}}}); !errors.Is(err, ErrUnknownHeads) {
		t.Fatalf("unknown heads: %v", err)
	}
	if _, err := h.Read(ctx, "3dSosgLrC7K4nW7pzgEjHLELWcUF", ReadQuery{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a document nobody made: %v", err)
	}
}

// Changes written in one line, more than a sync message may name as
// heads beyond the document's, are written: their message names only
// the last as its head.
func TestALongLineOfChangesIsWrittenAtOnce(t *testing.T) {
	h := newTestHub(t, openStore(t, t.TempDir()), Config{})
	all := amtest.Typing(12_000)
	hashes, err := h.Write(context.Background(), restPeer{"rest-1"}, testDoc, bytes.Join(all, nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(hashes) != len(all) {
		t.Fatalf("%d changes written, want %d", len(hashes), len(all))
	}
}
