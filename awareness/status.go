package awareness

import (
	"bytes"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tandemhq/tandem/internal/smallmap"
)

// Status is a peer's or a user's presence status.
type Status string

const (
	StatusOnline  Status = "online"  // connected and active
	StatusAway    Status = "away"    // connected, idle or said so
	StatusOffline Status = "offline" // disconnected or silent past its TTL
)

func (s Status) rank() int {
	switch s {
	case StatusOnline:
		return 2
	case StatusAway:
		return 1
	}
	return 0
}

// statusFrom reads a status channel value: away, or else online.
func statusFrom(v []byte) Status {
	if s, ok := decodeValue(v).(string); ok && Status(s) == StatusAway {
		return StatusAway
	}
	return StatusOnline
}

// userInfo aggregates the tabs of one user.
type userInfo struct {
	id       string
	peers    smallmap.Map[string, *peerInfo] // by peer id
	remote   smallmap.Map[string, Status]    // node → the user's status there (cluster)
	status   Status                          // aggregate: the best of peers and remote
	local    Status                          // the best of the peers connected here
	lastSeen time.Time                       // when the user went offline, if it did here
}

// UserStatus is a user's aggregate status as watchers receive it.
type UserStatus struct {
	UserID   string    `json:"userId"`
	Status   Status    `json:"status"`
	LastSeen time.Time `json:"lastSeen,omitzero"`
}

func (h *Hub) userOf(id string) *userInfo {
	u := h.users[id]
	if u == nil {
		u = &userInfo{id: id, status: StatusOffline, local: StatusOffline}
		h.users[id] = u
	}
	return u
}

// refreshPeer recomputes a peer's status and, when it changed, writes it
// into the status channel of every document the peer is visible in.
func (h *Hub) refreshPeer(pi *peerInfo, fx *effects) {
	now := h.cfg.Now()
	status, value := StatusOnline, cborOnline
	if pi.clientAway || now.Sub(pi.lastActive) >= h.cfg.AwayAfter {
		status, value = StatusAway, cborAway
	}
	for id := range pi.docs.Keys() {
		r := h.rooms[id]
		if !r.present[pi.id] {
			continue
		}
		if v, ok := r.state.peer(pi.id).Get(ChannelStatus); ok && bytes.Equal(v, value) {
			continue
		}
		if _, changed := r.state.Set(pi.id, ChannelStatus, Register{Clock: h.serverClock(pi), Value: value}); changed {
			h.schedule(r, pi.id, ChannelStatus)
		}
	}
	if status != pi.status {
		pi.status = status
		h.refreshUser(pi.user, fx)
	}
}

// setUser moves a peer to another user id (its user channel changed).
func (h *Hub) setUser(pi *peerInfo, userID string, fx *effects) {
	if userID == pi.user {
		return
	}
	old := pi.user
	h.userOf(old).peers.Delete(pi.id)
	pi.user = userID
	h.userOf(userID).peers.Set(pi.id, pi)
	h.refreshUser(old, fx)
	h.refreshUser(userID, fx)
}

// refreshUser recomputes a user's aggregate status: online if any tab is,
// else away if any tab is connected, else offline.
func (h *Hub) refreshUser(id string, fx *effects) {
	h.histMark(id) // a tab came, went or changed status: the user's history may change
	u := h.userOf(id)
	status, local := StatusOffline, StatusOffline
	for _, pi := range u.peers.All() {
		if pi.status.rank() > status.rank() {
			status = pi.status
		}
		if pi.conn != nil && pi.status.rank() > local.rank() {
			local = pi.status
		}
	}
	for _, s := range u.remote.All() {
		if s.rank() > status.rank() {
			status = s
		}
	}
	if local != u.local {
		u.local = local
		if h.cfg.Replicator != nil {
			h.cfg.Replicator.PublishUserStatus(id, local)
		}
	}
	idle := u.peers.Len() == 0 && u.remote.Len() == 0 && len(h.watchers[id]) == 0
	if status == u.status {
		if idle {
			delete(h.users, id)
		}
		return
	}
	u.status = status
	us := UserStatus{UserID: id, Status: status}
	if status == StatusOffline && !fx.moved[id] {
		u.lastSeen = h.cfg.Now()
		us.LastSeen = u.lastSeen
		fx.lastSeen = append(fx.lastSeen, us)
	}
	for w := range h.watchers[id] {
		w.fn(us) // under the lock, so that watchers see changes in order
	}
	if idle {
		delete(h.users, id)
	}
}

// userIDFrom reads the id of a user channel value ({id: "..."} or a plain
// string); a peer without one is its own user.
func userIDFrom(v []byte, fallback string) string {
	switch x := decodeValue(v).(type) {
	case string:
		if x != "" {
			return x
		}
	case map[string]any:
		if id, ok := x["id"].(string); ok && id != "" {
			return id
		}
	}
	return fallback
}

// userNameFrom reads the name of a user channel value, if it has one.
func userNameFrom(v []byte) string {
	if u, ok := decodeValue(v).(map[string]any); ok {
		if n, ok := u["name"].(string); ok {
			return n
		}
	}
	return ""
}

// storable reports whether a user id or name is text every store of
// presence can hold: UTF-8 without NUL (PostgreSQL's text refuses NUL).
func storable(s string) bool {
	return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}
