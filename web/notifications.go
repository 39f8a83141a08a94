package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/tandemhq/tandem/internal/auth"
	"github.com/tandemhq/tandem/web/notify"
)

// Notifications is what the notification API needs; *notify.Service
// implements it.
type Notifications interface {
	PostMany(ctx context.Context, events []notify.Event) error
	List(ctx context.Context, recipient string, o notify.ListOptions) ([]*notify.Notification, int, int64, error)
	MarkRead(ctx context.Context, recipient string, ids []int64) (int, error)
	Unread(ctx context.Context, recipient string) (int, error)
	Subscribe(user string) *notify.Subscription
}

// maxNotifyBody bounds the JSON bodies of the notification API; a batch
// of events may be larger.
const (
	maxNotifyBody      = 16 << 10
	maxNotifyBatchBody = 4 << 20
)

type notifyAPI struct {
	n       Notifications
	log     *slog.Logger
	streams *streamGate
}

// caller returns whose notifications a request is about: the token's user,
// or in open mode the user query parameter. With a token, naming another
// user is refused.
func caller(w http.ResponseWriter, r *http.Request) (string, bool) {
	q := r.URL.Query().Get("user")
	if g := auth.FromContext(r.Context()); g != nil {
		if q != "" && q != g.UserID {
			writeError(w, http.StatusForbidden, "a token reads only its own user's notifications")
			return "", false
		}
		return g.UserID, true
	}
	if q == "" || len(q) > notify.MaxIDLen {
		writeError(w, http.StatusBadRequest, "user is required: ?user=<user id> (servers with tokens take it from the token)")
		return "", false
	}
	return q, true
}

// post queues an application's event, or a JSON array of up to
// notify.MaxBatch events (all or none). A token may post to its own user;
// posting to others needs a token with the "notify" claim (a service's).
func (a *notifyAPI) post(w http.ResponseWriter, r *http.Request) {
	var raw json.RawMessage
	if err := decodeBody(r, &raw, maxNotifyBatchBody); err != nil {
		writeBodyError(w, err)
		return
	}
	var events []notify.Event
	if trimmed := bytes.TrimSpace(raw); len(trimmed) > 0 && trimmed[0] == '[' {
		if err := json.Unmarshal(raw, &events); err != nil {
			writeError(w, http.StatusBadRequest, "body must be an event or an array of events: "+err.Error())
			return
		}
	} else {
		var e notify.Event
		if err := json.Unmarshal(raw, &e); err != nil {
			writeError(w, http.StatusBadRequest, "body must be an event or an array of events: "+err.Error())
			return
		}
		events = []notify.Event{e}
	}
	if g := auth.FromContext(r.Context()); g != nil && !g.Notify {
		for i := range events {
			if events[i].Recipient != g.UserID {
				writeError(w, http.StatusForbidden, `this token may post notifications only to its own user; others need a token with "notify": true`)
				return
			}
			// A user's own token speaks for that user only.
			events[i].Actor, events[i].ActorName = g.UserID, g.Name
		}
	}
	if err := a.n.PostMany(r.Context(), events); err != nil {
		if errors.Is(err, notify.ErrBadEvent) {
			writeError(w, http.StatusBadRequest, err.Error())
		} else {
			internalError(a.log, w, r, err)
		}
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]int{"queued": len(events)})
}

