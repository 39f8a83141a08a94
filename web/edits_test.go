package web

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/tandemhq/tandem/doc"
	"github.com/tandemhq/tandem/doc/amsync"
	"github.com/tandemhq/tandem/internal/testenv"
	"github.com/tandemhq/tandem/transport/wire"
)

func getDoc(t *testing.T, base, token string) docAnswer {
	t.Helper()
	code, body, _ := call(t, "GET", base, token, "", nil)
	var d docAnswer
	if err := json.Unmarshal(body, &d); code != http.StatusOK || err != nil {
		t.Fatalf("GET %s: %d %s", base, code, body)
	}
	return d
}

// A backend makes a document from JSON, then edits it: a splice, a put
// and, on the version of before the splice, a concurrent splice that
// merges with it.
func TestABackendMakesAndEditsADocument(t *testing.T) {
	srv, _ := newDocsServer(t, false, DocumentLimits{})
	code, body, _ := call(t, "POST", srv.URL+"/api/docs", "", "application/json", []byte(`{"text":"hello","n":1,"tags":["a"],"meta":{"ok":true}}`))
	var made struct{ DocumentID, URL string }
	if err := json.Unmarshal(body, &made); code != http.StatusCreated || err != nil {
		t.Fatalf("POST /api/docs: %d %s", code, body)
	}
	if err := wire.ValidateDocumentID(made.DocumentID); err != nil || made.URL != "automerge:"+made.DocumentID {
		t.Fatalf("POST /api/docs answered %s", body)
	}
	base := srv.URL + "/api/docs/" + made.DocumentID
	first := getDoc(t, base, "")
	if got, _ := json.Marshal(first.Doc); string(got) != `{"meta":{"ok":true},"n":1,"tags":["a"],"text":"hello"}` {
		t.Fatalf("the new document shows %s", got)
	}
	patch := `[{"op":"splice","path":["text"],"index":5,"delete":0,"insert":" world"},{"op":"put","path":["meta","by"],"value":"api"}]`
	if code, body, _ := call(t, "PATCH", base, "", "application/json", []byte(patch)); code != http.StatusOK {
		t.Fatalf("PATCH: %d %s", code, body)
	}
	if d := getDoc(t, base, ""); d.Doc["text"] != "hello world" || d.Doc["meta"].(map[string]any)["by"] != "api" {
		t.Fatalf("after PATCH: %v", d.Doc)
	}
	old := fmt.Sprintf(`{"heads":[%q],"ops":[{"op":"splice","path":["text"],"index":0,"insert":">"}]}`, first.Heads[0])
	if code, body, _ := call(t, "PATCH", base, "", "application/json", []byte(old)); code != http.StatusOK {
		t.Fatalf("PATCH at the first heads: %d %s", code, body)
	}
	if d := getDoc(t, base, ""); d.Doc["text"] != ">hello world" || len(d.Heads) != 2 {
		t.Fatalf("the concurrent edit did not merge: %v, heads %v", d.Doc, d.Heads)
	}
}

// An empty object makes an empty document, as repo.create() does: one
// change, no content.
func TestAnEmptyObjectMakesAnEmptyDocument(t *testing.T) {
	srv, _ := newDocsServer(t, false, DocumentLimits{})
	code, body, _ := call(t, "POST", srv.URL+"/api/docs", "", "application/json", []byte(`{}`))
	var made struct{ DocumentID string }
	if json.Unmarshal(body, &made); code != http.StatusCreated {
		t.Fatalf("POST {}: %d %s", code, body)
	}
	base := srv.URL + "/api/docs/" + made.DocumentID
	if d := getDoc(t, base, ""); len(d.Doc) != 0 || len(d.Heads) != 1 {
		t.Fatalf("the empty document shows %v with heads %v", d.Doc, d.Heads)
	}
	if code, body, _ := call(t, "PATCH", base, "", "application/json", []byte(`[{"op":"put","path":["title"],"value":"x"}]`)); code != http.StatusOK {
		t.Fatalf("PATCH the empty document: %d %s", code, body)
	}
}

