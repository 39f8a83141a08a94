package awareness

import (
	"maps"
	"slices"
)

// Cluster replication. Each node owns the peers connected to it and
// publishes their presence, after coalescing, as Deltas on the document's
// channel; the other nodes merge them into the same CRDT and forward them
// to their own peers. A node that stops beating takes its peers with it
// (NodeGone), and a node that starts watching a document asks the others
// for their peers' whole state (SendState). cluster.go is the protocol.
//
// A record learned from another node is never a local connection's: a
// connection here with the same peer id gets a record of its own, its
// identity from its own token (adopt), and a connection whose peer went on
// elsewhere leaves without a word in the peer's name (Handoff).

// Delta is a change of one peer's presence in one document.
type Delta struct {
	Peer      string              `cbor:"p"`
	User      string              `cbor:"u,omitempty"`
	Registers map[string]Register `cbor:"r,omitempty"`
	Gone      Clock               `cbor:"g,omitempty"`
	Heartbeat bool                `cbor:"h,omitempty"`
}

// IsGoodbye reports whether the delta says the peer left the document.
func (d Delta) IsGoodbye() bool {
	return len(d.Registers) == 0 && !d.Heartbeat && !d.Gone.IsZero()
}

// publish sends a local peer's forwarded channels to the other nodes.
func (h *Hub) publish(r *room, peer string, channels []string, heartbeat bool) {
	pi := h.peers[peer]
	if h.cfg.Replicator == nil || pi == nil || pi.conn == nil {
		return // only the node a peer is connected to speaks for it
	}
	d := Delta{Peer: peer, User: pi.user, Heartbeat: heartbeat}
	if p := r.state[peer]; p != nil {
		d.Gone = p.Gone
		for _, ch := range channels {
			if reg, ok := p.Channels[ch]; ok {
				if d.Registers == nil {
					d.Registers = make(map[string]Register, len(channels))
				}
				d.Registers[ch] = reg
			}
		}
	}
	h.publishDelta(r.id, d)
}

// ApplyRemote merges a delta that node published for a document. Only
// documents with local peers are tracked; others are ignored.
func (h *Hub) ApplyRemote(node, documentID string, d Delta) {
	var fx effects
	h.mu.Lock()
	defer func() { h.mu.Unlock(); fx.run(h) }()
	r := h.rooms[documentID]
	if r == nil {
		return
	}
	pi := h.peers[d.Peer]
	if pi != nil && pi.conn != nil {
		return // connected here: this node is its source of truth
	}
	now := h.cfg.Now()
	if pi == nil {
		if len(d.Registers) == 0 {
			return // a goodbye or heartbeat for a peer never seen
		}
		user := d.User
		if user == "" {
			user = d.Peer
		}
		pi = &peerInfo{id: d.Peer, node: node, user: user, lastHeard: now, lastActive: now,
			status: StatusOnline}
		h.peers[pi.id] = pi
		h.userOf(pi.user).peers.Set(pi.id, pi)
	}
	pi.node, pi.lastHeard = node, now
	pi.docs.Set(documentID, struct{}{})
	if r.guessed[pi.id] && len(d.Registers) > 0 {
		// This node removed the peer on a guess; its own node says it is
		// there: that tombstone gives way.
		delete(r.state, pi.id)
		delete(r.guessed, pi.id)
	}
	// What the delta changed is forwarded together (schedule).
	var buf [8]string
	changed := buf[:0]
	for ch, reg := range d.Registers {
		if pi.clock.Less(reg.Clock) {
			pi.clock = reg.Clock
		}
		if _, ok := r.state.Set(pi.id, ch, reg); ok {
			changed = append(changed, ch)
			if ch == ChannelStatus {
				pi.status = statusFrom(reg.Value)
			}
		}
	}
	if d.Heartbeat {
		changed = append(changed, heartbeatChannel)
	}
	if !d.Gone.IsZero() {
		before := 0
		if p := r.state[pi.id]; p != nil {
			before = len(p.Channels)
		}
		if r.state.Remove(pi.id, d.Gone) {
			h.sendGoodbye(r, pi.id)
			changed = changed[:0]
		} else if p := r.state[pi.id]; len(p.Channels) < before && p.Visible() {
			// The tombstone hid values the members here still hold: the
			// goodbye that set it was lost on its way, and the peer is
			// back. They hear that goodbye now, then all it has.
			h.sendGoodbye(r, pi.id)
			changed = slices.AppendSeq(changed[:0], maps.Keys(p.Channels))
		}
	}
	if len(changed) > 0 {
		h.schedule(r, pi.id, changed...)
	}
	if p := r.state[pi.id]; p == nil || !p.Visible() {
		pi.docs.Delete(documentID)
		if pi.docs.Len() == 0 {
			h.forget(pi, &fx)
		}
	}
	h.refreshUser(pi.user, &fx)
}

