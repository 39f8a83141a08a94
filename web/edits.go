package web

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/tandemhq/tandem/doc"
	"github.com/tandemhq/tandem/doc/amdoc"
	"github.com/tandemhq/tandem/internal/auth"
	"github.com/tandemhq/tandem/transport/wire"
)

// Documents made and edited in JSON: POST /api/docs makes a document
// from a JSON object, PATCH /api/docs/{id} makes a list of edits as one
// change. A document's PATCHes take turns (editQueues) from their read
// until their change is applied: each is made on the one before, rather
// than all on the same heads as concurrent branches that every client
// then carries, and the document is worked out once at a time; the
// waits for the store overlap, one write storing many. Each change is made by an actor of its own (a new random one:
// no two writes can then collide on an actor's sequence, whatever heads
// they were made on), on the document as it is or as it was at the
// heads the request names, and written as a peer's change is
// (Documents.Write): the guard checks it, it is stored before the
// answer, and every peer of the document is sent it.

// Bounds of a JSON body, besides its bytes (DocumentLimits.JSONBody).
const (
	// MaxEdits bounds the edits of one PATCH.
	MaxEdits = 1000
	// maxJSONDepth bounds how deeply a JSON body nests: an edit's value
	// nests at most amdoc.MaxEditDepth, under a few levels of its own.
	maxJSONDepth = amdoc.MaxEditDepth + 4
)

// readJSON reads a JSON body of at most limit bytes nesting at most
// maxJSONDepth, numbers kept as written. It answers and returns false if
// the body is not that.
func readJSON(w http.ResponseWriter, r *http.Request, limit int64, v any) bool {
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		writeBodyError(w, err)
		return false
	}
	if int64(len(body)) > limit {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is over %d bytes", limit))
		return false
	}
	if d := jsonDepth(body); d > maxJSONDepth {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("the body nests deeper than %d", maxJSONDepth))
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, "the body is not the JSON expected: "+err.Error())
		return false
	}
	if _, err := dec.Token(); err != io.EOF {
		writeError(w, http.StatusBadRequest, "the body holds more than one JSON value")
		return false
	}
	return true
}

// jsonDepth returns how deeply b's arrays and objects nest, reading it
// once, without decoding.
func jsonDepth(b []byte) int {
	depth, deepest, inString, escaped := 0, 0, false, false
	for _, c := range b {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			depth++
			deepest = max(deepest, depth)
		case c == ']' || c == '}':
			depth--
		}
	}
	return deepest
}

// patchBody is PATCH's body as an object: edits made on the document as
// it was at heads.
type patchBody struct {
	Heads []string     `json:"heads"`
	Ops   []amdoc.Edit `json:"ops"`
}

// patch makes a list of edits as one change: a JSON array of edits, or
// {"heads": [...], "ops": [...]} to make them on the document as it was
// at those heads (the change then merges as a concurrent edit).
func (a *docsAPI) patch(w http.ResponseWriter, r *http.Request) {
	id, ok := documentFor(w, r, auth.Write)
	if !ok {
		return
	}
	var raw json.RawMessage
	if !readJSON(w, r, a.limits.JSONBody, &raw) {
		return
	}
	var body patchBody
	dec := func(v any) error {
		d := json.NewDecoder(bytes.NewReader(raw))
		d.UseNumber()
		d.DisallowUnknownFields()
		return d.Decode(v)
	}
	var err error
	if t := bytes.TrimSpace(raw); len(t) > 0 && t[0] == '[' {
		err = dec(&body.Ops)
	} else {
		err = dec(&body)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, `the body must be an array of edits or {"heads": [...], "ops": [...]}: `+err.Error())
		return
	}
	if len(body.Ops) == 0 || len(body.Ops) > MaxEdits {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("give 1 to %d edits", MaxEdits))
		return
	}
	var q doc.ReadQuery
	if len(body.Heads) > 0 {
		if len(body.Heads) > doc.MaxReadHeads {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("heads: at most %d hashes", doc.MaxReadHeads))
			return
		}
		for _, h := range body.Heads {
			x, err := parseHeads(h)
			if err != nil {
				writeError(w, http.StatusBadRequest, err.Error())
				return
			}
			q.At = append(q.At, x...)
		}
	}
	end, ok := a.edits.turn(w, r, id)
	if !ok {
		return
	}
	d, done, ok := a.read(w, r, id, asContent, q)
	if !ok {
		end()
		return
	}
	a.edit(w, r, id, d.Changes, done, end, body.Ops, http.StatusOK)
}

