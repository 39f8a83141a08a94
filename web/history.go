package web

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/tandemhq/tandem/awareness"
	"github.com/tandemhq/tandem/awareness/history"
	"github.com/tandemhq/tandem/internal/auth"
	"github.com/tandemhq/tandem/transport/wire"
)

// History is what the HTTP API reads of presence history: the stored
// intervals overlapping a window, as every node wrote them
// (history.ErrTooMany past limit). The history package's stores
// implement it.
type History interface {
	DocIntervals(ctx context.Context, doc string, from, to time.Time, limit int) ([]awareness.HistoryInterval, error)
	UserIntervals(ctx context.Context, user string, from, to time.Time, limit int) ([]awareness.HistoryInterval, error)
}

const (
	// historyDefaultWindow is the window a query without from and to
	// reads: the last day.
	historyDefaultWindow = 24 * time.Hour
	// maxHistoryWindow bounds one query's window.
	maxHistoryWindow = 31 * 24 * time.Hour
	// maxHistoryRows bounds the stored intervals one query reads; a
	// window holding more is refused with a word to narrow it.
	maxHistoryRows = 100_000
	// historyPage is the intervals one answer holds unless limit says
	// fewer; maxHistoryPage the most it may ask for.
	historyPage    = 500
	maxHistoryPage = 5000
	// historyGap is the longest absence that does not end an interval:
	// a reconnect, a move to another node.
	historyGap = 10 * time.Second
)

// historyAPI serves presence history.
type historyAPI struct {
	store History // nil: this node keeps no history
	now   func() time.Time
	log   *slog.Logger
}

// off answers a request for history on a node that keeps none.
func (a *historyAPI) off(w http.ResponseWriter) bool {
	if a.store == nil {
		writeError(w, http.StatusNotImplemented, "this server keeps no presence history")
		return true
	}
	return false
}

// docHistory answers every interval of a document's presence overlapping
// the window, a page at a time.
func (a *historyAPI) docHistory(w http.ResponseWriter, r *http.Request) {
	if a.off(w) {
		return
	}
	id, ok := a.document(w, r)
	if !ok {
		return
	}
	a.intervals(w, r, func(ctx context.Context, from, to time.Time) ([]awareness.HistoryInterval, error) {
		return a.store.DocIntervals(ctx, id, from, to, maxHistoryRows)
	})
}

// userHistory answers a user's status intervals: the user's own, or a
// contact's.
func (a *historyAPI) userHistory(w http.ResponseWriter, r *http.Request) {
	if a.off(w) {
		return
	}
	id := chi.URLParam(r, "userID")
	if id == "" || len(id) > awareness.MaxUserIDBytes {
		writeError(w, http.StatusBadRequest, "invalid user id")
		return
	}
	if !auth.FromContext(r.Context()).CanSee(id) {
		writeError(w, http.StatusNotFound, "user not found")
		return
	}
	a.intervals(w, r, func(ctx context.Context, from, to time.Time) ([]awareness.HistoryInterval, error) {
		return a.store.UserIntervals(ctx, id, from, to, maxHistoryRows)
	})
}

// docHourly answers, per hour of the window, how many users were in the
// document, the most at once, and their minutes.
func (a *historyAPI) docHourly(w http.ResponseWriter, r *http.Request) {
	if a.off(w) {
		return
	}
	id, ok := a.document(w, r)
	if !ok {
		return
	}
	from, to, ok := a.window(w, r)
	if !ok {
		return
	}
	from = from.Truncate(time.Hour)
	raw, ok := a.read(w, r, func(ctx context.Context) ([]awareness.HistoryInterval, error) {
		return a.store.DocIntervals(ctx, id, from, to, maxHistoryRows)
	})
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"documentId": id,
		"hours":      history.Hourly(history.Merge(raw, historyGap), from, to, a.now()),
	})
}

// document reads and checks the document of a request: a document
// outside the token does not exist, as on the WebSocket.
func (a *historyAPI) document(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := chi.URLParam(r, "documentID")
	if err := wire.ValidateDocumentID(id); err != nil {
		writeError(w, http.StatusBadRequest, "invalid document id")
		return "", false
	}
	if auth.FromContext(r.Context()).Can(id) == auth.None {
		writeError(w, http.StatusNotFound, "document not found")
		return "", false
	}
	return id, true
}

// window reads from and to (RFC 3339): by default the last day.
func (a *historyAPI) window(w http.ResponseWriter, r *http.Request) (from, to time.Time, ok bool) {
	q := r.URL.Query()
	to = a.now()
	if s := q.Get("to"); s != "" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			writeError(w, http.StatusBadRequest, "to must be an RFC 3339 time, such as 2026-12-05T10:00:00Z")
			return from, to, false
		}
		to = t
	}
	from = to.Add(-historyDefaultWindow)
	if s := q.Get("from"); s != "" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			writeError(w, http.StatusBadRequest, "from must be an RFC 3339 time, such as 2026-12-05T09:00:00Z")
			return from, to, false
		}
		from = t
	}
	switch {
	case !from.Before(to):
		writeError(w, http.StatusBadRequest, "from must be before to")
		return from, to, false
	case to.Sub(from) > maxHistoryWindow:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("the window from from to to may span at most %d days", maxHistoryWindow/(24*time.Hour)))
		return from, to, false
	}
	return from.UTC(), to.UTC(), true
}