// NodeAlive records a heartbeat of another node: its peers stay. A node
// that sends rosters keeps its peers by them instead, peer by peer.
func (h *Hub) NodeAlive(node string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cfg.RemoteTTL > 0 && h.rostered[node] {
		return
	}
	now := h.cfg.Now()
	for _, pi := range h.peers {
		if pi.node == node {
			pi.lastHeard = now
		}
	}
}

// NodeGone removes every peer of a node that died or left: goodbye to the
// local peers in their names, and their users offline unless connected
// elsewhere.
func (h *Hub) NodeGone(node string) {
	var fx effects
	h.mu.Lock()
	if h.hist != nil {
		h.hist.gone = append(h.hist.gone, node) // its history is ended at its last beat
	}
	// h.rostered keeps the node: a delta of its that arrives late makes
	// a peer that then expires by RemoteTTL, not one that stays for ever.
	for _, pi := range h.peers {
		if pi.conn == nil && pi.node == node {
			h.remove(pi, &fx)
		}
	}
	for id, u := range h.users {
		if u.remote.Has(node) {
			u.remote.Delete(node)
			h.refreshUser(id, &fx)
		}
	}
	h.mu.Unlock()
	fx.run(h)
}

// LocalRoster lists this node's peers visible in a document, for the
// other nodes (ApplyRoster): sent now and then, it repairs a lost leave.
func (h *Hub) LocalRoster(documentID string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.rooms[documentID]
	if r == nil {
		return nil
	}
	var out []string
	for id, p := range r.state {
		if pi := h.peers[id]; pi != nil && pi.conn != nil && p.Visible() {
			out = append(out, id)
		}
	}
	return out
}

// ApplyRoster takes another node's list of its peers visible in a
// document. Its peers here that it does not list are gone from the
// document (their leave was lost on the way): goodbye in their names.
// Those it lists are heard of. It reports whether it lists a peer this
// node has no presence of (a state lost on the way): the caller then asks
// that node for its whole presence in the document.
func (h *Hub) ApplyRoster(node, documentID string, peers []string) (missing bool) {
	var fx effects
	h.mu.Lock()
	defer func() { h.mu.Unlock(); fx.run(h) }()
	h.rostered[node] = true
	r := h.rooms[documentID]
	if r == nil {
		return false
	}
	listed := make(map[string]bool, len(peers))
	now := h.cfg.Now()
	for _, id := range peers {
		listed[id] = true
		pi := h.peers[id]
		switch {
		case pi == nil:
			missing = true
		case pi.conn != nil:
			// Connected here now (moved): this node speaks for it.
		default:
			pi.lastHeard, pi.node = now, node // it may have moved here from another node
			if p := r.state[id]; p == nil || !p.Visible() {
				missing = true
			}
		}
	}
	for id, p := range r.state {
		pi := h.peers[id]
		if pi == nil || pi.conn != nil || pi.node != node || listed[id] || !p.Visible() {
			continue
		}
		h.log.Info("presence: a remote peer missing from its node's roster", "peer", id, "node", node, "document", documentID)
		if r.state.Remove(id, h.serverClock(pi)) {
			h.sendGoodbye(r, id)
		}
		r.guessed[id] = true
		pi.docs.Delete(documentID)
		if pi.docs.Len() == 0 {
			h.forget(pi, &fx)
		}
	}
	return missing
}

// LocalState returns the whole presence of this node's peers in a
// document, for a node that has just started watching it.
func (h *Hub) LocalState(documentID string) []Delta {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.rooms[documentID]
	if r == nil {
		return nil
	}
	var out []Delta
	for id, p := range r.state {
		pi := h.peers[id]
		if pi == nil || pi.conn == nil || !p.Visible() {
			continue
		}
		d := Delta{Peer: id, User: pi.user, Gone: p.Gone, Registers: make(map[string]Register, len(p.Channels))}
		for ch, reg := range p.Channels {
			d.Registers[ch] = reg
		}
		out = append(out, d)
	}
	return out
}

// forget drops a remote peer that is visible nowhere any more.
func (h *Hub) forget(pi *peerInfo, fx *effects) {
	delete(h.peers, pi.id)
	pi.status = StatusOffline
	if u := h.users[pi.user]; u != nil {
		u.peers.Delete(pi.id)
	}
	h.refreshUser(pi.user, fx)
}

// ApplyUserStatus records the status of a user's peers on another node,
// as that node published it; StatusOffline forgets it.
func (h *Hub) ApplyUserStatus(node, userID string, s Status) {
	var fx effects
	h.mu.Lock()
	u := h.userOf(userID)
	if s == StatusOffline {
		u.remote.Delete(node)
	} else {
		u.remote.Set(node, s)
	}
	h.refreshUser(userID, &fx)
	h.mu.Unlock()
	fx.run(h)
}

// LocalUserStatuses returns the status of every user with peers on this
// node, counting only those peers: what this node says about them.
func (h *Hub) LocalUserStatuses() map[string]Status {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]Status)
	for id, u := range h.users {
		if u.local != StatusOffline {
			out[id] = u.local
		}
	}
	return out
}
