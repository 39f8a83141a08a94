package mention

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/automerge/automerge-go"
	"go.uber.org/goleak"

	"github.com/tandemhq/tandem/doc"
	"github.com/tandemhq/tandem/doc/amcheck"
	"github.com/tandemhq/tandem/doc/store"
	"github.com/tandemhq/tandem/internal/lifecycle"
	"github.com/tandemhq/tandem/internal/testenv"
)

// TestMain runs the tests and fails them if any goroutine outlives them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const testDoc = "2gzyVEWRbEhwBcRvStKvD3gBE5pp"

// fakePeer is a peer of the hub's that keeps what it is sent.
type fakePeer struct {
	id string

	mu    sync.Mutex // guards syncs
	syncs [][]byte
}

func (p *fakePeer) ID() string { return p.id }
func (p *fakePeer) SendSync(_ string, data []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.syncs = append(p.syncs, data)
}
func (p *fakePeer) SendDocUnavailable(string)           {}
func (p *fakePeer) SendEphemeral(string, doc.Ephemeral) {}

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
	return &client{peer: &fakePeer{id: id}, doc: d, state: automerge.NewSyncState(d)}
}

// splice makes one change, splicing s into the text at pos.
func (c *client) splice(t testing.TB, pos int, del int, s string) {
	t.Helper()
	v, err := c.doc.Path("text").Get()
	if err != nil {
		t.Fatal(err)
	}
	if v.Kind() != automerge.KindText {
		if err := c.doc.RootMap().Set("text", automerge.NewText("")); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.doc.Path("text").Text().Splice(pos, del, s); err != nil {
		t.Fatal(err)
	}
	if _, err := c.doc.Commit("type"); err != nil {
		t.Fatal(err)
	}
}

// sync runs the sync loop with the hub until neither side has anything to
// send. What the hub sends waits for the store; each round flushes, and
// Flush returns once what it wrote is released.
func (c *client) sync(t testing.TB, h *doc.Hub, isRequest bool) {
	t.Helper()
	for range 50 {
		progressed := false
		for _, data := range c.peer.takeSyncs() {
			if _, err := c.state.ReceiveMessage(data); err != nil {
				t.Fatal(err)
			}
			progressed = true
		}
		if m, ok := c.state.GenerateMessage(); ok {
			if err := h.Sync(context.Background(), c.peer, doc.SyncMessage{DocumentID: testDoc, Data: m.Bytes(), Request: isRequest}); err != nil {
				t.Fatal(err)
			}
			h.Flush(context.Background()) // a failed write is tried again next round
			progressed = true
		}
		if !progressed {
			return
		}
	}
	t.Fatal("sync did not settle")
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

// newTestHub runs a hub on s (configured as hubCfg, if given) whose
// rooms cfg's tracker observes, and returns both. Both stop with the
// test, the tracker first, as a node stops them.
func newTestHub(t testing.TB, s store.Store, cfg Config, hubCfg ...doc.Config) (*doc.Hub, *Tracker) {
	t.Helper()
	var tr *Tracker
	var hc doc.Config
	if len(hubCfg) > 0 {
		hc = hubCfg[0]
	}
	hc.Store, hc.Logger = s, testenv.QuietLogger()
	hc.Observe = func(r doc.Room) doc.Observer { return tr.Observe(r) } // tr is set before any room is made
	h, err := doc.NewHub(hc)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Documents, cfg.Journals, cfg.Logger = h, s, testenv.QuietLogger()
	if tr, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	hubRan, trackerRan := make(chan error, 1), make(chan error, 1)
	go func() { hubRan <- h.Run(context.Background()) }()
	go func() { trackerRan <- tr.Run(context.Background()) }()
	t.Cleanup(func() {
		tr.Close(context.Background())
		h.Close(context.Background())
		for _, ran := range []chan error{trackerRan, hubRan} {
			if err := <-ran; err != nil && !errors.Is(err, lifecycle.ErrClosed) {
				t.Errorf("Run: %v", err)
			}
		}
	})
	return h, tr
}

// roomOf returns the tracker's room of a document, loading it.
func roomOf(t testing.TB, h *doc.Hub, id string) *room {
	t.Helper()
	obs, err := h.Observer(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return obs.(*room)
}

// readChanges reads change chunks one after another, or a whole document
// automerge saved, as the changes a room's log takes.
func readChanges(t testing.TB, data []byte) []*amcheck.Change {
	t.Helper()
	var out []*amcheck.Change
	for off := 0; off < len(data); {
		c, n, err := amcheck.ParseChange(data[off:], amcheck.Limits{ListOps: true})
		if c.Compressed || (err != nil && len(data) > 8 && (data[8] == 0 || data[8] == 2)) {
			d, err := automerge.Load(data)
			if err != nil {
				t.Fatal(err)
			}
			cs, err := d.Changes()
			if err != nil {
				t.Fatal(err)
			}
			out = out[:0]
			for _, ac := range cs {
				out = append(out, readChanges(t, ac.Save())...)
			}
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, &c)
		off += n
	}
	return out
}
