package web

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/tandemhq/tandem/awareness"
	"github.com/tandemhq/tandem/doc"
	"github.com/tandemhq/tandem/doc/amdoc"
	"github.com/tandemhq/tandem/doc/amsync"
	"github.com/tandemhq/tandem/internal/auth"
	"github.com/tandemhq/tandem/transport/wire"
)

// Documents is what the document API needs; *doc.Hub implements it.
type Documents interface {
	Size(ctx context.Context, documentID string) (doc.Size, error)
	Read(ctx context.Context, documentID string, q doc.ReadQuery) (doc.Read, error)
	Apply(ctx context.Context, p doc.Peer, documentID string, changes []byte) ([]amsync.Hash, error)
	Flush(ctx context.Context) error
}

var _ Documents = (*doc.Hub)(nil)

// DocumentLimits bound the document API's requests.
type DocumentLimits struct {
	// ChangesBody bounds the body of POST /api/docs/{id}/changes;
	// default 8 MiB.
	ChangesBody int64
	// JSONBody bounds a JSON body (POST /api/docs, PATCH); default 1 MiB.
	JSONBody int64
	// ReadBytes bounds what the requests that work on a whole document
	// (GET of its content, saved form or changes; PATCH) hold together,
	// node-wide: each is charged before it reads (a copy of the changes;
	// ReadBytesPerOp for each op it makes content or a change of, twice
	// the changes' bytes besides) and waits until that fits
	// (readbudget.go). A request that would cost over a quarter of it
	// is refused (413). Default 2 GiB, so a document of about 1.3 M ops
	// may be read as JSON.
	ReadBytes int64
}

// ReadBytesPerOp is what working out a document's content or an edit on
// it holds per op: its op set, the view and the copies made on the way
// (measured at 350-500 bytes an op).
const ReadBytesPerOp = 400

func (l *DocumentLimits) setDefaults() {
	if l.ChangesBody <= 0 {
		l.ChangesBody = 8 << 20
	}
	if l.JSONBody <= 0 {
		l.JSONBody = 1 << 20
	}
	if l.ReadBytes <= 0 {
		l.ReadBytes = 2 << 30
	}
}

type docsAPI struct {
	docs   Documents
	limits DocumentLimits
	log    *slog.Logger
	budget *readBudget
	edits  editQueues
	m      *metrics
}

func newDocsAPI(docs Documents, limits DocumentLimits, m *metrics, log *slog.Logger) *docsAPI {
	limits.setDefaults()
	return &docsAPI{docs: docs, limits: limits, log: log, budget: newReadBudget(limits.ReadBytes, m.readCharged), m: m}
}

// What a request works out from the changes it reads.
type work int

const (
	// asChanges sends the changes as they are.
	asChanges work = iota
	// asContent works out the content, an edit on it or its save.
	asContent
	// asSaved sends the room's save, or works one out as asContent.
	asSaved
)

// cost is what a request of kind k holds for a document of ops ops and
// bytes of changes (those it reads, for a read of part of one).
func (k work) cost(ops, bytes int64) int64 {
	if k == asChanges {
		return bytes
	}
	return ops*ReadBytesPerOp + 2*bytes
}

// readCost is what a read, once read, holds for k.
func (k work) readCost(d doc.Read) int64 {
	if d.Saved != nil {
		return 0 // the room's own bytes, shared
	}
	return k.cost(d.Ops, int64(len(d.Changes)))
}

// readTries bounds how often a request charged for a document that then
// grew past its charge is charged again.
const readTries = 3

// read reads a document for a request of kind k, charged to the budget
// before it is read (done gives the charge back). It answers and returns
// false if it cannot: 413 for a document too large to work on.
func (a *docsAPI) read(w http.ResponseWriter, r *http.Request, id string, k work, q doc.ReadQuery) (d doc.Read, done func(), ok bool) {
	d, done, err := a.charged(r.Context(), id, k, q, false)
	if err != nil {
		a.writeDocError(w, r, err)
		return doc.Read{}, nil, false
	}
	return d, done, true
}

// Why a read was not charged (charged).
var (
	errTooLarge     = errors.New("the document is too large to work on here")
	errEndedWaiting = errors.New("the request ended while it waited for its turn to read")
	errGrew         = errors.New("the document grew faster than it could be read: try again")
)

