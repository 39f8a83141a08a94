package awareness

import (
	"bytes"
	"context"
	"time"

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

// LastSeenStore keeps when each user was last seen, written when the user
// goes offline (never per heartbeat). lastseen.Bolt and lastseen.Postgres
// implement it.
type LastSeenStore interface {
	SaveLastSeen(ctx context.Context, userID string, at time.Time) error
	LastSeen(ctx context.Context, userID string) (time.Time, bool, error)
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

// effects are what a locked section decided to do once the lock is
// released: store last-seen times.
type effects struct {
	lastSeen []UserStatus
	// moved holds users whose peer here went on as a connection on
	// another node: if this node loses sight of them, they were not seen
	// leaving, and no last-seen is stored.
	moved map[string]bool
	// now dispatches at once, ending a send window (a tick's flush).
	now bool
}

func (fx *effects) move(userID string) {
	if fx.moved == nil {
		fx.moved = make(map[string]bool)
	}
	fx.moved[userID] = true
}

func (fx *effects) run(h *Hub) {
	if fx.now {
		h.dispatchNow()
	} else {
		h.dispatch()
	}
	for _, us := range fx.lastSeen {
		h.seen.add(us) // stored by the last-seen writer (lastseen.go), off this path
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

// Tick forwards the trailing edge of coalesced updates and clears expired
// typing flags; once per Config.Sweep it also applies the peers' TTLs and
// the status changes time makes (away after AwayAfter). What a peer says
// changes its status at once (receive).
func (h *Hub) Tick() {
	var fx effects
	h.mu.Lock()
	now := h.cfg.Now()
	if now.Sub(h.swept) >= h.cfg.Sweep {
		h.swept = now
		h.sweep(now, &fx)
	}
	for _, r := range h.rooms {
		for peer, until := range r.typing {
			if now.Before(until) {
				continue
			}
			delete(r.typing, peer)
			if pi := h.peers[peer]; pi != nil {
				r.state.Set(peer, ChannelTyping, Register{Clock: h.serverClock(pi), Value: cborFalse})
				h.schedule(r, peer, ChannelTyping)
			}
		}
		if h.flush(r, h.roomTicks(r)) {
			fx.now = true // trailing edges, which waited their period
		}
	}
	h.mu.Unlock()
	fx.run(h)
}

// sweep removes the peers silent past their TTL and makes the others'
// status what time made it.
func (h *Hub) sweep(now time.Time, fx *effects) {
	for _, pi := range h.peers {
		if pi.conn == nil {
			// A remote peer: its node's rosters keep it (ApplyRoster),
			// its node's death ends it (NodeGone).
			if h.cfg.RemoteTTL > 0 && h.rostered[pi.node] && now.Sub(pi.lastHeard) > h.cfg.RemoteTTL {
				h.log.Info("presence: remote peer unheard of past the remote TTL", "peer", pi.id, "node", pi.node)
				h.metrics.expired.Inc()
				h.remove(pi, fx)
			}
			continue
		}
		if now.Sub(pi.lastHeard) > h.cfg.TTL {
			h.log.Info("presence: peer silent past its TTL", "peer", pi.id)
			h.metrics.expired.Inc()
			h.remove(pi, fx)
			continue
		}
		h.refreshPeer(pi, fx)
	}
}

// roomTicks is how many ticks a room's coalescing period lasts: one more
// for every Config.RoomTickPeers peers in it, up to Config.MaxRoomTick.
// A peer's channel goes out at most twice a period (its leading and
// trailing edge), once when it changes all the time, so what a big room
// sends grows with its size, not with its square; the newest value still
// wins, so what is sent stays fresh.
func (h *Hub) roomTicks(r *room) int {
	n := 1 + len(r.state)/h.cfg.RoomTickPeers
	return max(1, min(n, int(h.cfg.MaxRoomTick/h.cfg.Tick)))
}
