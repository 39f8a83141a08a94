package doc

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/automerge/automerge-go"

	"github.com/tandemhq/tandem/doc/amcheck"
	"github.com/tandemhq/tandem/doc/amsync"
	"github.com/tandemhq/tandem/doc/guard"
	"github.com/tandemhq/tandem/internal/testenv"
)

func reproMessage(t testing.TB) []byte {
	t.Helper()
	b, err := testenv.ReadFuzzSeed(filepath.Join("testdata", "fuzz", "FuzzReceiveGenerate", "repro-seq-gap-aborts-generate"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// bloomWithoutBits is an acknowledgement whose bloom filter has an entry
// but no bits: automerge divides by zero when it next tests a change
// against it, aborting the process.
func bloomWithoutBits(heads []automerge.ChangeHash) []byte {
	b := appendHeads([]byte{amsync.MessageV1}, heads)
	b = append(b, 0)          // need
	b = append(b, 1, 0)       // one have, no lastSync
	b = append(b, 3, 1, 0, 7) // bloom: 1 entry, 0 bits per entry, 7 probes
	return append(b, 0)       // no changes
}

// TestReproIsRefused: the message that aborted automerge (a change whose
// actor skips a sequence number) is refused before automerge sees it, the
// document stays as it was, and other peers go on syncing.
func TestReproIsRefused(t *testing.T) {
	h := newTestHub(t, openStore(t, t.TempDir()), Config{})
	a := newClient("a")
	a.setText(t, "title", "kept")
	a.sync(t, h, false)
	err := h.Sync(context.Background(), newClient("m").peer, SyncMessage{DocumentID: testDoc, Data: reproMessage(t)})
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("err = %v, want ErrRefused", err)
	}
	b := newClient("b")
	b.sync(t, h, true)
	if got := b.get(t, "title"); got != "kept" {
		t.Fatalf("b sees %q", got)
	}
	a.setText(t, "title", "still editing")
	a.sync(t, h, false)
	b.sync(t, h, false)
	if got := b.get(t, "title"); got != "still editing" {
		t.Fatalf("b sees %q after the refusal", got)
	}
}

// TestBloomFilterThatDividesByZeroIsRefused, from a writer and from a
// read-only peer alike (it carries no changes to strip).
func TestBloomFilterThatDividesByZeroIsRefused(t *testing.T) {
	h := newTestHub(t, openStore(t, t.TempDir()), Config{})
	a := newClient("a")
	a.setText(t, "title", "kept")
	a.sync(t, h, false)
	for _, readOnly := range []bool{false, true} {
		err := h.Sync(context.Background(), newClient("m").peer, SyncMessage{
			DocumentID: testDoc, Data: bloomWithoutBits(a.doc.Heads()), ReadOnly: readOnly})
		if !errors.Is(err, ErrRefused) {
			t.Fatalf("read-only %v: err = %v, want ErrRefused", readOnly, err)
		}
	}
	for _, bad := range [][]byte{
		{0x42, 0, 0, 1, 0, 3, 1, 10, 0, 0},                // no probes
		{0x42, 0, 0, 1, 0, 5, 1, 10, 0xff, 0xff, 0x03, 0}, // 65,535 probes
		{0x42, 0, 0, 1, 0, 4, 1, 0xc8, 0x01, 7, 0},        // 200 bits per entry
	} {
		if _, err := parseSyncMessage(bad); !errors.Is(err, errUnsafe) {
			t.Errorf("%x: err = %v, want unsafe", bad, err)
		}
	}
}

// TestDuplicateSequenceIsRefused: two changes of one actor with the same
// sequence number (automerge would fail on the second, after applying part
// of the message).
func TestDuplicateSequenceIsRefused(t *testing.T) {
	h := newTestHub(t, openStore(t, t.TempDir()), Config{})
	a, twin := newClient("a"), newClient("twin")
	twin.doc.SetActorID(a.doc.ActorID())
	a.setText(t, "title", "a's")
	a.sync(t, h, false)
	twin.setText(t, "title", "twin's")
	cs, err := twin.doc.Changes()
	if err != nil {
		t.Fatal(err)
	}
	err = h.Sync(context.Background(), twin.peer, SyncMessage{DocumentID: testDoc,
		Data: messageWithChanges(twin.doc.Heads(), cs)})
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("err = %v, want ErrRefused", err)
	}
	b := newClient("b")
	b.sync(t, h, true)
	if got := b.get(t, "title"); got != "a's" {
		t.Fatalf("b sees %q", got)
	}
}

// messageWithChanges is a sync message from a peer with these heads that
// carries these changes.
func messageWithChanges(heads []automerge.ChangeHash, cs []*automerge.Change) []byte {
	m := amsync.Message{Heads: make([]amsync.Hash, len(heads))}
	for i := range heads {
		m.Heads[i] = amsync.Hash(heads[i])
	}
	for _, c := range cs {
		m.Changes = append(m.Changes, c.Save())
	}
	return m.Encode()
}

// appendHeads appends heads as a sync message holds them.
func appendHeads(b []byte, hs []automerge.ChangeHash) []byte {
	b = append(b, byte(len(hs)))
	for _, h := range hs {
		b = append(b, h[:]...)
	}
	return b
}

// listChange makes a client append n nulls to a list in one change.
func listChange(t testing.TB, c *client, key string, n int) {
	t.Helper()
	l := automerge.NewList()
	if err := c.doc.RootMap().Set(key, l); err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := l.Append(nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.doc.Commit("list"); err != nil {
		t.Fatal(err)
	}
}

// syncUntilErr runs the sync loop and returns the first error.
func syncUntilErr(t testing.TB, c *client, h *Hub) error {
	t.Helper()
	for range 20 {
		for _, data := range c.peer.takeSyncs() {
			if _, err := c.state.ReceiveMessage(data); err != nil {
				t.Fatal(err)
			}
		}
		m, ok := c.state.GenerateMessage()
		if !ok {
			return nil
		}
		if err := h.Sync(context.Background(), c.peer, SyncMessage{DocumentID: testDoc, Data: m.Bytes()}); err != nil {
			return err
		}
		h.Flush(context.Background())
	}
	t.Fatal("sync did not settle")
	return nil
}

// costOf returns what changes cost against the limits.
func costOf(t testing.TB, cs []*automerge.Change) int64 {
	t.Helper()
	var n int64
	for _, c := range cs {
		p, err := amcheck.ParseSyncChange(c.Save(), amcheck.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		n += guard.Cost(&p)
	}
	return n
}

// TestLimits: a change or a document over its byte limit (operations
// counted in) is refused with the document untouched; below them editing
// goes on.
func TestLimits(t *testing.T) {
	probe := newClient("probe")
	listChange(t, probe, "ok", 90) // 91 ops: the list and its items
	cs, err := probe.doc.Changes()
	if err != nil {
		t.Fatal(err)
	}
	one := costOf(t, cs)
	h := newTestHub(t, openStore(t, t.TempDir()), Config{Limits: guard.Limits{ChangeBytes: one + 5*guard.OpBytes, DocumentBytes: 2*one + 50*guard.OpBytes}})
	a := newClient("a")
	listChange(t, a, "ok", 90)
	if err := syncUntilErr(t, a, h); err != nil {
		t.Fatal(err)
	}

	// The refused messages are sent as a client sends its changes once it
	// knows the server lacks them. (Left to the sync loop, a client skips
	// a change the server's bloom filter falsely says it has, about once
	// in a hundred runs, and the message would not pass the limit.)
	sendAll := func(c *client, since ...automerge.ChangeHash) error {
		cs, err := c.doc.Changes(since...)
		if err != nil {
			t.Fatal(err)
		}
		return h.Sync(context.Background(), c.peer, SyncMessage{DocumentID: testDoc, Data: messageWithChanges(c.doc.Heads(), cs)})
	}
	big := newClient("big")
	listChange(t, big, "big", 100)
	if err := sendAll(big); !errors.Is(err, ErrLimit) {
		t.Fatalf("a change of 101 ops: err = %v, want ErrLimit", err)
	}

	listChange(t, a, "more", 90)
	if err := syncUntilErr(t, a, h); err != nil {
		t.Fatal(err)
	}
	before := a.doc.Heads()
	listChange(t, a, "over", 90) // three lists in all
	if err := sendAll(a, before...); !errors.Is(err, ErrLimit) {
		t.Fatalf("past the document's limit: err = %v, want ErrLimit", err)
	}

	r := newClient("r")
	r.sync(t, h, true)
	keys, err := r.doc.RootMap().Keys()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	if strings.Join(keys, ",") != "more,ok" {
		t.Fatalf("the document holds %v, want the two accepted lists", keys)
	}
}

// FuzzReceiveGenerate drives the room's own sequence (guard, then
// automerge's receive and generate) with arbitrary sync messages against
// a document with history. Whatever the guard lets through must not abort
// automerge: a fault here ends the fuzzing process.
func FuzzReceiveGenerate(f *testing.F) {
	base := automerge.New()
	text := automerge.NewText("")
	base.RootMap().Set("text", text)
	base.Commit("text")
	text.Insert(0, "hello @ana")
	base.Commit("type")
	other, err := base.Fork()
	if err != nil {
		f.Fatal(err)
	}
	other.RootMap().Set("title", "t")
	other.Commit("title")
	base.Merge(other)
	saved := base.Save()

	// Seeds: real exchanges with clients that edit, and the repro.
	c := automerge.New()
	cs := automerge.NewSyncState(c)
	peerDoc, err := base.Fork()
	if err != nil {
		f.Fatal(err)
	}
	ss := automerge.NewSyncState(peerDoc)
	for range 4 {
		if m, ok := cs.GenerateMessage(); ok {
			f.Add(m.Bytes())
			ss.ReceiveMessage(m.Bytes())
		}
		if m, ok := ss.GenerateMessage(); ok {
			cs.ReceiveMessage(m.Bytes())
		}
		c.RootMap().Set("k", "v")
		c.Commit("k")
	}
	f.Add(bloomWithoutBits(base.Heads()))
	f.Add(levelAt(base.Heads()))

	f.Fuzz(func(t *testing.T, msg []byte) {
		d, err := automerge.Load(saved)
		if err != nil {
			t.Fatal(err)
		}
		r := newRoom(testDoc)
		cs, err := readChanges(nil, saved)
		if err != nil {
			t.Fatal(err)
		}
		addInOrder(r, cs)
		var lim guard.Limits
		lim.SetDefaults()
		sm, err := parseSyncMessage(msg)
		if err != nil {
			return
		}
		ad, err := r.guard.Admit(lim, sm.changes, r.known)
		if err != nil {
			return
		}
		// What the guard admits, stock automerge takes: here automerge-go,
		// as every client applies it.
		if err := d.LoadIncremental(joinRaw(ad.Apply)); err != nil {
			return
		}
		d.Save()
		before := r.log.Heads()
		addToLog(r.log, ad.Apply)
		p := amsync.NewState()
		p.Receive(r.log, sm.msg, before)
		p.Generate(r.log, nil, nil, time.Now())
	})
}

// messageWithRawChanges is a sync message from a peer with no heads that
// carries these change chunks as they are.
func messageWithRawChanges(chunks ...[]byte) []byte {
	m := amsync.Message{Changes: chunks}
	return m.Encode()
}

// A change that puts a map key into a text object made earlier would
// abort automerge's core in any client that applies it; the guard
// refuses it: when the text came in an earlier message, and when both
// come in one.
func TestAMapKeyIntoTextIsRefused(t *testing.T) {
	text, err := os.ReadFile("testdata/map-key-into-text/1-text-doc.chunk")
	if err != nil {
		t.Fatal(err)
	}
	bad, err := os.ReadFile("testdata/map-key-into-text/2-map-key-into-text.chunk")
	if err != nil {
		t.Fatal(err)
	}
	h := newTestHub(t, openStore(t, t.TempDir()), Config{})
	p := &fakePeer{id: "p"}
	if err := h.Sync(context.Background(), p, SyncMessage{DocumentID: testDoc, Data: messageWithRawChanges(text)}); err != nil {
		t.Fatal(err)
	}
	before, _ := h.Heads(testDoc)
	err = h.Sync(context.Background(), p, SyncMessage{DocumentID: testDoc, Data: messageWithRawChanges(bad)})
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("err = %v, want ErrRefused", err)
	}
	if after, _ := h.Heads(testDoc); len(after) != len(before) || !bytes.Equal(after[0], before[0]) {
		t.Fatal("the refused change touched the document")
	}

	const other = "3z6nXk1ZJj2Lu7JkH2nF7C8tZ5pH"
	err = h.Sync(context.Background(), &fakePeer{id: "q"}, SyncMessage{DocumentID: other, Data: messageWithRawChanges(text, bad)})
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("both in one message: err = %v, want ErrRefused", err)
	}
	// The node still serves: a well-formed client syncs the first document.
	c := newClient("c")
	c.sync(t, h, true)
	if _, ok := h.Heads(testDoc); !ok {
		t.Fatal("the document is gone")
	}
}

// While one room is busy under its lock (a large message being admitted),
// the hub's eviction passes it by instead of waiting for it with the hub's
// lock held, so every other document stays served.
func TestABusyRoomHoldsUpNoOtherDocument(t *testing.T) {
	h := newTestHub(t, openStore(t, t.TempDir()), Config{})
	busy := roomOf(t, h, testDoc)
	busy.mu.Lock()
	evicted := make(chan struct{})
	go func() {
		h.evictIdle(time.Now().Add(time.Hour)) // every room is long idle by then
		close(evicted)
	}()
	select {
	case <-evicted:
	case <-time.After(10 * time.Second):
		busy.mu.Unlock()
		t.Fatal("eviction waited for the busy room")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := h.acquire(ctx, "4NMNnkMhL8jXrdJ9jamS58PAVdXu"); err != nil {
		busy.mu.Unlock()
		t.Fatalf("another document, while one room was busy: %v", err)
	}
	gone := busy.evicted
	busy.mu.Unlock()
	if gone {
		t.Fatal("the busy room was evicted")
	}
}