// charged reads a document for work of kind k, charged to the budget
// before it is read (done gives the charge back).
func (a *docsAPI) charged(ctx context.Context, id string, k work, q doc.ReadQuery, priority bool) (d doc.Read, done func(), err error) {
	q.Saved = k == asSaved
	for range readTries {
		size, err := a.docs.Size(ctx, id)
		if err != nil {
			return doc.Read{}, nil, err
		}
		cost := int64(0)
		if !(k == asSaved && size.Saved) {
			cost = k.cost(size.Ops, size.Bytes)
		}
		if cost > a.budget.maxCost() {
			a.m.refused.WithLabelValues(refusedTooLarge).Inc()
			return doc.Read{}, nil, fmt.Errorf("%w (%d ops, about %d bytes; at most %d): read its changes instead",
				errTooLarge, size.Ops, cost, a.budget.maxCost())
		}
		// A little over what it holds now: the document may grow
		// before it is read.
		charged := min(cost+cost/8+64<<10, a.budget.maxCost())
		release, ok := a.budget.acquire(ctx, charged, priority, a.m.readWaits.Inc)
		if !ok {
			return doc.Read{}, nil, errEndedWaiting
		}
		d, err := a.docs.Read(ctx, id, q)
		if err != nil {
			release()
			return doc.Read{}, nil, err
		}
		if k.readCost(d) <= charged {
			return d, release, nil
		}
		release() // it grew past its charge: charge it again
	}
	return doc.Read{}, nil, errGrew
}

// documentFor returns the document a request names if its token may
// access it as need asks; otherwise it answers: 400 for an id that is
// none, 404 for a document outside the token (as on the WebSocket, it
// does not exist), 403 for one the token may only read.
func documentFor(w http.ResponseWriter, r *http.Request, need auth.Access) (string, bool) {
	id := chi.URLParam(r, "documentID")
	if err := wire.ValidateDocumentID(id); err != nil {
		writeError(w, http.StatusBadRequest, "invalid document id")
		return "", false
	}
	switch a := auth.FromContext(r.Context()).Can(id); {
	case a == auth.None:
		writeError(w, http.StatusNotFound, "document not found")
		return "", false
	case a < need:
		writeError(w, http.StatusForbidden, "this token may read the document, not change it")
		return "", false
	}
	return id, true
}

// parseHeads reads a comma-separated list of change hashes in hex, at
// most doc.MaxReadHeads of them.
func parseHeads(s string) ([]amsync.Hash, error) {
	if len(s) > doc.MaxReadHeads*65 {
		return nil, fmt.Errorf("heads: at most %d hashes", doc.MaxReadHeads)
	}
	var out []amsync.Hash
	for _, part := range strings.Split(s, ",") {
		var h amsync.Hash
		if b, err := hex.DecodeString(strings.TrimSpace(part)); err != nil || len(b) != len(h) {
			return nil, fmt.Errorf("heads: %q is not a change hash (64 hex digits)", part)
		} else {
			copy(h[:], b)
		}
		out = append(out, h)
	}
	return out, nil
}

func hexHeads(hs []amsync.Hash) []string {
	out := make([]string, len(hs))
	for i := range hs {
		out[i] = hex.EncodeToString(hs[i][:])
	}
	return out
}

// get answers the document's content as automerge's toJS shows it, with
// its heads; ?heads= reads it as it was at those heads.
func (a *docsAPI) get(w http.ResponseWriter, r *http.Request) {
	id, ok := documentFor(w, r, auth.Read)
	if !ok {
		return
	}
	var q doc.ReadQuery
	if s := r.URL.Query().Get("heads"); s != "" {
		var err error
		if q.At, err = parseHeads(s); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
	}
	d, done, ok := a.read(w, r, id, asContent, q)
	if !ok {
		return
	}
	defer done()
	content, err := amdoc.View(r.Context(), d.Changes)
	if err != nil {
		a.writeDocError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"documentId": id, "heads": hexHeads(d.Heads), "doc": content})
}

// saved answers the document saved as automerge saves one.
func (a *docsAPI) saved(w http.ResponseWriter, r *http.Request) {
	id, ok := documentFor(w, r, auth.Read)
	if !ok {
		return
	}
	d, done, ok := a.read(w, r, id, asSaved, doc.ReadQuery{})
	if !ok {
		return
	}
	defer done()
	b := d.Saved
	if b == nil {
		var err error
		if b, err = amdoc.SaveContext(r.Context(), d.Changes); err != nil {
			a.writeDocError(w, r, err)
			return
		}
	}
	writeBinary(w, d.Heads, b)
}

// changes answers the document's changes, all of them or those since
// ?since=.
func (a *docsAPI) changes(w http.ResponseWriter, r *http.Request) {
	id, ok := documentFor(w, r, auth.Read)
	if !ok {
		return
	}
	var q doc.ReadQuery
	if s := r.URL.Query().Get("since"); s != "" {
		var err error
		if q.Since, err = parseHeads(s); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
	}
	d, done, ok := a.read(w, r, id, asChanges, q)
	if !ok {
		return
	}
	defer done()
	writeBinary(w, d.Heads, d.Changes)
}

// HeadsHeader names the document's heads (hex, comma-separated) beside
// a binary answer, and the changes written beside a write's.
const HeadsHeader = "Automerge-Heads"

