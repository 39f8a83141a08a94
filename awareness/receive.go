package awareness

import (
	"bytes"
	"fmt"
	"slices"
)

// Receive handles an ephemeral message from p. It reports false, with no
// error, if the message is not presence: the caller relays it as it is.
func (h *Hub) Receive(p Peer, documentID string, m Message) (bool, error) {
	pm, err := parsePresence(h.dec, m.Data)
	if err != nil || pm == nil {
		return false, err
	}
	var fx effects
	h.mu.Lock()
	if err := h.withinLimits(documentID, p.ID(), m.SessionID, pm); err != nil {
		h.mu.Unlock()
		return true, err // presence, refused: never relayed as it came
	}
	h.receive(p, documentID, m, pm, &fx)
	h.mu.Unlock()
	fx.run(h)
	return true, nil
}

// withinLimits refuses an update or snapshot that would give the peer more
// channels or bytes in the document's presence than the limits allow, or
// that names a channel longer than MaxChannelNameBytes, a user id longer
// than MaxUserIDBytes, or a user id or name no store can hold (storable).
// A channel's bytes are its name's, its value's and its clock's session's
// (up to 256 bytes from the peer, 23 more for a write the server made):
// the hub holds all three, and its tombstone's session too. The caller
// holds h.mu.
func (h *Hub) withinLimits(documentID, peer, session string, pm *presenceMessage) error {
	var user []byte
	switch pm.Type {
	case TypeUpdate:
		if len(pm.Channel) > MaxChannelNameBytes {
			return h.refuse(refusedName, "%w: a channel name of %d bytes, over the limit of %d", ErrPresenceLimit, len(pm.Channel), MaxChannelNameBytes)
		}
		if pm.Channel == ChannelUser {
			user = pm.Value
		}
	case TypeSnapshot:
		for ch := range pm.State {
			if len(ch) > MaxChannelNameBytes {
				return h.refuse(refusedName, "%w: a channel name of %d bytes, over the limit of %d", ErrPresenceLimit, len(ch), MaxChannelNameBytes)
			}
		}
		user = pm.State[ChannelUser]
	default:
		return nil
	}
	// A shorter value's id is short too, and text holding a NUL has a
	// zero byte in its CBOR: the common case (no user channel) decodes
	// nothing.
	if len(user) > MaxUserIDBytes || bytes.IndexByte(user, 0) >= 0 {
		id, name := userIDFrom(user, ""), userNameFrom(user)
		switch {
		case len(id) > MaxUserIDBytes:
			return h.refuse(refusedUser, "%w: a user id of %d bytes, over the limit of %d", ErrPresenceLimit, len(id), MaxUserIDBytes)
		case !storable(id):
			return h.refuse(refusedUser, "%w: a user id holding a NUL character", ErrPresenceLimit)
		case !storable(name):
			return h.refuse(refusedUserName, "%w: a user name holding a NUL character", ErrPresenceLimit)
		}
	}
	var held map[string]Register
	size := 0
	if r := h.rooms[documentID]; r != nil {
		if p := r.state[peer]; p != nil {
			held, size = p.Channels, len(p.Gone.Session)
		}
	}
	channels := len(held)
	for ch, reg := range held {
		size += len(ch) + len(reg.Value) + len(reg.Clock.Session)
	}
	add := func(ch string, v []byte) {
		if old, ok := held[ch]; ok {
			size -= len(old.Value) + len(old.Clock.Session)
		} else {
			channels++
			size += len(ch)
		}
		size += len(v) + len(session)
	}
	if pm.Type == TypeUpdate {
		add(pm.Channel, pm.Value)
	} else {
		for ch, v := range pm.State {
			add(ch, v)
		}
	}
	if channels > h.cfg.MaxChannels {
		return h.refuse(refusedChannels, "%w: %d channels for one peer, over the limit of %d", ErrPresenceLimit, channels, h.cfg.MaxChannels)
	}
	if size > h.cfg.MaxStateBytes {
		return h.refuse(refusedBytes, "%w: %d bytes of presence (channel names, values and clocks' sessions) for one peer, over the limit of %d", ErrPresenceLimit, size, h.cfg.MaxStateBytes)
	}
	return nil
}

