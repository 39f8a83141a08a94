package web

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/tandemhq/tandem/awareness"
	"github.com/tandemhq/tandem/internal/auth"
	"github.com/tandemhq/tandem/transport/wire"
)

// Presence is what the HTTP API reads of presence. *awareness.Hub
// implements it.
type Presence interface {
	DocumentPresence(documentID string) []awareness.PeerView
	UserPresence(ctx context.Context, userID string) awareness.UserView
	// UserPresenceIn is a user's presence in the documents can admits
	// only: those documents and the status there, no last-seen.
	UserPresenceIn(userID string, can func(documentID string) bool) awareness.UserView
	Watch(ctx context.Context, userIDs []string, fn func(awareness.UserStatus)) ([]awareness.UserStatus, func())
}

var _ Presence = (*awareness.Hub)(nil)

// maxWatchedUsers bounds one subscription list.
const maxWatchedUsers = 1000

// watchKeepAlive is how often an idle status stream sends a comment, so
// that proxies keep it open and a dead client is noticed.
const watchKeepAlive = 15 * time.Second

func (a *api) documentPresence(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "documentID")
	if err := wire.ValidateDocumentID(id); err != nil {
		writeError(w, http.StatusBadRequest, "invalid document id")
		return
	}
	if auth.FromContext(r.Context()).Can(id) == auth.None {
		// As on the WebSocket: a document outside the token does not exist.
		writeError(w, http.StatusNotFound, "document not found")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"documentId": id,
		"peers":      a.presence.DocumentPresence(id),
	})
}

func (a *api) userPresence(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "userID")
	if id == "" || len(id) > awareness.MaxUserIDBytes {
		writeError(w, http.StatusBadRequest, "invalid user id")
		return
	}
	grant := auth.FromContext(r.Context())
	readable := func(d string) bool { return grant.Can(d) != auth.None }
	if !grant.CanSee(id) {
		// Seen only where the caller may look: the status in the
		// documents the token can read, not the user's overall one, which
		// tells of the others, and not when they left.
		v := a.presence.UserPresenceIn(id, readable)
		if len(v.Documents) == 0 {
			// Neither a contact nor in a document the token can read:
			// whether the user exists does not leak.
			writeError(w, http.StatusNotFound, "user not found")
			return
		}
		writeJSON(w, http.StatusOK, v)
		return
	}
	v := a.presence.UserPresence(r.Context(), id)
	v.Documents = slices.DeleteFunc(v.Documents, func(d string) bool { return !readable(d) })
	writeJSON(w, http.StatusOK, v)
}

// watchPresence streams status changes of a list of users as Server-Sent
// Events: first one "status" event per user with the current status, then
// one per change. Between changes a comment keeps the stream alive. When
// the token expires an "expired" event ends the stream.
func (a *api) watchPresence(w http.ResponseWriter, r *http.Request) {
	var users []string
	seen := map[string]bool{}
	for _, u := range strings.Split(r.URL.Query().Get("users"), ",") {
		if u = strings.TrimSpace(u); len(u) > awareness.MaxUserIDBytes {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("a user id of %d bytes, over the limit of %d", len(u), awareness.MaxUserIDBytes))
			return
		}
		if u != "" && !seen[u] {
			seen[u] = true
			users = append(users, u)
		}
	}
	if len(users) == 0 || len(users) > maxWatchedUsers {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("users must list 1 to %d user ids, comma-separated", maxWatchedUsers))
		return
	}
	grant := auth.FromContext(r.Context())
	var hidden []string
	for _, u := range users {
		if !grant.CanSee(u) {
			hidden = append(hidden, u)
		}
	}
	if len(hidden) > 0 {
		writeError(w, http.StatusForbidden, fmt.Sprintf("not among the token's contacts: %s", strings.Join(hidden, ",")))
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, "streaming unsupported")
		return
	}
	done, ok := a.streams.open(w, r, len(users))
	if !ok {
		return
	}
	defer done()

	// Changes are kept newest-per-user until the writer takes them: a
	// slow client skips intermediate statuses, never the latest.
	var mu sync.Mutex
	latest := map[string]awareness.UserStatus{}
	var order []string
	wake := make(chan struct{}, 1)
	initial, stop := a.presence.Watch(r.Context(), users, func(us awareness.UserStatus) {
		mu.Lock()
		if _, queued := latest[us.UserID]; !queued {
			order = append(order, us.UserID)
		}
		latest[us.UserID] = us
		mu.Unlock()
		select {
		case wake <- struct{}{}:
		default:
		}
	})
	defer stop()

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	for _, us := range initial {
		writeEvent(w, us)
	}
	flusher.Flush()

	expired, stopExpiry := tokenExpiry(r.Context())
	defer stopExpiry()
	keepAlive := time.NewTicker(watchKeepAlive)
	defer keepAlive.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-expired:
			endExpired(w, flusher)
			return
		case <-keepAlive.C:
			fmt.Fprint(w, ": keep-alive\n\n")
		case <-wake:
			mu.Lock()
			batch := make([]awareness.UserStatus, 0, len(order))
			for _, id := range order {
				batch = append(batch, latest[id])
			}
			clear(latest)
			order = order[:0]
			mu.Unlock()
			for _, us := range batch {
				writeEvent(w, us)
			}
		}
		flusher.Flush()
	}
}

func writeEvent(w http.ResponseWriter, us awareness.UserStatus) {
	b, _ := json.Marshal(us)
	fmt.Fprintf(w, "event: status\ndata: %s\n\n", b)
}