func writeBinary(w http.ResponseWriter, heads []amsync.Hash, b []byte) {
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set(HeadsHeader, strings.Join(hexHeads(heads), ","))
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	w.Write(b)
}

// postChanges applies change chunks a backend made with its own
// automerge, checked as a client's are.
func (a *docsAPI) postChanges(w http.ResponseWriter, r *http.Request) {
	id, ok := documentFor(w, r, auth.Write)
	if !ok {
		return
	}
	// The body is charged before it is read: as much as it says it
	// holds, or as much as it may.
	size := a.limits.ChangesBody
	if r.ContentLength >= 0 && r.ContentLength < size {
		size = r.ContentLength
	}
	waited := false
	release, ok := a.budget.acquire(r.Context(), size, false, func() { waited = true; a.m.readWaits.Inc() })
	if !ok {
		writeError(w, http.StatusServiceUnavailable, errEndedWaiting.Error())
		return
	}
	defer release()
	if waited {
		restartBodyDeadline(r) // the body was not asked for while it waited
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, size+1))
	if err != nil {
		writeBodyError(w, err)
		return
	}
	if int64(len(body)) > size {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the changes are over %d bytes (or over the Content-Length): send them in several requests", size))
		return
	}
	a.write(w, r, id, body, http.StatusOK)
}

// write applies changes as the request's, waits until the store holds
// them and answers with their hashes.
func (a *docsAPI) write(w http.ResponseWriter, r *http.Request, id string, changes []byte, status int) bool {
	written, err := a.docs.Apply(r.Context(), newAPIPeer(auth.FromContext(r.Context())), id, changes)
	if err != nil {
		a.writeDocError(w, r, err)
		return false
	}
	if err := a.docs.Flush(r.Context()); err != nil {
		a.writeDocError(w, r, fmt.Errorf("store the changes: %w", err))
		return false
	}
	answer := map[string]any{"documentId": id, "changes": hexHeads(written)}
	if status == http.StatusCreated {
		answer["url"] = "automerge:" + id
	}
	writeJSON(w, status, answer)
	return true
}

// writeDocError answers a document API request that failed.
func (a *docsAPI) writeDocError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, errTooLarge), errors.Is(err, errEditsTooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, err.Error())
	case errors.Is(err, errEndedWaiting):
		writeError(w, http.StatusServiceUnavailable, err.Error())
	case errors.Is(err, errGrew), errors.Is(err, errEditsWaiting):
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, err.Error())
	case errors.Is(err, doc.ErrNotFound):
		writeError(w, http.StatusNotFound, "document not found")
	case errors.Is(err, doc.ErrUnknownHeads):
		writeError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, doc.ErrNotChanges):
		writeError(w, http.StatusBadRequest, err.Error()+": send uncompressed change chunks one after another, as automerge's getChanges or saveIncremental makes them")
	case errors.Is(err, doc.ErrMissingDependencies):
		writeError(w, http.StatusConflict, err.Error()+": read its changes first (GET .../changes) and make yours on them")
	case errors.Is(err, doc.ErrLimit):
		writeError(w, http.StatusRequestEntityTooLarge, err.Error())
	case errors.Is(err, doc.ErrRefused), errors.Is(err, doc.ErrBadSyncMessage):
		writeError(w, http.StatusUnprocessableEntity, err.Error())
	case errors.Is(err, doc.ErrBusy), errors.Is(err, doc.ErrStoreBehind):
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, err.Error())
	case errors.Is(err, amdoc.ErrTooDeep):
		writeError(w, http.StatusUnprocessableEntity, err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		writeError(w, http.StatusServiceUnavailable, "the request ended before the document was ready")
	default:
		internalError(a.log, w, r, err)
	}
}

// apiPeer is the server-side peer a write through the API is made as:
// the room treats it as any peer (its observer hears of the change as
// that peer's, and the mention tracker counts its mentions when it
// leaves), and what the room sends it is dropped.
type apiPeer struct {
	id, user, name string
}

func newAPIPeer(g *auth.Grant) *apiPeer {
	var b [12]byte
	rand.Read(b[:])
	p := &apiPeer{id: "api-" + hex.EncodeToString(b[:])}
	if g != nil {
		p.user, p.name = g.UserID, g.Name
	}
	return p
}

func (p *apiPeer) ID() string                          { return p.id }
func (p *apiPeer) SendSync(string, []byte)             {}
func (p *apiPeer) SendDocUnavailable(string)           {}
func (p *apiPeer) SendEphemeral(string, doc.Ephemeral) {}

// Identity names the token's user ("" in open mode): the author of the
// mentions the write makes.
func (p *apiPeer) Identity() awareness.Identity {
	return awareness.Identity{UserID: p.user, Name: p.name}
}

var _ awareness.Identified = (*apiPeer)(nil)
