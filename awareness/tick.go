package awareness

import "time"

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
		h.flush(r, h.roomTicks(r))
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
			if h.cfg.RemoteTTL > 0 && h.rostered[pi.node] && now.Sub(pi.lastHeard) > h.cfg.RemoteTTL && h.hearsAll(pi) {
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

// hearsAll reports whether this node hears every document of a remote
// peer (Replicator.Hears).
func (h *Hub) hearsAll(pi *peerInfo) bool {
	if h.cfg.Replicator == nil {
		return true // remote peers given by hand, as tests do
	}
	for doc := range pi.docs.Keys() {
		if !h.cfg.Replicator.Hears(doc) {
			return false
		}
	}
	return true
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