func (a *notifyAPI) list(w http.ResponseWriter, r *http.Request) {
	user, ok := caller(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	o := notify.ListOptions{UnreadOnly: q.Get("unread") == "true" || q.Get("unread") == "1"}
	var err error
	if o.Limit, err = intParam(q.Get("limit"), 20, 1, 100); err == nil {
		var before int
		before, err = intParam(q.Get("before"), 0, 0, 1<<62)
		o.Before = int64(before)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	page, unread, next, err := a.n.List(r.Context(), user, o)
	if err != nil {
		internalError(a.log, w, r, err)
		return
	}
	g := auth.FromContext(r.Context())
	for i, n := range page {
		page[i] = forReader(g, n)
	}
	writeJSON(w, http.StatusOK, map[string]any{"notifications": page, "unread": unread, "next": next})
}

func (a *notifyAPI) markRead(w http.ResponseWriter, r *http.Request) {
	user, ok := caller(w, r)
	if !ok {
		return
	}
	var body struct {
		IDs []int64 `json:"ids"`
		All bool    `json:"all"`
	}
	if err := decodeBody(r, &body, maxNotifyBody); err != nil {
		writeBodyError(w, err)
		return
	}
	if !body.All && len(body.IDs) == 0 {
		writeError(w, http.StatusBadRequest, `give {"ids": [...]} or {"all": true}`)
		return
	}
	if len(body.IDs) > 1000 {
		writeError(w, http.StatusBadRequest, "at most 1000 ids at once")
		return
	}
	ids := body.IDs
	if body.All {
		ids = nil
	}
	unread, err := a.n.MarkRead(r.Context(), user, ids)
	if err != nil {
		internalError(a.log, w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]int{"unread": unread})
}

// stream is the live push channel, as Server-Sent Events: first the
// unread count, then every new notification (with its id as the event id)
// and every change of the unread count from another tab. A reconnecting
// EventSource sends Last-Event-ID (a new one may pass ?lastEventId=); the
// notifications stored since are sent first, so that none is missed across
// a reconnection.
func (a *notifyAPI) stream(w http.ResponseWriter, r *http.Request) {
	user, ok := caller(w, r)
	if !ok {
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, "streaming unsupported")
		return
	}
	done, ok := a.streams.open(w, r, 0)
	if !ok {
		return
	}
	defer done()
	// Subscribe before reading the store: what is stored after the read
	// arrives as a push, and what both deliver is dropped by id.
	sub := a.n.Subscribe(user)
	defer sub.Close()
	ctx := r.Context()
	var missed []*notify.Notification
	lastID := r.Header.Get("Last-Event-ID")
	if lastID == "" {
		lastID = r.URL.Query().Get("lastEventId") // a new EventSource cannot set the header
	}
	if last, err := strconv.ParseInt(lastID, 10, 64); err == nil && last > 0 {
		for after := last; ; {
			page, _, _, err := a.n.List(ctx, user, notify.ListOptions{After: after, Limit: 100})
			if err != nil {
				internalError(a.log, w, r, err)
				return
			}
			missed = append(missed, page...)
			if len(page) < 100 || len(missed) >= 1000 {
				break
			}
			after = page[len(page)-1].ID
		}
	}
	unread, err := a.n.Unread(ctx, user)
	if err != nil {
		internalError(a.log, w, r, err)
		return
	}

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	sse(w, "unread", "", map[string]int{"unread": unread})
	caughtUp := make(map[int64]bool, len(missed))
	for _, n := range missed {
		sub.Seen(n.ID)
		caughtUp[n.ID] = true
		sse(w, "notification", strconv.FormatInt(n.ID, 10), notify.Push{Type: "notification", Notification: forReader(auth.FromContext(ctx), n), Unread: unread})
	}
	flusher.Flush()

	// A stream ends when its token expires, as a WebSocket does; the
	// client reconnects with a fresh one.
	expired, stopExpiry := tokenExpiry(ctx)
	defer stopExpiry()
	keepAlive := time.NewTicker(watchKeepAlive)
	defer keepAlive.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-expired:
			endExpired(w, flusher)
			return
		case <-keepAlive.C:
			fmt.Fprint(w, ": keep-alive\n\n")
		case d, ok := <-sub.C():
			if !ok {
				return // the node is stopping, or this reader fell behind: the client reconnects
			}
			p, b := d.Push, d.JSON // decoded once for every stream of the user here
			id := ""
			if p.Notification != nil {
				if caughtUp[p.Notification.ID] {
					continue // pushed while it was being sent from the store
				}
				id = strconv.FormatInt(p.Notification.ID, 10)
				if shown := forReader(auth.FromContext(ctx), p.Notification); shown != p.Notification {
					b, _ = json.Marshal(notify.Push{Type: p.Type, Notification: shown, Unread: p.Unread})
				}
			}
			sseRaw(w, p.Type, id, b)
		}
		flusher.Flush()
	}
}

// forReader is a notification as the reader's token lets it be seen: a
// document the token cannot read keeps its title and id to itself.
func forReader(g *auth.Grant, n *notify.Notification) *notify.Notification {
	if g == nil || n == nil || n.Document == "" || g.Can(n.Document) != auth.None {
		return n
	}
	return n.Redacted()
}

func sse(w io.Writer, event, id string, v any) {
	b, _ := json.Marshal(v)
	sseRaw(w, event, id, b)
}

func sseRaw(w io.Writer, event, id string, data []byte) {
	if id != "" {
		fmt.Fprintf(w, "id: %s\n", id)
	}
	fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, data)
}

func decodeBody(r *http.Request, v any, limit int64) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, limit+1))
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, errSlowBody) {
			return err
		}
		return fmt.Errorf("body must be JSON of at most %d bytes: %v", limit, err)
	}
	return nil
}

func intParam(s string, def, min, max int) (int, error) {
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < min || n > max {
		return 0, fmt.Errorf("%q must be an integer from %d to %d", s, min, max)
	}
	return n, nil
}
