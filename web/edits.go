package web

import (
	"bytes"
	"context"
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
	"github.com/tandemhq/tandem/doc/amsync"
	"github.com/tandemhq/tandem/internal/auth"
	"github.com/tandemhq/tandem/transport/wire"
)

// Documents made and edited in JSON: POST /api/docs makes a document
// from a JSON object, PATCH /api/docs/{id} makes a list of edits as one
// change. A document's PATCHes wait in its queue and are made in batches
// (editQueues): each on the one before, rather than all on the same
// heads as concurrent branches that every client then carries, with the
// document worked out once per batch and one write storing the batch. Each change is made by an actor of its own (a new random one:
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
	raw, release, ok := a.readEdits(w, r)
	if !ok {
		return
	}
	defer release()
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
	p := &pendingEdit{ctx: r.Context(), grant: auth.FromContext(r.Context()), at: q.At, edits: body.Ops, done: make(chan editResult, 1)}
	if err := a.submitEdit(id, p); err != nil {
		a.writeDocError(w, r, err)
		return
	}
	var res editResult
	select {
	case res = <-p.done:
	case <-r.Context().Done():
		writeError(w, http.StatusServiceUnavailable, "the request ended while it waited for its edit to be made")
		return
	}
	switch {
	case errors.Is(res.err, amdoc.ErrBadEdit):
		writeError(w, http.StatusBadRequest, res.err.Error())
	case res.err != nil:
		a.writeDocError(w, r, res.err)
	default:
		writeJSON(w, http.StatusOK, map[string]any{"documentId": id, "changes": hexHeads(res.hashes)})
	}
}

// edit makes the edits as one change on changes and writes it.
func (a *docsAPI) edit(w http.ResponseWriter, r *http.Request, id string, changes []byte, edits []amdoc.Edit, status int) {
	var actor [16]byte
	rand.Read(actor[:])
	change, _, err := amdoc.Change(r.Context(), changes, actor[:], time.Now().Unix(), edits)
	if err != nil {
		if errors.Is(err, amdoc.ErrBadEdit) {
			writeError(w, http.StatusBadRequest, err.Error())
		} else {
			a.writeDocError(w, r, err)
		}
		return
	}
	a.write(w, r, id, change, status)
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
	raw, release, ok := a.readEdits(w, r)
	if !ok {
		return
	}
	defer release()
	var content map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&content); err != nil {
		writeError(w, http.StatusBadRequest, "the body is not the JSON expected: "+err.Error())
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
	a.edit(w, r, id, nil, edits, http.StatusCreated)
}

// MaxEditsWaiting bounds the PATCHes of one document that wait to be
// made; past it a PATCH answers 503 with Retry-After.
const MaxEditsWaiting = 64

// maxEditBatch bounds the PATCHes made in one pass over a document.
const maxEditBatch = 64

// editTimeout bounds the work on one batch of a document's PATCHes.
const editTimeout = 30 * time.Second

var errEditsWaiting = fmt.Errorf("over %d edits of the document wait to be made: send fewer at once", MaxEditsWaiting)

// editQueues holds each document's PATCHes waiting to be made. One
// goroutine per document with any waiting (workEdits) makes them, in
// the order they came, in batches: all that wait (up to maxEditBatch)
// are made in one pass over the document, each change on the one before
// (amdoc.Changes), applied one after another and stored by one flush.
// A PATCH that names heads is made alone, on those heads.
type editQueues struct {
	mu   sync.Mutex
	docs map[string]*editQueue
}

type editQueue struct {
	waiting []*pendingEdit
	making  int // the PATCHes of the batch being made
}

// pendingEdit is a PATCH waiting to be made.
type pendingEdit struct {
	ctx   context.Context // the request's
	grant *auth.Grant
	at    []amsync.Hash // the heads it is made on; nil for the document's
	edits []amdoc.Edit
	done  chan editResult // 1-buffered
}

// editBytesPerBodyByte is what a JSON body of edits may hold per byte
// from the moment it is read until its change is made: decoded (up to
// about 17 bytes a byte, an array of small numbers), and the change's
// ops (an op a byte at most, a character of a text's insert, about 170
// bytes each while the change is made).
const editBytesPerBodyByte = 200

