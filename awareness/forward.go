package awareness

import "github.com/fxamacker/cbor/v2"

// How presence reaches the other peers.
//
// Receivers drop an ephemeral whose count is not higher than the last one
// they saw for its (senderId, sessionId). Coalescing reorders a peer's
// messages across channels (a held-back cursor goes out after a later
// typing flag), and the server speaks for peers (goodbye, status, typing
// cleared), so forwarding the peer's own clock would get messages dropped
// or poison the peer's session. Instead the hub sends every presence
// message under a session of its own per room (RelaySession, a dot and
// the room's number: Feed.session), with one counter that only grows: each
// receiver sees one ordered stream per peer and document, whatever the
// reordering. The session is the room's because a connection takes from
// each of its documents' feeds in turn (feed.go), so messages of two
// documents reach it in no order of their counts; within one feed they
// come in the order counted.
// Application ephemerals that are not presence keep their own clock and
// are relayed untouched by the document layer.

// heartbeatChannel is the pseudo-channel under which heartbeats coalesce.
const heartbeatChannel = "\x00heartbeat"

func mark(set map[string]map[string]struct{}, peer, channel string) {
	m := set[peer]
	if m == nil {
		m = make(map[string]struct{})
		set[peer] = m
	}
	m[channel] = struct{}{}
}

// schedule forwards the channels a message changed: those not forwarded
// in the peer's period go now, together (the leading edge), the others at
// the end of the period, with their newest values (the trailing edge).
// Channels changed together leave together: a snapshot is forwarded as
// one snapshot, so no receiver sees a peer's cursor before its name.
//
// A peer held at the end of its period (flush) waits for just this: its
// fresh values go at once, with whatever else it has pending.
func (h *Hub) schedule(r *room, peer string, channels ...string) {
	// Filtered in place: the callers pass channels they are done with.
	lead, trailing := channels[:0], 0
	for _, ch := range channels {
		if _, done := r.sent[peer][ch]; !done {
			lead = append(lead, ch)
			continue
		}
		mark(r.pending, peer, ch)
		r.changed[peer] = r.ticks
		trailing++
	}
	if r.held[peer] > 0 {
		for _, ch := range lead {
			mark(r.pending, peer, ch)
		}
		h.sendPending(r, peer)
		return
	}
	if len(lead) > 0 && !h.mayLead(r) {
		// The room's leading edges for this tick are spent: these wait
		// for the peer's slot, as if its leading edge had gone.
		for _, ch := range lead {
			mark(r.sent, peer, ch)
			mark(r.pending, peer, ch)
		}
		r.changed[peer] = r.ticks
		trailing += len(lead)
		lead = lead[:0]
	}
	if trailing > 0 {
		h.metrics.updates.WithLabelValues("coalesced").Add(float64(trailing))
	}
	if len(lead) == 0 {
		return
	}
	for _, ch := range lead {
		mark(r.sent, peer, ch)
	}
	h.forward(r, peer, lead)
}

// mayLead counts a leading edge against the room's share for this tick
// and says whether it may go now. A room with periods of one tick has no
// share. A longer period spreads a big room's peers over its ticks
// (flush); the share keeps leading edges to the same pace, one tick's
// worth of peers, so peers that all start moving at once (a class told
// to look at the same line) reach the room at the pace of its periods
// rather than as one flood of every peer to every member. A peer over
// the share loses nothing: its value goes at its slot, and if it is
// still moving then, its next move goes the moment it comes.
func (h *Hub) mayLead(r *room) bool {
	k := h.roomTicks(r)
	if k == 1 {
		return true
	}
	if r.leads >= (len(r.state)+k-1)/k {
		return false
	}
	r.leads++
	return true
}