// A bad edit, a body past a bound and a document outside reach are each
// refused with what is wrong.
func TestEditsAreBoundedAndRefusedWithTheirReason(t *testing.T) {
	srv, _ := newDocsServer(t, false, DocumentLimits{JSONBody: 64 << 10})
	code, body, _ := call(t, "POST", srv.URL+"/api/docs", "", "", []byte(`{"text":"hi"}`))
	var made struct{ DocumentID string }
	if json.Unmarshal(body, &made); code != http.StatusCreated {
		t.Fatalf("POST: %d %s", code, body)
	}
	base := srv.URL + "/api/docs/" + made.DocumentID
	many := "[" + strings.TrimSuffix(strings.Repeat(`{"op":"delete","path":["x"]},`, MaxEdits+1), ",") + "]"
	deep := `[{"op":"put","path":["k"],"value":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}]`
	tests := []struct {
		method, url, body string
		status            int
		want              string
	}{
		{"PATCH", base, `[{"op":"splice","path":["text"],"index":9,"insert":"x"}]`, 400, "past the text's end"},
		{"PATCH", base, `[{"op":"increment","path":["text"]}]`, 400, "not a counter"},
		{"PATCH", base, `[{"op":"put","path":["a"],"value":1,"extra":2}]`, 400, "unknown field"},
		{"PATCH", base, `[]`, 400, "give 1 to 1000 edits"},
		{"PATCH", base, many, 400, "give 1 to 1000 edits"},
		{"PATCH", base, deep, 400, "nests deeper"},
		{"PATCH", base, `[{"op":"put","path":["k"],"value":"` + strings.Repeat("x", 70<<10) + `"}]`, 413, "over 65536 bytes"},
		{"PATCH", base, `{"heads":["` + strings.Repeat("0", 64) + `"],"ops":[{"op":"put","path":["a"],"value":1}]}`, 400, "no change of these heads"},
		{"PATCH", srv.URL + "/api/docs/" + wire.NewDocumentID([16]byte{7}), `[{"op":"put","path":["a"],"value":1}]`, 404, "document not found"},
		{"POST", srv.URL + "/api/docs", `null`, 400, "a JSON object of at most 1000 keys"},
		{"POST", srv.URL + "/api/docs", `[1]`, 400, "not the JSON expected"},
		{"PATCH", base, `[{"op":"put","path":["x"],"value":1}][{"op":"put","path":["y"],"value":1}]`, 400, "more than one JSON value"},
		{"PATCH", base, `[{"op":"put","path":["x"],"value":1}] trailing`, 400, "more than one JSON value"},
	}
	for _, tt := range tests {
		code, body, _ := call(t, tt.method, tt.url, "", "application/json", []byte(tt.body))
		if code != tt.status || !strings.Contains(string(body), tt.want) {
			t.Errorf("%s %.60s: %d %s; want %d with %q", tt.method, tt.body, code, body, tt.status, tt.want)
		}
	}
	if d := getDoc(t, base, ""); d.Doc["text"] != "hi" || len(d.Doc) != 1 {
		t.Fatalf("a refused edit changed the document: %v", d.Doc)
	}
}

// Making a document needs a token that may write every document; editing
// one needs a write grant for it.
func TestMakingAndEditingFollowTheToken(t *testing.T) {
	srv, _ := newDocsServer(t, true, DocumentLimits{})
	all := restToken(t, map[string]string{"*": "write"})
	one := restToken(t, map[string]string{restDoc: "write"})
	if code, _, _ := call(t, "POST", srv.URL+"/api/docs", one, "", []byte(`{"a":1}`)); code != http.StatusForbidden {
		t.Fatalf("a token of one document making one: %d, want 403", code)
	}
	code, body, _ := call(t, "POST", srv.URL+"/api/docs", all, "", []byte(`{"a":1}`))
	var made struct{ DocumentID string }
	if json.Unmarshal(body, &made); code != http.StatusCreated {
		t.Fatalf("POST with a token of every document: %d %s", code, body)
	}
	reader := restToken(t, map[string]string{made.DocumentID: "read"})
	if code, _, _ := call(t, "PATCH", srv.URL+"/api/docs/"+made.DocumentID, reader, "", []byte(`[{"op":"put","path":["a"],"value":2}]`)); code != http.StatusForbidden {
		t.Fatalf("a read token editing: %d, want 403", code)
	}
	if code, _, _ := call(t, "PATCH", srv.URL+"/api/docs/"+made.DocumentID, one, "", []byte(`[{"op":"put","path":["a"],"value":2}]`)); code != http.StatusNotFound {
		t.Fatalf("a token without the document editing: %d, want 404", code)
	}
}