// Why a presence message was refused (tandem_presence_refused_total).
const (
	refusedName     = "channel_name"
	refusedUser     = "user_id"
	refusedUserName = "user_name"
	refusedChannels = "channels"
	refusedBytes    = "bytes"
)

// refuse counts a refusal and returns its error.
func (h *Hub) refuse(reason, format string, args ...any) error {
	h.metrics.refused.WithLabelValues(reason).Inc()
	return fmt.Errorf(format, args...)
}

func (h *Hub) receive(p Peer, documentID string, m Message, pm *presenceMessage, fx *effects) {
	pi, r := h.join(p, documentID, fx)
	now := h.cfg.Now()
	pi.lastHeard = now
	if pi.session != m.SessionID || pi.era == 0 {
		// A session new here: after everything known of the peer.
		pi.session, pi.era = m.SessionID, max(now.UnixMilli(), pi.clock.Era+1)
	}
	c := Clock{Era: pi.era, Count: m.Count, Session: m.SessionID}
	if pi.clock.Less(c) {
		pi.clock = c
	}
	r.feed.heard(pi.id)
	// What the message changed is forwarded together (schedule).
	var buf [8]string
	changed := buf[:0]
	if pm.Type != TypeGoodbye && !r.present[pi.id] {
		r.present[pi.id] = true
		h.histMark(pi.user)
		if pi.identity != nil { // the verified identity, before anything else
			if _, ok := r.state.Set(pi.id, ChannelUser, Register{Clock: h.serverClock(pi), Value: pi.identity.value()}); ok {
				changed = append(changed, ChannelUser)
			}
		}
	}
	switch pm.Type {
	case TypeHeartbeat:
		changed = append(changed, heartbeatChannel)
	case TypeGoodbye:
		if r.state.Remove(pi.id, c) {
			h.sendGoodbye(r, pi.id)
		}
		delete(r.typing, pi.id)
		delete(r.present, pi.id)
		h.histMark(pi.user)
	case TypeUpdate:
		if h.set(r, pi, pm.Channel, Register{Clock: c, Value: pm.Value}, fx) {
			changed = append(changed, pm.Channel)
		}
	case TypeSnapshot:
		for ch, v := range pm.State {
			if h.set(r, pi, ch, Register{Clock: c, Value: v}, fx) && !slices.Contains(changed, ch) {
				changed = append(changed, ch)
			}
		}
	}
	if len(changed) > 0 {
		h.schedule(r, pi.id, changed...)
	}
	h.metrics.received.WithLabelValues(pm.Type).Inc()
	h.refreshPeer(pi, fx)
}

// set writes one channel of a peer and reports whether its value changed
// (the caller schedules it).
func (h *Hub) set(r *room, pi *peerInfo, channel string, reg Register, fx *effects) (changed bool) {
	if channel == ChannelUser && pi.identity != nil {
		reg.Value = pi.identity.value() // a verified peer cannot rename itself
	}
	took, changed := r.state.Set(pi.id, channel, reg)
	if !took {
		h.metrics.updates.WithLabelValues("stale").Inc()
		return false
	}
	switch channel {
	case ChannelTyping:
		if truthy(reg.Value) {
			r.typing[pi.id] = h.cfg.Now().Add(h.cfg.TypingTimeout) // renewed even if unchanged
		} else {
			delete(r.typing, pi.id)
		}
	case ChannelStatus:
		pi.clientAway = bytes.Equal(reg.Value, cborAway)
	case ChannelUser:
		if changed {
			h.setUser(pi, userIDFrom(reg.Value, pi.id), fx)
		}
	}
	if !changed {
		h.metrics.updates.WithLabelValues("unchanged").Inc()
		return false
	}
	if channel != ChannelStatus {
		pi.lastActive = h.cfg.Now()
	}
	return true
}