// edit makes the edits as one change on changes and writes it. done,
// if set, ends the read's charge, once the change is made; end, if set,
// the document's edit turn, once the change is applied (edits.go).
func (a *docsAPI) edit(w http.ResponseWriter, r *http.Request, id string, changes []byte, done, end func(), edits []amdoc.Edit, status int) {
	var actor [16]byte
	rand.Read(actor[:])
	change, _, err := amdoc.Change(r.Context(), changes, actor[:], time.Now().Unix(), edits)
	if done != nil {
		done()
	}
	if err != nil {
		if end != nil {
			end()
		}
		if errors.Is(err, amdoc.ErrBadEdit) {
			writeError(w, http.StatusBadRequest, err.Error())
		} else {
			a.writeDocError(w, r, err)
		}
		return
	}
	a.write(w, r, id, change, end, status)
}

// create makes a document from a JSON object: each key put as PATCH
// puts it (strings as text, as automerge-repo's repo.create makes them);
// {} makes an empty document, as repo.create() does, of one empty change.
// Making a document needs a token that may write every document.
func (a *docsAPI) create(w http.ResponseWriter, r *http.Request) {
	var uuid [16]byte
	rand.Read(uuid[:])
	id := wire.NewDocumentID(uuid)
	if auth.FromContext(r.Context()).Can(id) < auth.Write {
		writeError(w, http.StatusForbidden, `making a document needs a token that may write every document ("docs": {"*": "write"})`)
		return
	}
	var content map[string]any
	if !readJSON(w, r, a.limits.JSONBody, &content) {
		return
	}
	if content == nil || len(content) > MaxEdits {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("the body must be a JSON object of at most %d keys", MaxEdits))
		return
	}
	keys := make([]string, 0, len(content))
	for k := range content {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	edits := make([]amdoc.Edit, len(keys))
	for i, k := range keys {
		edits[i] = amdoc.Edit{Op: "put", Path: []any{k}, Value: content[k]}
	}
	a.edit(w, r, id, nil, nil, nil, edits, http.StatusCreated)
}

// MaxEditsWaiting bounds the PATCHes of one document that wait for their
// turn; past it a PATCH answers 503 with Retry-After.
const MaxEditsWaiting = 64

// editQueues gives each document's PATCHes their turns, in the order
// they came.
type editQueues struct {
	mu   sync.Mutex
	docs map[string]*editQueue
}

type editQueue struct {
	turn chan struct{} // holds a token while a PATCH has the turn
	n    int           // PATCHes holding or waiting for the turn
}

// turn waits for the document's edit turn and returns what ends it; it
// answers and returns false if the request ended first or too many wait.
func (q *editQueues) turn(w http.ResponseWriter, r *http.Request, id string) (func(), bool) {
	q.mu.Lock()
	if q.docs == nil {
		q.docs = map[string]*editQueue{}
	}
	e := q.docs[id]
	if e == nil {
		e = &editQueue{turn: make(chan struct{}, 1)}
		q.docs[id] = e
	}
	if e.n > MaxEditsWaiting {
		q.mu.Unlock()
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("over %d edits of the document wait for their turn: send fewer at once", MaxEditsWaiting))
		return nil, false
	}
	e.n++
	q.mu.Unlock()
	leave := func() {
		q.mu.Lock()
		if e.n--; e.n == 0 {
			delete(q.docs, id)
		}
		q.mu.Unlock()
	}
	select {
	case e.turn <- struct{}{}:
	case <-r.Context().Done():
		leave()
		writeError(w, http.StatusServiceUnavailable, "the request ended while it waited for its turn to edit")
		return nil, false
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			<-e.turn
			leave()
		})
	}, true
}
