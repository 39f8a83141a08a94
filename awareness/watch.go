package awareness

import (
	"context"
	"time"
)

// watcher is one subscription list: a set of user ids and a callback.
type watcher struct {
	users []string
	fn    func(UserStatus)
}

// Watch subscribes fn to status changes of the given users (a contact
// list), on any document or none. It returns the users' current statuses
// and a function that ends the subscription. fn is called with the hub's
// lock held, in the order changes happen, and must only queue.
func (h *Hub) Watch(ctx context.Context, userIDs []string, fn func(UserStatus)) ([]UserStatus, func()) {
	w := &watcher{users: userIDs, fn: fn}
	h.mu.Lock()
	initial := make([]UserStatus, 0, len(userIDs))
	var fresh []string
	for _, id := range userIDs {
		set := h.watchers[id]
		if set == nil {
			set = make(map[*watcher]struct{})
			h.watchers[id] = set
			fresh = append(fresh, id)
		}
		set[w] = struct{}{}
		initial = append(initial, h.userStatus(id))
	}
	if h.cfg.Replicator != nil && len(fresh) > 0 {
		h.cfg.Replicator.WatchUsers(fresh, true)
	}
	h.mu.Unlock()
	h.fillLastSeen(ctx, initial)
	stop := func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		var gone []string
		for _, id := range w.users {
			delete(h.watchers[id], w)
			if len(h.watchers[id]) == 0 {
				delete(h.watchers, id)
				gone = append(gone, id)
				if u := h.users[id]; u != nil && u.peers.Len() == 0 && u.remote.Len() == 0 {
					delete(h.users, id)
				}
			}
		}
		if h.cfg.Replicator != nil && len(gone) > 0 {
			h.cfg.Replicator.WatchUsers(gone, false)
		}
	}
	return initial, stop
}

// userStatus is what the hub knows of a user now; the caller holds mu.
func (h *Hub) userStatus(id string) UserStatus {
	us := UserStatus{UserID: id, Status: StatusOffline}
	if u := h.users[id]; u != nil {
		us.Status = u.status
		if u.status == StatusOffline {
			us.LastSeen = u.lastSeen
		}
	}
	return us
}

// fillLastSeen reads the stored last-seen time of offline users the hub
// has not seen go offline itself.
func (h *Hub) fillLastSeen(ctx context.Context, list []UserStatus) {
	if h.cfg.LastSeen == nil {
		return
	}
	for i := range list {
		if list[i].Status != StatusOffline || !list[i].LastSeen.IsZero() {
			continue
		}
		at, ok, err := h.cfg.LastSeen.LastSeen(ctx, list[i].UserID)
		if err != nil {
			h.log.Warn("presence: read last seen", "user", list[i].UserID, "err", err)
			continue
		}
		if ok {
			list[i].LastSeen = at
		}
	}
}

// PeerView is one live peer of a document, for the REST API.
type PeerView struct {
	PeerID       string         `json:"peerId"`
	UserID       string         `json:"userId"`
	Name         any            `json:"name,omitempty"`
	Color        any            `json:"color,omitempty"`
	Status       Status         `json:"status"`
	Cursor       any            `json:"cursor,omitempty"`
	Selection    any            `json:"selection,omitempty"`
	Typing       bool           `json:"typing"`
	LastActivity time.Time      `json:"lastActivity"`
	State        map[string]any `json:"state"`
}

// DocumentPresence returns the live peers of a document.
func (h *Hub) DocumentPresence(documentID string) []PeerView {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.rooms[documentID]
	if r == nil {
		return []PeerView{}
	}
	out := []PeerView{}
	for id, p := range r.state {
		pi := h.peers[id]
		if pi == nil || !p.Visible() {
			continue
		}
		v := PeerView{PeerID: id, UserID: pi.user, Status: pi.status, LastActivity: pi.lastActive, State: map[string]any{}}
		for ch := range p.Channels {
			if raw, ok := p.Get(ch); ok {
				v.State[ch] = decodeValue(raw)
			}
		}
		// Name and color are the user channel's: a verified peer's is its
		// token's, which the peer cannot write. A peer without one may
		// also say its color in a channel of that name.
		if u, ok := v.State[ChannelUser].(map[string]any); ok {
			v.Name, v.Color = u["name"], u["color"]
		}
		if c, ok := v.State["color"]; ok && v.Color == nil && pi.identity == nil {
			v.Color = c
		}
		v.Cursor, v.Selection = v.State["cursor"], v.State["selection"]
		if raw, ok := p.Get(ChannelTyping); ok {
			v.Typing = truthy(raw)
		}
		out = append(out, v)
	}
	return out
}

// UserView is a user's presence across documents, for the REST API.
type UserView struct {
	UserStatus
	Documents []string `json:"documents"`
}

// UserPresence returns a user's status, last-seen time and open documents.
func (h *Hub) UserPresence(ctx context.Context, userID string) UserView {
	h.mu.Lock()
	v := UserView{UserStatus: h.userStatus(userID), Documents: []string{}}
	if u := h.users[userID]; u != nil {
		seen := map[string]bool{}
		for _, pi := range u.peers.All() {
			for d := range pi.docs.Keys() {
				if !seen[d] {
					seen[d] = true
					v.Documents = append(v.Documents, d)
				}
			}
		}
	}
	h.mu.Unlock()
	if v.Status == StatusOffline && h.cfg.Directory != nil {
		// Not seen here; maybe connected to another node.
		if s, err := h.cfg.Directory.UserStatus(ctx, userID); err != nil {
			h.log.Warn("presence: directory", "user", userID, "err", err)
		} else if s != StatusOffline {
			v.Status = s
		}
	}
	list := []UserStatus{v.UserStatus}
	if v.Status == StatusOffline {
		h.fillLastSeen(ctx, list)
	}
	v.UserStatus = list[0]
	return v
}

// UserPresenceIn returns a user's presence as the documents can admits
// show it: those of them the user is in, and the best status of the
// user's tabs in them (offline in none), with no last-seen. It is what a
// caller who may see the user only where they share a document is told:
// the user's overall status would tell of documents the caller cannot
// read. can is called with the hub's lock held and must not block.
func (h *Hub) UserPresenceIn(userID string, can func(documentID string) bool) UserView {
	v := UserView{UserStatus: UserStatus{UserID: userID, Status: StatusOffline}, Documents: []string{}}
	h.mu.Lock()
	defer h.mu.Unlock()
	u := h.users[userID]
	if u == nil {
		return v
	}
	seen := map[string]bool{}
	for _, pi := range u.peers.All() {
		in := false
		for d := range pi.docs.Keys() {
			if !can(d) {
				continue
			}
			in = true
			if !seen[d] {
				seen[d] = true
				v.Documents = append(v.Documents, d)
			}
		}
		if in && pi.status.rank() > v.Status.rank() {
			v.Status = pi.status
		}
	}
	return v
}

// Directory tells a user's status across the cluster.
type Directory interface {
	UserStatus(ctx context.Context, userID string) (Status, error)
}
