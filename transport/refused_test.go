package transport

import (
	"context"
	"strings"
	"testing"

	"github.com/automerge/automerge-go"
	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tandemhq/tandem/doc"
	"github.com/tandemhq/tandem/doc/guard"
	"github.com/tandemhq/tandem/doc/store"
	"github.com/tandemhq/tandem/internal/testenv"
	"github.com/tandemhq/tandem/transport/wire"
)

const otherDoc = "jN3pd9agHvY1zVqDCHrDTE3fDh1"

// docSide is one document as a multiPeer holds it.
type docSide struct {
	doc   *automerge.Doc
	state *automerge.SyncState
}

// multiPeer is a Go automerge peer syncing several documents over one raw
// socket.
type multiPeer struct {
	t    *testing.T
	ws   *websocket.Conn
	srv  *testServer
	peer string
	docs map[string]*docSide
	errs []string
}

func newMultiPeer(t *testing.T, s *testServer, peer string) *multiPeer {
	ws := dial(t, s.url)
	join(t, ws, peer)
	return &multiPeer{t: t, ws: ws, srv: s, peer: peer, docs: map[string]*docSide{}}
}

func (p *multiPeer) side(id string) *docSide {
	d := p.docs[id]
	if d == nil {
		doc := automerge.New()
		d = &docSide{doc: doc, state: automerge.NewSyncState(doc)}
		p.docs[id] = d
	}
	return d
}

func (p *multiPeer) set(id, key, value string) {
	p.t.Helper()
	d := p.side(id).doc
	if err := d.RootMap().Set(key, value); err != nil {
		p.t.Fatal(err)
	}
	if _, err := d.Commit(key); err != nil {
		p.t.Fatal(err)
	}
}

func (p *multiPeer) get(id, key string) string {
	v, err := p.side(id).doc.RootMap().Get(key)
	if err != nil || v.Kind() != automerge.KindStr {
		return ""
	}
	return v.Str()
}

// handle takes one message from the server.
func (p *multiPeer) handle(m *wire.Message) (synced bool) {
	switch m.Type {
	case wire.TypeSync:
		if _, err := p.side(m.DocumentID).state.ReceiveMessage(m.Data); err != nil {
			p.t.Fatal(err)
		}
		return true
	case wire.TypeError:
		p.errs = append(p.errs, m.ErrorMessage)
	}
	return false
}

// fence waits until the server has handled what this peer sent and the
// hub's writes are done, and takes what came meanwhile (syncer.fence).
func (p *multiPeer) fence() (got bool) {
	p.t.Helper()
	send(p.t, p.ws, &wire.Message{Type: wire.TypeHeartbeat, SenderID: p.peer, Seq: 1})
	for {
		m := recv(p.t, p.ws)
		if m.Type == wire.TypeHeartbeatAck {
			break
		}
		got = p.handle(m) || got
	}
	if err := p.srv.hub.Flush(context.Background()); err != nil {
		p.t.Fatal(err)
	}
	send(p.t, p.ws, &wire.Message{Type: wire.TypeJoin, SenderID: p.peer})
	for {
		m := recv(p.t, p.ws)
		if m.Type == wire.TypePeer {
			return got
		}
		got = p.handle(m) || got
	}
}

// sync exchanges messages of one document until neither side has more.
func (p *multiPeer) sync(id, typ string) {
	p.t.Helper()
	for range 50 {
		sent := false
		if m, ok := p.side(id).state.GenerateMessage(); ok {
			send(p.t, p.ws, &wire.Message{Type: typ, SenderID: p.peer, TargetID: serverID, DocumentID: id, Data: m.Bytes()})
			sent = true
		}
		if got := p.fence(); !sent && !got {
			return
		}
		typ = wire.TypeSync
	}
	p.t.Fatal("sync did not settle")
}

// errorsNaming returns the errors the peer got that name the document.
func (p *multiPeer) errorsNaming(id string) []string {
	var out []string
	for _, e := range p.errs {
		if strings.Contains(e, id) {
			out = append(out, e)
		}
	}
	return out
}