// A document whose content would cost a reader more than its share of
// DocumentLimits.ReadBytes is refused before it is worked out: reading
// it as JSON, saving it or editing it; its changes can still be read.
func TestADocumentTooLargeToWorkOnIsRefusedBeforeItCosts(t *testing.T) {
	// At most 64 KiB a request: a text of 200 characters costs 80 KB by ops alone.
	srv, _ := newDocsServer(t, false, DocumentLimits{ReadBytes: 4 * 64 << 10})
	code, body, _ := call(t, "POST", srv.URL+"/api/docs", "", "", []byte(`{"text":"`+strings.Repeat("y", 200)+`"}`))
	var made struct{ DocumentID string }
	if json.Unmarshal(body, &made); code != http.StatusCreated {
		t.Fatalf("POST: %d %s", code, body)
	}
	base := srv.URL + "/api/docs/" + made.DocumentID
	for _, c := range []struct{ method, url, body string }{
		{"GET", base, ""},
		{"GET", base + "/saved", ""},
		{"PATCH", base, `[{"op":"put","path":["a"],"value":1}]`},
	} {
		code, body, _ := call(t, c.method, c.url, "", "application/json", []byte(c.body))
		if code != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), "too large to work on") {
			t.Errorf("%s %s: %d %s; want 413", c.method, c.url, code, body)
		}
	}
	if code, body, _ := call(t, "GET", base+"/changes", "", "", nil); code != http.StatusOK {
		t.Errorf("GET /changes: %d %s", code, body)
	}
}

// A backend with no automerge makes a counter and adds to it, and puts
// bytes and an exact 64-bit integer, as a put's type says.
func TestATypedPutMakesACounterOverREST(t *testing.T) {
	srv, _ := newDocsServer(t, false, DocumentLimits{})
	code, body, _ := call(t, "POST", srv.URL+"/api/docs", "", "application/json", []byte(`{}`))
	var made struct{ DocumentID string }
	if json.Unmarshal(body, &made); code != http.StatusCreated {
		t.Fatalf("POST: %d %s", code, body)
	}
	base := srv.URL + "/api/docs/" + made.DocumentID
	for _, edits := range []string{
		`[{"op":"put","path":["votes"],"value":0,"type":"counter"},{"op":"put","path":["blob"],"value":"AAE=","type":"bytes"},{"op":"put","path":["id"],"value":9007199254740993,"type":"int"}]`,
		`[{"op":"increment","path":["votes"],"value":5}]`,
	} {
		if code, body, _ := call(t, "PATCH", base, "", "application/json", []byte(edits)); code != http.StatusOK {
			t.Fatalf("PATCH %s: %d %s", edits, code, body)
		}
	}
	code, body, _ = call(t, "GET", base, "", "", nil)
	if code != http.StatusOK || !strings.Contains(string(body), `"doc":{"blob":"AAE=","id":9007199254740993,"votes":5}`) {
		t.Fatalf("GET: %d %s", code, body)
	}
}

// PATCHes of one document sent at once take turns: each is made on the
// one before, so the document keeps one head rather than branching once
// per edit, and every edit is in it.
func TestPatchesOfADocumentSentAtOnceAreMadeOneOnAnother(t *testing.T) {
	srv, _ := newDocsServer(t, false, DocumentLimits{})
	// A text long enough that working out each edit takes a while: the
	// PATCHes overlap.
	code, body, _ := call(t, "POST", srv.URL+"/api/docs", "", "application/json", []byte(`{"text":"`+strings.Repeat("x", 10_000)+`"}`))
	var made struct{ DocumentID string }
	if json.Unmarshal(body, &made); code != http.StatusCreated {
		t.Fatalf("POST: %d %s", code, body)
	}
	base := srv.URL + "/api/docs/" + made.DocumentID
	const n = 20
	codes := make(chan int, n)
	for i := range n {
		go func() {
			codes <- patchStatus(base, fmt.Sprintf(`[{"op":"splice","path":["text"],"index":0,"insert":"[%d]"}]`, i))
		}()
	}
	for range n {
		if c := <-codes; c != http.StatusOK {
			t.Fatalf("a PATCH answered %d", c)
		}
	}
	d := getDoc(t, base, "")
	if len(d.Heads) != 1 {
		t.Errorf("%d heads after %d PATCHes at once, want 1", len(d.Heads), n)
	}
	for i := range n {
		if !strings.Contains(d.Doc["text"].(string), fmt.Sprintf("[%d]", i)) {
			t.Errorf("edit %d is not in the text %q", i, d.Doc["text"])
		}
	}
}

