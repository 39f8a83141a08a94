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
	"sync/atomic"

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
	Read(ctx context.Context, documentID string, q doc.ReadQuery) (doc.Read, error)
	Write(ctx context.Context, p doc.Peer, documentID string, changes []byte) ([]amsync.Hash, error)
}

var _ Documents = (*doc.Hub)(nil)

// DocumentLimits bound the document API's requests.
type DocumentLimits struct {
	// ChangesBody bounds the body of POST /api/docs/{id}/changes;
	// default 8 MiB.
	ChangesBody int64
	// JSONBody bounds a JSON body (POST /api/docs, PATCH); default 1 MiB.
	JSONBody int64
	// Readers bounds the requests that read a whole document at once
	// (GET of its content, saved or changes; PATCH), node-wide: each
	// holds a copy of the document's changes and what it makes of them;
	// others wait their turn. Default 4.
	Readers int
	// ReadBytes bounds what those readers may hold together, node-wide:
	// a request whose document would cost more than its share
	// (ReadBytes/Readers; ReadBytesPerOp for each op it makes content
	// or a change of, twice its changes' bytes besides) is refused (413)
	// before it is made. Default 2 GiB, so a document of about 1.3 M ops.
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
	if l.Readers <= 0 {
		l.Readers = 4
	}
	if l.ReadBytes <= 0 {
		l.ReadBytes = 2 << 30
	}
}

// fits reports whether a reader may work out what a document of d makes
// (its content, an edit on it, its save): what it would hold within its
// share of DocumentLimits.ReadBytes. Otherwise it answers 413.
func (a *docsAPI) fits(w http.ResponseWriter, d doc.Read) bool {
	cost := d.Ops*ReadBytesPerOp + 2*int64(len(d.Changes))
	if share := a.limits.ReadBytes / int64(a.limits.Readers); cost > share {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf(
			"the document is too large to work on here (%d ops, about %d bytes; at most %d): read its changes instead",
			d.Ops, cost, share))
		return false
	}
	return true
}

type docsAPI struct {
	docs   Documents
	limits DocumentLimits
	log    *slog.Logger
	// readers holds a token per request reading a whole document
	// (DocumentLimits.Readers); waiting counts those waiting for one.
	readers chan struct{}
	waiting atomic.Int64
}

func newDocsAPI(docs Documents, limits DocumentLimits, log *slog.Logger) *docsAPI {
	limits.setDefaults()
	return &docsAPI{docs: docs, limits: limits, log: log, readers: make(chan struct{}, limits.Readers)}
}

// readTurn waits for a reader's turn, and returns what ends it; false if
// the request ended first.
func (a *docsAPI) readTurn(r *http.Request) (func(), bool) {
	select {
	case a.readers <- struct{}{}:
	default:
		a.waiting.Add(1)
		defer a.waiting.Add(-1)
		select {
		case a.readers <- struct{}{}:
		case <-r.Context().Done():
			return nil, false
		}
	}
	return func() { <-a.readers }, true
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

// read reads a document for a request, in a reader's turn (done ends
// it); ok false once it answered.
func (a *docsAPI) read(w http.ResponseWriter, r *http.Request, q doc.ReadQuery) (id string, d doc.Read, done func(), ok bool) {
	if id, ok = documentFor(w, r, auth.Read); !ok {
		return "", doc.Read{}, nil, false
	}
	if done, ok = a.readTurn(r); !ok {
		writeError(w, http.StatusServiceUnavailable, "the request ended while it waited for its turn to read")
		return "", doc.Read{}, nil, false
	}
	d, err := a.docs.Read(r.Context(), id, q)
	if err != nil {
		done()
		a.writeDocError(w, r, err)
		return "", doc.Read{}, nil, false
	}
	return id, d, done, true
}

// get answers the document's content as automerge's toJS shows it, with
// its heads; ?heads= reads it as it was at those heads.
func (a *docsAPI) get(w http.ResponseWriter, r *http.Request) {
	var q doc.ReadQuery
	if s := r.URL.Query().Get("heads"); s != "" {
		var err error
		if q.At, err = parseHeads(s); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
	}
	id, d, done, ok := a.read(w, r, q)
	if !ok {
		return
	}
	defer done()
	if !a.fits(w, d) {
		return
	}
	content, err := amdoc.View(r.Context(), d.Changes)
	if err != nil {
		a.writeDocError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"documentId": id, "heads": hexHeads(d.Heads), "doc": content})
}

// saved answers the document saved as automerge saves one.
func (a *docsAPI) saved(w http.ResponseWriter, r *http.Request) {
	_, d, done, ok := a.read(w, r, doc.ReadQuery{})
	if !ok {
		return
	}
	defer done()
	b := d.Saved
	if b == nil {
		if !a.fits(w, d) {
			return
		}
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
	var q doc.ReadQuery
	if s := r.URL.Query().Get("since"); s != "" {
		var err error
		if q.Since, err = parseHeads(s); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
	}
	_, d, done, ok := a.read(w, r, q)
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
	body, err := io.ReadAll(io.LimitReader(r.Body, a.limits.ChangesBody+1))
	if err != nil {
		writeBodyError(w, err)
		return
	}
	if int64(len(body)) > a.limits.ChangesBody {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the changes are over %d bytes: send them in several requests", a.limits.ChangesBody))
		return
	}
	a.write(w, r, id, body, http.StatusOK)
}

// write applies changes as the request's and answers with their hashes.
func (a *docsAPI) write(w http.ResponseWriter, r *http.Request, id string, changes []byte, status int) bool {
	written, err := a.docs.Write(r.Context(), newAPIPeer(auth.FromContext(r.Context())), id, changes)
	if err != nil {
		a.writeDocError(w, r, err)
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