// chargeEdits charges a request's JSON body of edits, before it is read,
// what it may hold until it is answered: editBytesPerBodyByte for each
// byte its Content-Length says (or DocumentLimits.JSONBody). It returns
// the most the body may hold, and what gives the charge back; it
// answers and returns false if the body is too large or the request
// ended while it waited.
func (a *docsAPI) chargeEdits(w http.ResponseWriter, r *http.Request) (limit int64, release func(), ok bool) {
	limit = a.limits.JSONBody
	if r.ContentLength >= 0 && r.ContentLength < limit {
		limit = r.ContentLength
	}
	cost := min(limit, amdoc.MaxChangeOps) * editBytesPerBodyByte
	if cost > a.budget.maxCost() {
		a.writeDocError(w, r, fmt.Errorf("%w: its edits may hold about %d bytes, at most %d: send them in several requests", errEditsTooLarge, cost, a.budget.maxCost()))
		return 0, nil, false
	}
	waited := false
	release, ok = a.budget.acquire(r.Context(), cost, false, func() { waited = true; a.m.readWaits.Inc() })
	if !ok {
		writeError(w, http.StatusServiceUnavailable, errEndedWaiting.Error())
		return 0, nil, false
	}
	if waited {
		restartBodyDeadline(r) // the body was not asked for while it waited
	}
	return limit, release, true
}

var errEditsTooLarge = errors.New("the request is too large to make here")

// readEdits charges a body of edits (chargeEdits) and reads it as JSON;
// release gives the charge back once the request is answered. It
// answers and returns false if it cannot.
func (a *docsAPI) readEdits(w http.ResponseWriter, r *http.Request) (raw json.RawMessage, release func(), ok bool) {
	limit, release, ok := a.chargeEdits(w, r)
	if !ok {
		return nil, nil, false
	}
	if !readJSON(w, r, limit, &raw) {
		release()
		return nil, nil, false
	}
	return raw, release, true
}

type editResult struct {
	hashes []amsync.Hash
	err    error
}

// submitEdit queues p for the document, starting its worker if none runs.
func (a *docsAPI) submitEdit(id string, p *pendingEdit) error {
	q := &a.edits
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.docs == nil {
		q.docs = map[string]*editQueue{}
	}
	e := q.docs[id]
	if e == nil {
		e = &editQueue{}
		q.docs[id] = e
		go a.workEdits(id, e)
	} else if len(e.waiting) >= MaxEditsWaiting {
		return errEditsWaiting
	}
	e.waiting = append(e.waiting, p)
	return nil
}

// workEdits makes the document's waiting PATCHes, batch by batch, until
// none waits.
func (a *docsAPI) workEdits(id string, e *editQueue) {
	q := &a.edits
	for {
		q.mu.Lock()
		var batch []*pendingEdit
		for len(e.waiting) > 0 && len(batch) < maxEditBatch {
			p := e.waiting[0]
			if p.ctx.Err() != nil { // its request ended: it is not made
				e.waiting = e.waiting[1:]
				continue
			}
			if len(batch) > 0 && (p.at != nil || batch[0].at != nil) {
				break // one made on heads goes alone
			}
			batch = append(batch, p)
			e.waiting = e.waiting[1:]
		}
		if len(batch) == 0 {
			delete(q.docs, id)
			q.mu.Unlock()
			return
		}
		e.making = len(batch)
		q.mu.Unlock()
		a.makeEdits(id, batch)
	}
}

// makeEdits makes a batch of a document's PATCHes and answers each. Each
// request was charged for its own edits (chargeEdits); the batch is
// charged for the document.
func (a *docsAPI) makeEdits(id string, batch []*pendingEdit) {
	ctx, cancel := context.WithTimeout(context.Background(), editTimeout)
	defer cancel()
	results := make([]editResult, len(batch))
	defer func() {
		for i, p := range batch {
			p.done <- results[i]
		}
	}()
	// Its PATCHes hold their charges while they wait for it: a priority
	// charge, which they cannot keep waiting.
	d, done, err := a.charged(ctx, id, asContent, doc.ReadQuery{At: batch[0].at}, true)
	if err != nil {
		for i := range results {
			results[i].err = err
		}
		return
	}
	edits := make([]amdoc.Edits, len(batch))
	for i, p := range batch {
		// Each change by an actor of its own: no two writes can collide
		// on an actor's sequence, whatever heads they were made on.
		actor := make([]byte, 16)
		rand.Read(actor)
		edits[i] = amdoc.Edits{Actor: actor, Time: time.Now().Unix(), Edits: p.edits}
	}
	made := amdoc.Changes(ctx, d.Changes, edits)
	done()
	applied := 0
	for i, m := range made {
		if m.Err != nil {
			results[i].err = m.Err
			continue
		}
		hashes, err := a.docs.Apply(ctx, newAPIPeer(batch[i].grant), id, m.Chunk)
		if err != nil {
			// What the document did not take (busy, at a limit, closed),
			// the changes made on it do not get in either.
			for j := i; j < len(results); j++ {
				if results[j].err == nil {
					results[j].err = err
				}
			}
			break
		}
		results[i].hashes = hashes
		applied++
	}
	if applied > 0 {
		if err := a.docs.Flush(ctx); err != nil {
			for i := range results {
				if results[i].err == nil {
					results[i].err = fmt.Errorf("store the changes: %w", err)
				}
			}
		}
	}
}
