package web

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/automerge/automerge-go"
	"github.com/go-chi/chi/v5"
	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tandemhq/tandem/doc"
	"github.com/tandemhq/tandem/doc/amcheck/amtest"
	"github.com/tandemhq/tandem/doc/amsync"
	"github.com/tandemhq/tandem/doc/store"
	"github.com/tandemhq/tandem/internal/auth"
	"github.com/tandemhq/tandem/internal/lifecycle"
	"github.com/tandemhq/tandem/internal/testenv"
	"github.com/tandemhq/tandem/transport/wire"
)

const restDoc = "2gzyVEWRbEhwBcRvStKvD3gBE5pp"

var restSecret = []byte("0123456789abcdef0123456789abcdef")

// newDocsServer serves the document API over a real hub and store; with
// auth, requests need a token (restToken).
func newDocsServer(t *testing.T, withAuth bool, limits DocumentLimits) (*httptest.Server, *doc.Hub) {
	t.Helper()
	s, err := store.OpenBolt(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	h, err := doc.NewHub(doc.Config{Store: s, Logger: testenv.QuietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- h.Run(context.Background()) }()
	cfg := Config{WebSocket: http.NotFoundHandler(), Documents: h, DocumentLimits: limits, Logger: testenv.QuietLogger()}
	if withAuth {
		v, err := auth.NewVerifier(auth.Config{Secret: restSecret})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Auth = v
	}
	srv := httptest.NewServer(NewRouter(cfg))
	t.Cleanup(func() {
		srv.Close()
		h.Close(context.Background())
		if err := <-ran; err != nil && !errors.Is(err, lifecycle.ErrClosed) {
			t.Errorf("Run: %v", err)
		}
	})
	return srv, h
}

func restToken(t *testing.T, docs map[string]string) string {
	t.Helper()
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "ana", "name": "Ana", "docs": docs, "exp": time.Now().Add(time.Hour).Unix()}).SignedString(restSecret)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// call makes a request and returns the status, the body and the response.
func call(t *testing.T, method, u, token, ctype string, body []byte) (int, []byte, *http.Response) {
	t.Helper()
	req, err := http.NewRequest(method, u, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b, resp
}

func allChanges(t *testing.T, d *automerge.Doc, since ...automerge.ChangeHash) []byte {
	t.Helper()
	cs, err := d.Changes(since...)
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	for _, c := range cs {
		out = append(out, c.Save()...)
	}
	return out
}

type docAnswer struct {
	DocumentID string         `json:"documentId"`
	Heads      []string       `json:"heads"`
	Doc        map[string]any `json:"doc"`
}

// A backend writes a document's changes made with its own automerge and
// reads the document back: as JSON (now and at earlier heads), as its
// changes (all, and since heads) and saved, which automerge loads.
func TestABackendWritesAndReadsADocument(t *testing.T) {
	srv, _ := newDocsServer(t, false, DocumentLimits{})
	base := srv.URL + "/api/docs/" + restDoc
	if code, _, _ := call(t, "GET", base, "", "", nil); code != http.StatusNotFound {
		t.Fatalf("GET of a document nobody made: %d, want 404", code)
	}
	d := automerge.New()
	d.RootMap().Set("title", "first")
	d.Commit("one")
	first := d.Heads()
	d.RootMap().Set("title", "second")
	d.RootMap().Set("n", 3)
	d.Commit("two")
	code, body, _ := call(t, "POST", base+"/changes", "", "application/octet-stream", allChanges(t, d))
	if code != http.StatusOK {
		t.Fatalf("POST changes: %d %s", code, body)
	}
	var got docAnswer
	code, body, _ = call(t, "GET", base, "", "", nil)
	if err := json.Unmarshal(body, &got); code != http.StatusOK || err != nil {
		t.Fatalf("GET: %d %s", code, body)
	}
	if got.Doc["title"] != "second" || got.Doc["n"] != float64(3) || len(got.Heads) != 1 || got.Heads[0] != d.Heads()[0].String() {
		t.Fatalf("GET: %s", body)
	}
	got = docAnswer{}
	code, body, _ = call(t, "GET", base+"?heads="+first[0].String(), "", "", nil)
	if err := json.Unmarshal(body, &got); code != http.StatusOK || err != nil || got.Doc["title"] != "first" || got.Doc["n"] != nil {
		t.Fatalf("GET at the first heads: %d %s", code, body)
	}
	code, body, resp := call(t, "GET", base+"/changes?since="+first[0].String(), "", "", nil)
	if code != http.StatusOK || !bytes.Equal(body, allChanges(t, d, first...)) || resp.Header.Get(HeadsHeader) != d.Heads()[0].String() {
		t.Fatalf("GET changes since the first heads: %d, %d bytes", code, len(body))
	}
	code, body, _ = call(t, "GET", base+"/saved", "", "", nil)
	if code != http.StatusOK {
		t.Fatalf("GET saved: %d %s", code, body)
	}
	loaded, err := automerge.Load(body)
	if err != nil {
		t.Fatalf("automerge does not load the saved document: %v", err)
	}
	if h := loaded.Heads(); len(h) != 1 || h[0] != d.Heads()[0] {
		t.Fatal("the saved document has other heads")
	}
}

// What GET answers is what stock automerge's toJS shows, for random
// editing sessions written through the API, whole and at earlier heads.
func TestGetShowsWhatToJSShows(t *testing.T) {
	o := amtest.StockAutomerge(t)
	srv, _ := newDocsServer(t, false, DocumentLimits{})
	for k := range 3 {
		id := wire.NewDocumentID([16]byte{byte(k + 1)})
		changes := o.Trace(t, 100+k, 60)
		base := srv.URL + "/api/docs/" + id
		if code, body, _ := call(t, "POST", base+"/changes", "", "", bytes.Join(changes, nil)); code != http.StatusOK {
			t.Fatalf("POST: %d %s", code, body)
		}
		for _, n := range []int{len(changes) / 2, len(changes)} {
			heads := headsHex(t, changes[:n])
			code, body, _ := call(t, "GET", base+"?heads="+strings.Join(heads, ","), "", "", nil)
			var got docAnswer
			if err := json.Unmarshal(body, &got); code != http.StatusOK || err != nil {
				t.Fatalf("GET: %d %s", code, body)
			}
			var want map[string]any
			if err := json.Unmarshal(o.View(t, changes, heads), &want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Doc, want) {
				t.Errorf("%s at %d changes:\n got %v\nwant %v", id, n, got.Doc, want)
			}
		}
	}
}

// headsHex returns the heads of changes (each after its dependencies),
// as automerge names them.
func headsHex(t *testing.T, changes [][]byte) []string {
	t.Helper()
	d := automerge.New()
	ch, err := automerge.LoadChanges(bytes.Join(changes, nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Apply(ch...); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, h := range d.Heads() {
		out = append(out, h.String())
	}
	return out
}

// The token decides as on the WebSocket: a document outside it does not
// exist, a read grant reads and cannot write, a write grant does both.
func TestTheTokenDecidesWhatADocumentRequestMay(t *testing.T) {
	srv, _ := newDocsServer(t, true, DocumentLimits{})
	base := srv.URL + "/api/docs/" + restDoc
	d := automerge.New()
	d.RootMap().Set("title", "x")
	d.Commit("one")
	change := allChanges(t, d)
	writer := restToken(t, map[string]string{restDoc: "write"})
	reader := restToken(t, map[string]string{restDoc: "read"})
	other := restToken(t, map[string]string{wire.NewDocumentID([16]byte{9}): "write"})
	if code, _, _ := call(t, "POST", base+"/changes", "", "", change); code != http.StatusUnauthorized {
		t.Fatalf("no token: %d, want 401", code)
	}
	if code, _, _ := call(t, "POST", base+"/changes", other, "", change); code != http.StatusNotFound {
		t.Fatalf("a token without the document: %d, want 404", code)
	}
	if code, _, _ := call(t, "POST", base+"/changes", reader, "", change); code != http.StatusForbidden {
		t.Fatalf("a read token writing: %d, want 403", code)
	}
	if code, body, _ := call(t, "POST", base+"/changes", writer, "", change); code != http.StatusOK {
		t.Fatalf("a write token writing: %d %s", code, body)
	}
	for _, path := range []string{"", "/changes", "/saved"} {
		if code, _, _ := call(t, "GET", base+path, reader, "", nil); code != http.StatusOK {
			t.Errorf("GET %s with a read token: %d", path, code)
		}
		if code, _, _ := call(t, "GET", base+path, other, "", nil); code != http.StatusNotFound {
			t.Errorf("GET %s with a token without the document: %d, want 404", path, code)
		}
	}
}

// Each input is bounded before it costs: a body over its limit, a list
// of heads over its limit, bytes that are no changes, changes whose
// dependencies the document lacks.
func TestDocumentRequestsAreBounded(t *testing.T) {
	srv, _ := newDocsServer(t, false, DocumentLimits{ChangesBody: 1 << 10})
	base := srv.URL + "/api/docs/" + restDoc
	d := automerge.New()
	d.RootMap().Set("title", "x")
	d.Commit("one")
	if code, body, _ := call(t, "POST", base+"/changes", "", "", allChanges(t, d)); code != http.StatusOK {
		t.Fatalf("POST: %d %s", code, body)
	}
	big := automerge.New()
	big.RootMap().Set("title", strings.Repeat("x", 4<<10))
	big.Commit("big")
	many := strings.TrimSuffix(strings.Repeat(strings.Repeat("ab", 32)+",", 257), ",")
	later := automerge.New()
	later.RootMap().Set("a", 1)
	later.Commit("a")
	at := later.Heads()
	later.RootMap().Set("a", 2)
	later.Commit("b")
	tests := []struct {
		method, path string
		body         []byte
		status       int
		want         string
	}{
		{"POST", "/changes", allChanges(t, big), 413, "over 1024 bytes"},
		{"POST", "/changes", []byte("not changes"), 400, "not automerge change chunks"},
		{"POST", "/changes", allChanges(t, later, at...), 409, "depend on changes"},
		{"GET", "?heads=" + many, nil, 400, "at most 256"},
		{"GET", "?heads=xyz", nil, 400, "not a change hash"},
		{"GET", "?heads=" + hex.EncodeToString(make([]byte, 32)), nil, 400, "no change of these heads"},
		{"GET", "/changes?since=" + many, nil, 400, "at most 256"},
	}
	for _, tt := range tests {
		code, body, _ := call(t, tt.method, base+tt.path, "", "", tt.body)
		if code != tt.status || !strings.Contains(string(body), tt.want) {
			t.Errorf("%s %s: %d %s; want %d with %q", tt.method, tt.path, code, body, tt.status, tt.want)
		}
	}
	if code, _, _ := call(t, "GET", srv.URL+"/api/docs/not-a-document", "", "", nil); code != http.StatusBadRequest {
		t.Errorf("an invalid id: %d, want 400", code)
	}
}

// blockingDocuments is a document store of the documents in sizes whose
// reads wait for release (but for those in quick), counting how many are
// in at once.
type blockingDocuments struct {
	sizes   map[string]doc.Size
	quick   map[string]bool
	in      chan string // a read entered
	release chan struct{}
	now     atomic.Int32
	most    atomic.Int32
}

func (b *blockingDocuments) Size(_ context.Context, id string) (doc.Size, error) {
	return b.sizes[id], nil
}

func (b *blockingDocuments) Read(ctx context.Context, id string, q doc.ReadQuery) (doc.Read, error) {
	n := b.now.Add(1)
	defer b.now.Add(-1)
	for m := b.most.Load(); n > m && !b.most.CompareAndSwap(m, n); m = b.most.Load() {
	}
	b.in <- id
	if !b.quick[id] {
		<-b.release
	}
	return doc.Read{}, doc.ErrNotFound
}

func (b *blockingDocuments) Apply(context.Context, doc.Peer, string, []byte) ([]amsync.Hash, error) {
	return nil, errors.New("read only")
}

func (b *blockingDocuments) Flush(context.Context) error { return nil }

// gatedDocsAPI serves GET /api/docs/{id} over docs with a read budget of
// readBytes.
func gatedDocsAPI(t *testing.T, docs Documents, readBytes int64) (*docsAPI, func(id string) <-chan int) {
	a := newDocsAPI(docs, DocumentLimits{ReadBytes: readBytes}, newMetrics(nil), testenv.QuietLogger())
	r := chi.NewRouter()
	r.Get("/api/docs/{documentID}", a.get)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	get := func(id string) <-chan int {
		code := make(chan int, 1)
		go func() {
			resp, err := http.Get(srv.URL + "/api/docs/" + id)
			if err != nil {
				code <- 0
				return
			}
			resp.Body.Close()
			code <- resp.StatusCode
		}()
		return code
	}
	return a, get
}

var (
	bigDoc   = wire.NewDocumentID([16]byte{9})
	smallDoc = restDoc
)

// A whole-document read waits until what it will hold fits the budget:
// two that do not fit together go one after the other.
func TestWholeDocumentReadsWaitForTheirCharge(t *testing.T) {
	const budget = 64 << 20
	docs := &blockingDocuments{
		// Each costs a little under a quarter, the most one may.
		sizes:   map[string]doc.Size{bigDoc: {Ops: budget / 4 / ReadBytesPerOp * 8 / 10}},
		in:      make(chan string),
		release: make(chan struct{}),
	}
	a, get := gatedDocsAPI(t, docs, budget)
	var codes []<-chan int
	for range 4 {
		codes = append(codes, get(bigDoc))
	}
	// Large reads hold at most three quarters together: three are in,
	// the fourth waits.
	for range 3 {
		<-docs.in
	}
	testenv.WaitFor(t, "the fourth read waiting for its charge", func() bool { return a.budget.waiting() == 1 })
	docs.release <- struct{}{} // one ends; the fourth goes in
	<-docs.in
	for range 3 {
		docs.release <- struct{}{}
	}
	for _, c := range codes {
		if c := <-c; c != http.StatusNotFound {
			t.Fatalf("a read answered %d, want the store's 404", c)
		}
	}
	if m := docs.most.Load(); m != 3 {
		t.Fatalf("%d large reads at once, want 3", m)
	}
	if testutil.ToFloat64(a.m.readWaits) != 1 || testutil.ToFloat64(a.m.readCharged) != 0 {
		t.Fatalf("waits %v, charged %v; want 1 and 0", testutil.ToFloat64(a.m.readWaits), testutil.ToFloat64(a.m.readCharged))
	}
}

// Reads of the largest documents a request may work on never keep a
// small document's read waiting: it goes in while they hold what they
// may and another waits.
func TestASmallReadIsNotKeptWaitingByLargeOnes(t *testing.T) {
	const budget = 64 << 20
	docs := &blockingDocuments{
		sizes: map[string]doc.Size{
			bigDoc:   {Ops: budget / 4 / ReadBytesPerOp * 8 / 10},
			smallDoc: {Ops: 1000, Bytes: 10 << 10},
		},
		quick:   map[string]bool{smallDoc: true},
		in:      make(chan string),
		release: make(chan struct{}),
	}
	a, get := gatedDocsAPI(t, docs, budget)
	var big []<-chan int
	for range 5 {
		big = append(big, get(bigDoc))
	}
	for range 3 {
		<-docs.in
	}
	testenv.WaitFor(t, "two large reads waiting", func() bool { return a.budget.waiting() == 2 })
	small := get(smallDoc)
	if id := <-docs.in; id != smallDoc {
		t.Fatalf("%s went in, want the small document's read", id)
	}
	if c := <-small; c != http.StatusNotFound {
		t.Fatalf("the small read answered %d", c)
	}
	for range 2 {
		docs.release <- struct{}{}
	}
	for range 2 {
		<-docs.in
	}
	for range 3 {
		docs.release <- struct{}{}
	}
	for _, c := range big {
		<-c
	}
}

// A body of changes is charged before it is read, as much as its
// Content-Length says: a client sending it slowly holds no more than it
// was charged.
func TestABodyOfChangesIsChargedBeforeItIsRead(t *testing.T) {
	a := newDocsAPI(&blockingDocuments{}, DocumentLimits{}, newMetrics(nil), testenv.QuietLogger())
	r := chi.NewRouter()
	r.Post("/api/docs/{documentID}/changes", a.postChanges)
	srv := httptest.NewServer(r)
	defer srv.Close()
	body, send := io.Pipe()
	req, err := http.NewRequest("POST", srv.URL+"/api/docs/"+restDoc+"/changes", body)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = 1 << 20
	answered := make(chan int, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			answered <- 0
			return
		}
		resp.Body.Close()
		answered <- resp.StatusCode
	}()
	send.Write([]byte{0x85})
	testenv.WaitFor(t, "the body's charge", func() bool { return testutil.ToFloat64(a.m.readCharged) == 1<<20 })
	send.CloseWithError(io.ErrUnexpectedEOF) // the client gives up
	<-answered
	testenv.WaitFor(t, "the charge given back", func() bool { return testutil.ToFloat64(a.m.readCharged) == 0 })
}