func mustRequest(t *testing.T, method, u, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return req
}

// patchStatus sends a PATCH of body to u and returns its status; 0 if it
// got no answer. It calls no t.Fatal: tests call it from goroutines.
func patchStatus(u, body string) int {
	req, err := http.NewRequest("PATCH", u, strings.NewReader(body))
	if err != nil {
		return 0
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// Past MaxEditsWaiting PATCHes waiting for one document, the next is
// told to come back (503 with Retry-After) rather than held; those
// waiting are made in one batch.
func TestTooManyPatchesWaitingForADocumentAreToldToComeBack(t *testing.T) {
	docs := &blockingDocuments{
		sizes:   map[string]doc.Size{bigDoc: {Ops: 10}},
		in:      make(chan string),
		release: make(chan struct{}),
	}
	a := newDocsAPI(docs, DocumentLimits{}, newMetrics(nil), testenv.QuietLogger())
	r := chi.NewRouter()
	r.Patch("/api/docs/{documentID}", a.patch)
	srv := httptest.NewServer(r)
	defer srv.Close()
	edit := `[{"op":"put","path":["a"],"value":1}]`
	codes := make(chan int, MaxEditsWaiting+1)
	patch := func() {
		codes <- patchStatus(srv.URL+"/api/docs/"+bigDoc, edit)
	}
	go patch()
	<-docs.in // the first has the turn and reads
	for range MaxEditsWaiting {
		go patch()
	}
	testenv.WaitFor(t, "the others waiting", func() bool {
		a.edits.mu.Lock()
		defer a.edits.mu.Unlock()
		return len(a.edits.docs[bigDoc].waiting) == MaxEditsWaiting
	})
	resp, err := http.DefaultClient.Do(mustRequest(t, "PATCH", srv.URL+"/api/docs/"+bigDoc, edit))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("one past the waiting bound: %d, want 503 with Retry-After", resp.StatusCode)
	}
	docs.release <- struct{}{}
	// The waiting ones are made in one batch: one read.
	<-docs.in
	docs.release <- struct{}{}
	for range MaxEditsWaiting + 1 {
		if c := <-codes; c != http.StatusNotFound {
			t.Fatalf("a waiting PATCH answered %d, want the store's 404", c)
		}
	}
	testenv.WaitFor(t, "the document's queue let go", func() bool {
		a.edits.mu.Lock()
		defer a.edits.mu.Unlock()
		return len(a.edits.docs) == 0
	})
}

// What making an edit's change may hold is charged with the document:
// past a request's share of DocumentLimits.ReadBytes, a PATCH or a new
// document is refused before it is made.
func TestAnEditTooLargeToMakeIsRefusedBeforeItCosts(t *testing.T) {
	srv, _ := newDocsServer(t, false, DocumentLimits{ReadBytes: 4 << 20}) // at most 1 MiB a request
	code, body, _ := call(t, "POST", srv.URL+"/api/docs", "", "", []byte(`{"text":"hi"}`))
	var made struct{ DocumentID string }
	if json.Unmarshal(body, &made); code != http.StatusCreated {
		t.Fatalf("POST: %d %s", code, body)
	}
	long := strings.Repeat("y", 8000) // 1.6 MB at 200 bytes a byte
	for _, c := range []struct{ method, url, body string }{
		{"PATCH", srv.URL + "/api/docs/" + made.DocumentID, `[{"op":"splice","path":["text"],"index":0,"insert":"` + long + `"}]`},
		{"POST", srv.URL + "/api/docs", `{"text":"` + long + `"}`},
	} {
		code, body, _ := call(t, c.method, c.url, "", "application/json", []byte(c.body))
		if code != http.StatusRequestEntityTooLarge {
			t.Errorf("%s %s: %d %s; want 413", c.method, c.url, code, body)
		}
	}
}

// PATCHes that each fit the budget, sent at once, are each made: each is
// charged for its own edits as it comes (those past the budget wait
// before their body is read), and a batch for its document once.
func TestPatchesThatEachFitAreMadeWhenSentAtOnce(t *testing.T) {
	srv, _ := newDocsServer(t, false, DocumentLimits{ReadBytes: 256 << 20}) // at most 64 MiB a request
	// A text long enough that the PATCHes queue while one is made.
	code, body, _ := call(t, "POST", srv.URL+"/api/docs", "", "", []byte(`{"text":"`+strings.Repeat("x", 50_000)+`"}`))
	var made struct{ DocumentID string }
	if json.Unmarshal(body, &made); code != http.StatusCreated {
		t.Fatalf("POST: %d %s", code, body)
	}
	// Each charged 4 MB, 80 MB together: over what one request may.
	const n = 20
	edit := `[{"op":"put","path":["k"],"value":"` + strings.Repeat("z", 20_000) + `","type":"string"}]`
	codes := make(chan int, n)
	for range n {
		go func() {
			codes <- patchStatus(srv.URL+"/api/docs/"+made.DocumentID, edit)
		}()
	}
	for range n {
		if c := <-codes; c != http.StatusOK {
			t.Fatalf("a PATCH answered %d", c)
		}
	}
}

// busyDocuments is a document store that takes no change (ErrBusy),
// counting its reads.
// busyDocuments takes no change (ErrBusy). Its first read waits for
// gate, if set, so that a test can queue PATCHes behind it.
type busyDocuments struct {
	reads atomic.Int32
	gate  chan struct{}
}

func (b *busyDocuments) Size(context.Context, string) (doc.Size, error) {
	return doc.Size{Ops: 1, Bytes: 1}, nil
}

func (b *busyDocuments) Read(context.Context, string, doc.ReadQuery) (doc.Read, error) {
	if b.reads.Add(1) == 1 && b.gate != nil {
		<-b.gate
	}
	return doc.Read{}, nil
}

func (b *busyDocuments) Apply(context.Context, doc.Peer, string, []byte) ([]amsync.Hash, error) {
	return nil, doc.ErrBusy
}

func (b *busyDocuments) Flush(context.Context) error { return nil }

// A batch whose change the document does not take answers every PATCH of
// it with why, rather than make the rest again one pass each.
func TestABatchTheDocumentDoesNotTakeIsAnsweredAtOnce(t *testing.T) {
	docs := &busyDocuments{gate: make(chan struct{})}
	a := newDocsAPI(docs, DocumentLimits{}, newMetrics(nil), testenv.QuietLogger())
	r := chi.NewRouter()
	r.Patch("/api/docs/{documentID}", a.patch)
	srv := httptest.NewServer(r)
	defer srv.Close()
	const n = 20
	codes := make(chan int, n)
	for i := range n {
		go func() {
			codes <- patchStatus(srv.URL+"/api/docs/"+restDoc, fmt.Sprintf(`[{"op":"put","path":["k%d"],"value":1}]`, i))
		}()
	}
	// The first batch reads the document and waits there until the
	// other PATCHes wait behind it: they then make one batch.
	testenv.WaitFor(t, "the other PATCHes queued", func() bool {
		a.edits.mu.Lock()
		defer a.edits.mu.Unlock()
		e := a.edits.docs[restDoc]
		return docs.reads.Load() == 1 && e != nil && e.making+len(e.waiting) == n
	})
	close(docs.gate)
	for range n {
		if c := <-codes; c != http.StatusServiceUnavailable {
			t.Fatalf("a PATCH answered %d, want 503 (busy)", c)
		}
	}
	if reads := docs.reads.Load(); reads > n/2 {
		t.Fatalf("the document was read %d times for %d PATCHes", reads, n)
	}
}