// TestRefusedChangeCostsTheDocumentNotTheConnection: a peer syncing two
// documents sends a change over the byte limit to one of them. It is
// told so, in an error naming that document, and its connection stays
// open: the other document goes on syncing both ways, and what it sends
// for the refused one is dropped. The same change on a new connection (a
// stock client's retry) is refused by its hash: the guard does not run
// again.
func TestRefusedChangeCostsTheDocumentNotTheConnection(t *testing.T) {
	s := newTestServerHub(t, Config{}, doc.Config{Store: openTestStore(t), Limits: guard.Limits{ChangeBytes: 2000}})
	a, b := newMultiPeer(t, s, "a"), newMultiPeer(t, s, "b")
	a.set(otherDoc, "title", "b1")
	a.sync(otherDoc, wire.TypeSync)
	b.sync(otherDoc, wire.TypeRequest)
	if got := b.get(otherDoc, "title"); got != "b1" {
		t.Fatalf("b reads %q before the refusal", got)
	}

	big := a.side(testDoc).doc
	list := automerge.NewList()
	if err := big.RootMap().Set("paste", list); err != nil {
		t.Fatal(err)
	}
	for range 150 {
		if err := list.Append("x"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := big.Commit("paste"); err != nil {
		t.Fatal(err)
	}
	over := changesFor(t, big, automerge.New())
	send(t, a.ws, &wire.Message{Type: wire.TypeSync, SenderID: "a", TargetID: serverID, DocumentID: testDoc, Data: over})
	a.fence()
	if errs := a.errorsNaming(testDoc); len(errs) != 1 || !strings.Contains(errs[0], "refused") || !strings.Contains(errs[0], "2000") {
		t.Fatalf("errors naming the document: %q, want one naming the refusal and the limit", errs)
	}
	if n := testutil.ToFloat64(s.metrics.docsRefused.WithLabelValues(errOverLimit)); n != 1 {
		t.Fatalf("documents refused over a limit: %v, want 1", n)
	}

	// The connection is open and the other document syncs both ways.
	a.set(otherDoc, "title", "b2")
	a.sync(otherDoc, wire.TypeSync)
	b.sync(otherDoc, wire.TypeSync)
	if got := b.get(otherDoc, "title"); got != "b2" {
		t.Fatalf("b reads %q after the refusal, want a's edit", got)
	}
	b.set(otherDoc, "title", "b3")
	b.sync(otherDoc, wire.TypeSync)
	a.sync(otherDoc, wire.TypeSync)
	if got := a.get(otherDoc, "title"); got != "b3" {
		t.Fatalf("a reads %q after the refusal, want b's edit", got)
	}

	// What a sends for the refused document on this connection is dropped.
	send(t, a.ws, &wire.Message{Type: wire.TypeSync, SenderID: "a", TargetID: serverID, DocumentID: testDoc, Data: over})
	a.fence()
	if n := testutil.ToFloat64(s.metrics.dropped.WithLabelValues(dropRefusedDocument)); n != 1 {
		t.Fatalf("messages dropped for the refused document: %v, want 1", n)
	}
	if st := s.hub.RefusalStats(); st.ByGuard != 1 || st.ByMemory != 0 {
		t.Fatalf("refusals %+v: the dropped message reached the hub", st)
	}

	// The retry on a new connection is refused by the change's hash.
	again := newMultiPeer(t, s, "a-again")
	send(t, again.ws, &wire.Message{Type: wire.TypeSync, SenderID: "a-again", TargetID: serverID, DocumentID: testDoc, Data: over})
	again.fence()
	if errs := again.errorsNaming(testDoc); len(errs) != 1 || !strings.Contains(errs[0], "refused before") {
		t.Fatalf("the retry got %q, want an error naming the earlier refusal", errs)
	}
	if st := s.hub.RefusalStats(); st.ByGuard != 1 || st.ByMemory != 1 {
		t.Fatalf("refusals %+v: want the retry refused by memory, the guard not run again", st)
	}
	again.set(otherDoc, "seen", "yes")
	again.sync(otherDoc, wire.TypeSync) // its connection is open too

	if n := testutil.ToFloat64(s.metrics.disconnects.WithLabelValues(errOverLimit)); n != 0 {
		t.Fatalf("%v connections closed over the limit", n)
	}
	testenv.WaitFor(t, "both peers still on the other document", func() bool { return s.hub.Stats().Peers == 3 })
}

func openTestStore(t *testing.T) store.Store {
	t.Helper()
	st, err := store.OpenBolt(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() }) // after the hub's Close: registered before it
	return st
}
