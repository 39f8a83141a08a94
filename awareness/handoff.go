package awareness

import "time"

// A peer that moves between nodes: a tab whose socket dropped reconnects
// to another node with its peer id.

// adopt makes p, a connection here, the peer of an id known until now as
// another node's (old). The record learned over the bus is replaced, never
// reused: p's identity comes from its own token, whatever that node said.
//
// The same user (a tab whose socket dropped, reconnecting to this node)
// keeps the peer's presence values, as a reconnect on one node does.
// Another user's values are dropped here, with a goodbye to this node's
// members, so that nothing of theirs shows in p's name, and that user is
// not taken for having left. With tokens in a cluster the transport
// refuses such a join (peer id claims): this is the last line of defence.
func (h *Hub) adopt(old *peerInfo, p Peer, now time.Time, fx *effects) *peerInfo {
	pi := newLocalPeer(p, now)
	if pi.identity == nil {
		// Open: nothing is verified, and the user is what the peer's
		// user channel said, wherever it was written.
		pi.user = old.user
	}
	if pi.user == old.user {
		pi.clock = old.clock // server writes in the peer's name go after what was seen of it
	} else {
		fx.move(old.user)
		for id := range old.docs.Keys() {
			r := h.rooms[id]
			if r == nil {
				continue
			}
			if st := r.state[old.id]; st != nil && st.Visible() {
				h.sendGoodbye(r, old.id) // not published: old is still the record, and not local
			}
			delete(r.state, old.id)
		}
	}
	h.userOf(old.user).peers.Delete(old.id)
	h.peers[pi.id] = pi
	h.userOf(pi.user).peers.Set(pi.id, pi)
	h.refreshUser(pi.user, fx)
	if old.user != pi.user {
		h.refreshUser(old.user, fx)
	}
	return pi
}

// Handoff is Leave for a connection whose peer id went on as a newer
// connection of the same user on another node (the client reconnected
// there): nothing is said in the peer's name. The peer stays, as that
// node's, in the documents this node still has members in, and its user
// is not taken for having left (no offline for it, no last-seen).
func (h *Hub) Handoff(p Peer, node string) {
	var fx effects
	h.mu.Lock()
	if pi := h.peers[p.ID()]; pi != nil && pi.conn == p && p != nil {
		h.handoff(pi, node, &fx)
	}
	h.mu.Unlock()
	fx.run(h)
}

func (h *Hub) handoff(pi *peerInfo, node string, fx *effects) {
	fx.move(pi.user)
	pi.conn, pi.node, pi.identity = nil, node, nil
	pi.lastHeard = h.cfg.Now()
	for id := range pi.docs.Keys() {
		r := h.rooms[id]
		if r == nil {
			pi.docs.Delete(id)
			continue
		}
		r.drop(pi.id)
		if st := r.state[pi.id]; st == nil || !st.Visible() {
			pi.docs.Delete(id) // a remote peer is in the documents that show it
		}
		if r.feed.empty() {
			h.dropRoom(r, fx) // forgets pi when no document shows it any more
		}
	}
	if h.peers[pi.id] == pi && pi.docs.Len() == 0 {
		h.forget(pi, fx)
	}
	h.refreshUser(pi.user, fx)
}

// RemoteUser returns the user of a peer connected to another node, as
// that node published it, if this node knows the peer. The transport uses
// it only to refuse a peer id it knows to be another user's when the
// cluster cannot be asked; it is never anyone's identity.
func (h *Hub) RemoteUser(peerID string) (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if pi := h.peers[peerID]; pi != nil && pi.conn == nil {
		return pi.user, true
	}
	return "", false
}
