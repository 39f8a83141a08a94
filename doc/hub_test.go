package doc

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/automerge/automerge-go"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tandemhq/tandem/doc/store"
	"github.com/tandemhq/tandem/internal/lifecycle"
	"github.com/tandemhq/tandem/internal/testenv"
)

const testDoc = "2gzyVEWRbEhwBcRvStKvD3gBE5pp"

// fakePeer records what a room sends it.
type fakePeer struct {
	id string

	mu          sync.Mutex // guards the slices
	syncs       [][]byte
	unavailable []string
	ephemerals  []Ephemeral
	told        chan struct{} // poked on each message sent, if set
}

func (p *fakePeer) ID() string { return p.id }
func (p *fakePeer) SendSync(_ string, data []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.syncs = append(p.syncs, data)
	p.poke()
}
func (p *fakePeer) SendDocUnavailable(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.unavailable = append(p.unavailable, id)
	p.poke()
}

// poke wakes a test waiting for what the peer is sent. The caller holds p.mu.
func (p *fakePeer) poke() {
	select {
	case p.told <- struct{}{}:
	default:
	}
}

// unavailableCount returns how many doc-unavailable the peer was sent.
func (p *fakePeer) unavailableCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.unavailable)
}

// waitUnavailable waits for the peer's first doc-unavailable.
func (p *fakePeer) waitUnavailable(t testing.TB) {
	t.Helper()
	p.waitUntil(t, "doc-unavailable", func() bool { return p.unavailableCount() > 0 })
}

// waitUntil waits, up to 10 s, for cond to hold, checking it again each
// time the peer is sent something.
func (p *fakePeer) waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for !cond() {
		select {
		case <-p.told:
		case <-timeout:
			t.Fatalf("no %s within 10 s", what)
		}
	}
}
func (p *fakePeer) SendEphemeral(_ string, e Ephemeral) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ephemerals = append(p.ephemerals, e)
}

// syncsSoFar returns what the peer was sent, leaving it to takeSyncs.
func (p *fakePeer) syncsSoFar() [][]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([][]byte(nil), p.syncs...)
}

func (p *fakePeer) takeSyncs() [][]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.syncs
	p.syncs = nil
	return s
}

// client plays an automerge-repo client: its own document and sync state.
type client struct {
	peer  *fakePeer
	doc   *automerge.Doc
	state *automerge.SyncState
}

func newClient(id string) *client {
	d := automerge.New()
	return &client{peer: &fakePeer{id: id, told: make(chan struct{}, 1)}, doc: d, state: automerge.NewSyncState(d)}
}

func (c *client) setText(t testing.TB, key, value string) {
	t.Helper()
	if err := c.doc.RootMap().Set(key, value); err != nil {
		t.Fatal(err)
	}
	if _, err := c.doc.Commit("edit"); err != nil {
		t.Fatal(err)
	}
}

func (c *client) get(t testing.TB, key string) string {
	t.Helper()
	v, err := c.doc.RootMap().Get(key)
	if err != nil {
		t.Fatal(err)
	}
	if v.Kind() != automerge.KindStr {
		return ""
	}
	return v.Str()
}

// sync runs the sync loop with the hub until neither side has anything to
// send. What the hub sends waits for the store (durable.go); each round
// flushes, and Flush returns once what it wrote is released, so no other
// waiting is needed.
func (c *client) sync(t testing.TB, h *Hub, isRequest bool) {
	t.Helper()
	if refused := c.syncWith(t, h, SyncMessage{Request: isRequest}); refused {
		t.Fatal("changes refused")
	}
}

// syncWith runs the sync loop with the given flags and reports whether the
// hub refused changes (read-only).
func (c *client) syncWith(t testing.TB, h *Hub, opts SyncMessage) (refused bool) {
	t.Helper()
	for i := 0; i < 50; i++ {
		progressed := false
		for _, data := range c.peer.takeSyncs() {
			if _, err := c.state.ReceiveMessage(data); err != nil {
				t.Fatal(err)
			}
			progressed = true
		}
		if m, ok := c.state.GenerateMessage(); ok {
			opts.DocumentID, opts.Data = testDoc, m.Bytes()
			err := h.Sync(context.Background(), c.peer, opts)
			if errors.Is(err, ErrReadOnly) {
				refused = true
			} else if err != nil {
				t.Fatal(err)
			}
			h.Flush(context.Background()) // a failed write is tried again next round
			progressed = true
		}
		if !progressed {
			return refused
		}
	}
	t.Fatal("sync did not settle")
	return refused
}

func newTestHub(t testing.TB, s store.Store, cfg Config) *Hub {
	t.Helper()
	cfg.Store = s
	cfg.Logger = testenv.QuietLogger()
	h, err := NewHub(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- h.Run(context.Background()) }()
	t.Cleanup(func() {
		h.Close(context.Background())
		if err := <-ran; err != nil && !errors.Is(err, lifecycle.ErrClosed) {
			t.Errorf("Run: %v", err)
		}
	})
	return h
}