// read runs a store read, answering its failure.
func (a *historyAPI) read(w http.ResponseWriter, r *http.Request, get func(context.Context) ([]awareness.HistoryInterval, error)) ([]awareness.HistoryInterval, bool) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	raw, err := get(ctx)
	switch {
	case errors.Is(err, history.ErrTooMany):
		writeError(w, http.StatusBadRequest, "the window holds too many intervals: narrow from and to")
		return nil, false
	case err != nil:
		a.log.Error("presence history: read", "path", r.URL.Path, "err", err)
		writeError(w, http.StatusInternalServerError, "internal error: the server could not read presence history")
		return nil, false
	}
	return raw, true
}

// intervals answers the merged intervals of a window, a page at a time:
// ordered by start, user and status, from after the cursor next names.
func (a *historyAPI) intervals(w http.ResponseWriter, r *http.Request, get func(ctx context.Context, from, to time.Time) ([]awareness.HistoryInterval, error)) {
	from, to, ok := a.window(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	limit := historyPage
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxHistoryPage {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("limit must be 1 to %d", maxHistoryPage))
			return
		}
		limit = n
	}
	var after *historyCursor
	if s := q.Get("after"); s != "" {
		c, err := parseHistoryCursor(s)
		if err != nil {
			writeError(w, http.StatusBadRequest, "after must be the next of an earlier answer")
			return
		}
		// The pages of one answer read one window: the first page's
		// (a window left to its default moves with the clock).
		after, from, to = &c, time.Unix(0, c.winFrom).UTC(), time.Unix(0, c.winTo).UTC()
	}
	raw, ok := a.read(w, r, func(ctx context.Context) ([]awareness.HistoryInterval, error) { return get(ctx, from, to) })
	if !ok {
		return
	}
	merged := history.Merge(raw, historyGap)
	// Raw intervals that overlap the window may merge into stretches
	// that do not (a gap bridged just before from): those are not asked.
	merged = slices.DeleteFunc(merged, func(iv history.Interval) bool {
		return !iv.From.Before(to) || (!iv.To.IsZero() && !iv.To.After(from))
	})
	// A stretch that began before the window is read only as far back as
	// the rows read reach: it is answered from the window's start, so
	// that its start, and the pages' order, do not depend on that.
	for i := range merged {
		if merged[i].From.Before(from) {
			merged[i].From = from
		}
	}
	slices.SortFunc(merged, func(a, b history.Interval) int { return cursorOf(a, from, to).compare(cursorOf(b, from, to)) })
	start := 0
	if after != nil {
		start, _ = slices.BinarySearchFunc(merged, *after, func(iv history.Interval, c historyCursor) int {
			return cursorOf(iv, from, to).compare(c)
		})
		if start < len(merged) && cursorOf(merged[start], from, to).compare(*after) == 0 {
			start++
		}
	}
	page := merged[start:min(start+limit, len(merged))]
	var next any
	if start+len(page) < len(merged) {
		next = cursorOf(page[len(page)-1], from, to).String()
	}
	writeJSON(w, http.StatusOK, map[string]any{"intervals": page, "next": next})
}

// historyCursor is where a page ended: the last interval's start, user
// and status, the order the answer is sorted by, and the window read.
type historyCursor struct {
	from           int64 // Unix nanoseconds
	user           string
	status         string
	winFrom, winTo int64 // Unix nanoseconds
}

func cursorOf(iv history.Interval, from, to time.Time) historyCursor {
	return historyCursor{from: iv.From.UnixNano(), user: iv.User, status: string(iv.Status), winFrom: from.UnixNano(), winTo: to.UnixNano()}
}

func (c historyCursor) compare(d historyCursor) int {
	switch {
	case c.from != d.from:
		return cmp.Compare(c.from, d.from)
	case c.user != d.user:
		return strings.Compare(c.user, d.user)
	}
	return strings.Compare(c.status, d.status)
}

func (c historyCursor) String() string {
	head := strconv.FormatInt(c.winFrom, 10) + "\x00" + strconv.FormatInt(c.winTo, 10) + "\x00" + strconv.FormatInt(c.from, 10)
	return base64.RawURLEncoding.EncodeToString([]byte(head + "\x00" + c.status + "\x00" + c.user))
}

func parseHistoryCursor(s string) (historyCursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return historyCursor{}, err
	}
	parts := strings.SplitN(string(b), "\x00", 5)
	if len(parts) != 5 {
		return historyCursor{}, errors.New("malformed cursor")
	}
	var n [3]int64
	for i := range n {
		if n[i], err = strconv.ParseInt(parts[i], 10, 64); err != nil {
			return historyCursor{}, err
		}
	}
	c := historyCursor{winFrom: n[0], winTo: n[1], from: n[2], status: parts[3], user: parts[4]}
	if c.winFrom >= c.winTo || time.Duration(c.winTo-c.winFrom) > maxHistoryWindow {
		return historyCursor{}, errors.New("cursor window out of range")
	}
	return c, nil
}