// flush ends the period of the room's peers whose period ends at this
// tick. Periods last k ticks (roomTicks), and each peer's ends at a tick
// of its own (its slot), so a big room sends a part of its peers at every
// tick instead of all of them at once: its members get a steady stream
// of small batches, not a flood every k ticks.
//
// A period ends with a fresh value: if a peer's newest pending change is
// older than the tick just ended, the peer is held: its next change goes
// out the moment it comes (schedule), with no wait for a tick, and only
// if none comes within holdTicks does the stale value go. A peer moving
// ten times a second is up to 100 ms behind at the end of a long period;
// held, it sends its next move as it makes it, at nearly the same pace.
// A peer that stopped sends its last value holdTicks late. Periods of
// one tick (small rooms) are never held: their pending values are at
// most a tick old.
func (h *Hub) flush(r *room, k int) {
	r.ticks++
	r.leads = 0
	ends := func(peer string) bool { return k == 1 || (r.ticks+slot(peer))%uint64(k) == 0 }
	for peer := range r.sent {
		if _, pending := r.pending[peer]; !pending && ends(peer) {
			delete(r.sent, peer)
		}
	}
	for peer := range r.pending {
		switch {
		case r.held[peer] >= holdTicks:
			// No fresher value came: the stale one goes.
		case r.held[peer] > 0:
			r.held[peer]++
			continue
		case !ends(peer):
			continue
		case r.changed[peer]+1 < r.ticks:
			r.held[peer] = 1
			continue
		}
		h.sendPending(r, peer)
	}
}

// holdTicks is how many ticks a peer held at the end of its period waits
// for a fresher value before its stale one goes (flush).
const holdTicks = 2

// sendPending forwards the channels a peer has pending, which count as
// sent in its period from now on.
func (h *Hub) sendPending(r *room, peer string) {
	chans := r.pending[peer]
	r.sent[peer] = chans
	delete(r.pending, peer)
	delete(r.changed, peer)
	delete(r.held, peer)
	list := make([]string, 0, len(chans))
	for ch := range chans {
		list = append(list, ch)
	}
	h.forward(r, peer, list)
}

// slot spreads peers over the ticks of a period: the peer id's FNV-1a
// hash, computed without allocating (it runs for every peer every tick).
func slot(peer string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(peer); i++ {
		h ^= uint64(peer[i])
		h *= 1099511628211
	}
	return h
}

// forward sends the current values of a peer's channels to the room's
// other members: an update for one channel, a snapshot for several.
func (h *Hub) forward(r *room, peer string, channels []string) {
	p := r.state[peer]
	if p == nil || !p.Visible() {
		return
	}
	var m *presenceMessage
	state := make(map[string][]byte, len(channels))
	heartbeat := false
	for _, ch := range channels {
		if ch == heartbeatChannel {
			heartbeat = true
			continue
		}
		if v, ok := p.Get(ch); ok {
			state[ch] = v
		}
	}
	h.publish(r, peer, channels, heartbeat)
	switch {
	case len(state) == 0 && heartbeat:
		m = &presenceMessage{Type: TypeHeartbeat}
	case len(state) == 0:
		return
	case len(state) == 1:
		for ch, v := range state {
			m = &presenceMessage{Type: TypeUpdate, Channel: ch, Value: v}
		}
	default:
		m = &presenceMessage{Type: TypeSnapshot, State: rawState(state), whole: len(state) == visibleChannels(p)}
	}
	r.feed.post(peer, m)
}

// visibleChannels counts the channels of p that have a value.
func visibleChannels(p *PeerState) int {
	n := 0
	for ch := range p.Channels {
		if _, ok := p.Get(ch); ok {
			n++
		}
	}
	return n
}

// sendGoodbye tells the room's other members that peer is gone.
func (h *Hub) sendGoodbye(r *room, peer string) {
	delete(r.pending, peer)
	delete(r.changed, peer)
	delete(r.held, peer)
	delete(r.sent, peer)
	h.publish(r, peer, nil, false)
	r.feed.post(peer, &presenceMessage{Type: TypeGoodbye})
}

func rawState(s map[string][]byte) map[string]cbor.RawMessage {
	out := make(map[string]cbor.RawMessage, len(s))
	for k, v := range s {
		out[k] = v
	}
	return out
}