func openStore(t testing.TB, dir string) *store.Bolt {
	t.Helper()
	s, err := store.OpenBolt(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestCreateThenFind(t *testing.T) {
	h := newTestHub(t, openStore(t, t.TempDir()), Config{})
	a, b := newClient("a"), newClient("b")
	a.setText(t, "title", "hello")
	a.sync(t, h, false)
	b.sync(t, h, true)
	if got := b.get(t, "title"); got != "hello" {
		t.Fatalf("b sees %q, want hello", got)
	}
	if len(b.peer.unavailable) != 0 {
		t.Fatal("b was told the document is unavailable")
	}
}

// A peer that asks for a document again before it answered the whole
// copy it was sent gets no second copy: one that never reads would
// otherwise have the document queued for it once per request. Once it
// answers, it is answered again, and a stock client's sync goes on.
func TestNoSecondWholeDocumentWhileOneIsUnanswered(t *testing.T) {
	ctx := context.Background()
	// wholeCopies counts the messages sent to c that carry changes.
	wholeCopies := func(t *testing.T, c *client) int {
		t.Helper()
		n := 0
		for _, data := range c.peer.syncsSoFar() {
			sm, err := parseSyncMessage(data)
			if err != nil {
				t.Fatal(err)
			}
			if len(sm.changes) > 0 {
				n++
			}
		}
		return n
	}
	ask := func(t *testing.T, h *Hub, c *client, data []byte, request bool) {
		t.Helper()
		if err := h.Sync(ctx, c.peer, SyncMessage{DocumentID: testDoc, Data: data, Request: request}); err != nil {
			t.Fatal(err)
		}
		h.Flush(ctx)
	}

	t.Run("requests", func(t *testing.T) {
		h := newTestHub(t, openStore(t, t.TempDir()), Config{})
		a, b := newClient("a"), newClient("b")
		a.setText(t, "title", "hello")
		a.sync(t, h, false)
		req, _ := b.state.GenerateMessage()
		for range 5 {
			ask(t, h, b, req.Bytes(), true)
		}
		if n := wholeCopies(t, b); n != 1 {
			t.Fatalf("five requests unanswered by the peer got %d copies of the document, want 1", n)
		}
		if n := testutil.ToFloat64(h.repeats); n != 4 {
			t.Errorf("repeats counted %v, want 4", n)
		}
		// b reads its copy and answers; it then syncs as ever.
		b.sync(t, h, false)
		if got := b.get(t, "title"); got != "hello" {
			t.Fatalf("b sees %q", got)
		}
		// A peer that answered and asks again (it lost the document) is
		// sent the document again.
		b.peer.takeSyncs()
		ask(t, h, b, req.Bytes(), true)
		if n := wholeCopies(t, b); n != 1 {
			t.Fatalf("a request after the answer got %d copies, want 1", n)
		}
		a.setText(t, "title", "again")
		a.sync(t, h, false)
		fresh := newClient("b") // b's client starts over, as after a reload
		fresh.peer = b.peer
		fresh.sync(t, h, false)
		if got := fresh.get(t, "title"); got != "again" {
			t.Fatalf("b sees %q after starting over", got)
		}
	})

	t.Run("a waiting requester's sync resets", func(t *testing.T) {
		h := newTestHub(t, openStore(t, t.TempDir()), Config{})
		b := newClient("b")
		b.sync(t, h, true)
		b.peer.waitUnavailable(t)
		a := newClient("a")
		a.setText(t, "title", "late")
		a.sync(t, h, false) // the room sends b the document it waits for
		if n := wholeCopies(t, b); n != 1 {
			t.Fatalf("b was sent %d copies when the document appeared, want 1", n)
		}
		reset, _ := automerge.NewSyncState(automerge.New()).GenerateMessage()
		for range 3 {
			ask(t, h, b, reset.Bytes(), false)
			ask(t, h, b, reset.Bytes(), true)
		}
		if n := wholeCopies(t, b); n != 1 {
			t.Fatalf("resets and requests before an answer got %d copies, want 1", n)
		}
		b.sync(t, h, false)
		if got := b.get(t, "title"); got != "late" {
			t.Fatalf("b sees %q", got)
		}
	})
}

func TestConcurrentEditsConverge(t *testing.T) {
	h := newTestHub(t, openStore(t, t.TempDir()), Config{})
	a, b := newClient("a"), newClient("b")
	a.setText(t, "x", "0")
	a.sync(t, h, false)
	b.sync(t, h, true)
	a.setText(t, "from-a", "1")
	b.setText(t, "from-b", "2")
	a.sync(t, h, false)
	b.sync(t, h, false)
	a.sync(t, h, false)
	for _, c := range []*client{a, b} {
		if c.get(t, "from-a") != "1" || c.get(t, "from-b") != "2" {
			t.Fatalf("%s did not converge", c.peer.id)
		}
	}
}

func TestUnavailableThenCreatedLater(t *testing.T) {
	h := newTestHub(t, openStore(t, t.TempDir()), Config{})
	b := newClient("b")
	b.sync(t, h, true)
	b.peer.waitUnavailable(t)
	a := newClient("a")
	a.setText(t, "title", "late")
	a.sync(t, h, false)
	// The hub pushed the new document to b without b asking again.
	if len(b.peer.syncs) == 0 {
		t.Fatal("b was not sent the document when it appeared")
	}
	b.sync(t, h, false)
	if got := b.get(t, "title"); got != "late" {
		t.Fatalf("b sees %q, want late", got)
	}
}

func TestBadSyncMessageLeavesDocumentIntact(t *testing.T) {
	h := newTestHub(t, openStore(t, t.TempDir()), Config{})
	a := newClient("a")
	a.setText(t, "title", "safe")
	a.sync(t, h, false)
	for _, junk := range [][]byte{{0x42}, {0x00, 0x01}, []byte("not automerge at all")} {
		err := h.Sync(context.Background(), newClient("m").peer, SyncMessage{DocumentID: testDoc, Data: junk})
		if !errors.Is(err, ErrBadSyncMessage) {
			t.Fatalf("junk %x: err = %v, want ErrBadSyncMessage", junk, err)
		}
	}
	b := newClient("b")
	b.sync(t, h, true)
	if got := b.get(t, "title"); got != "safe" {
		t.Fatalf("after junk, b sees %q", got)
	}
}

func TestEphemeralNotEchoed(t *testing.T) {
	h := newTestHub(t, openStore(t, t.TempDir()), Config{})
	a, b, c := newClient("a"), newClient("b"), newClient("c")
	for _, cl := range []*client{a, b, c} {
		cl.sync(t, h, true)
	}
	e := Ephemeral{SenderID: "a", SessionID: "s", Count: 1, Data: []byte{0xa0}}
	if err := h.Ephemeral(context.Background(), a.peer, testDoc, e); err != nil {
		t.Fatal(err)
	}
	if len(a.peer.ephemerals) != 0 {
		t.Error("the sender got its own ephemeral")
	}
	for _, cl := range []*client{b, c} {
		if len(cl.peer.ephemerals) != 1 || cl.peer.ephemerals[0].SenderID != "a" {
			t.Errorf("%s got %+v", cl.peer.id, cl.peer.ephemerals)
		}
	}
}

func TestReplacedPeerLeaveKeepsNewConnection(t *testing.T) {
	h := newTestHub(t, openStore(t, t.TempDir()), Config{})
	old := newClient("a")
	old.sync(t, h, true)
	fresh := newClient("a") // same peer id, new connection
	fresh.sync(t, h, true)
	h.Leave(old.peer, testDoc)
	if s := h.Stats(); s.Peers != 1 {
		t.Fatalf("peers = %d, want the new connection to stay", s.Peers)
	}
	h.Leave(fresh.peer, testDoc)
	if s := h.Stats(); s.Peers != 0 {
		t.Fatalf("peers = %d, want 0", s.Peers)
	}
}

func TestReadOnlyPeerReadsButCannotWrite(t *testing.T) {
	h := newTestHub(t, openStore(t, t.TempDir()), Config{})
	a, reader, b := newClient("a"), newClient("reader"), newClient("b")
	a.setText(t, "title", "v1")
	a.sync(t, h, false)
	if refused := reader.syncWith(t, h, SyncMessage{Request: true, ReadOnly: true}); refused {
		t.Fatal("a read without changes was refused")
	}
	if got := reader.get(t, "title"); got != "v1" {
		t.Fatalf("reader sees %q", got)
	}
	reader.setText(t, "title", "vandalized")
	reader.setText(t, "extra", "x")
	if refused := reader.syncWith(t, h, SyncMessage{ReadOnly: true}); !refused {
		t.Fatal("the reader's changes were not refused")
	}
	b.sync(t, h, true)
	if got := b.get(t, "title"); got != "v1" {
		t.Fatalf("another peer sees %q: a read-only change was applied", got)
	}
	// The reader still receives what writers do.
	a.setText(t, "title", "v2")
	a.sync(t, h, false)
	reader.syncWith(t, h, SyncMessage{ReadOnly: true})
	if v, _ := reader.doc.RootMap().Get("extra"); v.Kind() != automerge.KindStr {
		t.Fatal("the reader lost its own local edit")
	}
	b.sync(t, h, false)
	if got := b.get(t, "title"); got != "v2" {
		t.Fatalf("b sees %q, want v2", got)
	}
}

// sameHeads reports whether two lists of heads are the same.
func sameHeads(a, b []automerge.ChangeHash) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// docHeads returns the heads of the room's log as automerge-go's.
func (r *room) docHeads() []automerge.ChangeHash {
	r.mu.Lock()
	defer r.mu.Unlock()
	hs := r.log.Heads()
	out := make([]automerge.ChangeHash, len(hs))
	for i := range hs {
		out[i] = automerge.ChangeHash(hs[i])
	}
	return out
}
