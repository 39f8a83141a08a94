package doc

import (
	"encoding/binary"
	"strings"
	"time"

	"github.com/automerge/automerge-go"
)

// Fan-out: how a change reaches the other peers of a room.
//
// In a document being typed into, nearly every message a peer sends is an
// acknowledgement (no changes, nothing needed: its new heads), and nearly
// every peer stands where the room's last message left it. For such a peer
// the room knows exactly which heads it will have once it has read what it
// was sent (member.expect), and needs no automerge sync state to serve it:
//
//   - its acknowledgements need no answer and change nothing: they are
//     recognised from the parsed message, without automerge, in a short
//     critical section (acknowledge);
//   - a change reaches it as a sync message the room builds itself from
//     the changes since those heads, made once for every peer that stands
//     at the same heads and, by a Peer that can (SharedSender), encoded
//     once (broadcast).
//
// Peers whose heads the room does not know (a new peer, one that sent
// changes or asked for some, one automerge answered) go through their
// automerge sync state as before, until a message shows them level again.
//
// Under sustained change, fan-outs are batched: the first change in a
// quiet room goes out at once; later ones within the window of the last
// fan-out wait for the window's end and go out together, one message per
// peer carrying everything new. The author of a change is answered at once
// either way. The window is Config.SyncWindow, widened while the room's
// peers take longer than that to acknowledge what they are sent (up to
// maxSyncWindow): sending faster than the peers can read only queues work
// on them, and their latency grows with the queue.

// maxSyncWindow bounds the widened window.
const maxSyncWindow = 100 * time.Millisecond

// SharedSync is one sync message for several peers: made once. A Peer that
// implements SharedSender may keep its encoding in Frame for the next
// peer; Frame is only touched under the room's lock.
type SharedSync struct {
	Data  []byte
	Frame any
}

// SharedSender is implemented by Peers that can send one SharedSync to
// many peers cheaper than SendSync each.
type SharedSender interface {
	SendSharedSync(documentID string, s *SharedSync)
}

// fanout sends the room's new changes to every peer that lacks them, now
// or, within SyncWindow of the last fan-out, at the window's end. The
// caller holds r.mu.
func (r *room) fanout(h *Hub) {
	if r.fanoutScheduled {
		return // the scheduled fan-out carries this change too
	}
	if wait := time.Until(r.lastFanout.Add(r.window(h))); wait > 0 {
		r.fanoutScheduled = true
		h.goAfter(wait, func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.fanoutScheduled = false
			if !r.evicted {
				r.broadcast()
			}
		})
		return
	}
	r.broadcast()
}

// broadcast sends every member what it lacks: one message built once per
// group of members at the same known heads, and automerge's message to
// the others. The caller holds r.mu.
func (r *room) broadcast() {
	r.lastFanout = time.Now()
	heads := r.doc.Heads()
	now := headsKey(heads)
	var groups map[string]*SharedSync
	for _, m := range r.members {
		if m.expect == nil {
			r.sendSync(m, heads)
			continue
		}
		if sameHeads(m.expect, heads) {
			continue // level: never a second message
		}
		key := headsKey(m.expect)
		s := groups[key]
		if s == nil {
			cs, err := r.doc.Changes(m.expect...)
			if err != nil { // heads the document lost track of: let automerge decide
				m.expect = nil
				r.sendSync(m, heads)
				continue
			}
			s = &SharedSync{Data: syncWithChanges(heads, cs)}
			if groups == nil {
				groups = make(map[string]*SharedSync)
			}
			groups[key] = s
		}
		r.sendWhenStored(outgoing{peer: m.peer, shared: s})
		m.expect = heads
		m.remember(now, r.lastFanout)
		m.whole = m.whole || m.bare // to a peer that has nothing, the whole document
	}
}

// remember notes that m was sent a message bringing it to heads (as
// headsKey) at this time, for its acknowledgement. The caller holds the room's lock.
func (m *member) remember(heads string, at time.Time) {
	if len(m.unacked) == maxUnacked {
		m.unacked = append(m.unacked[:0], m.unacked[1:]...)
	}
	m.unacked = append(m.unacked, sentFanout{heads: heads, at: at})
}

// maxUnacked bounds the fan-outs a member remembers until acknowledged
// (at the widest window, 6.4 s of them). An acknowledgement of one
// forgotten goes through automerge, which may send the member again what
// is still on its way to it.
const maxUnacked = 64

// sentFanout is a fan-out a member has not acknowledged yet: the heads it
// brought the member to, as headsKey, and when it was made.
type sentFanout struct {
	heads string
	at    time.Time
}

// window is how long fan-outs are apart under sustained change: the
// configured window, or the time the room's peers take to acknowledge a
// fan-out if that is longer (counted up to maxSyncWindow). Zero configured turns
// batching off. The caller holds r.mu.
func (r *room) window(h *Hub) time.Duration {
	w := h.cfg.SyncWindow
	if w <= 0 {
		return 0
	}
	return max(w, min(r.ackTime, maxSyncWindow))
}

// acknowledge reports whether sm, from m, is only an acknowledgement of
// what the room sent it: no changes, nothing needed, and heads that a
// fan-out brought m to (or, repeated, the heads it is known to be level
// at). Such a message needs neither automerge nor an answer; it also
// tells how long m took to read that fan-out, into the room's smoothed
// ack time. Heads the room never brought m to (a peer behind for another
// reason, one repeating a message that gets no answer) are not an
// acknowledgement: automerge's sync state takes the message. The caller
// holds r.mu.
func (r *room) acknowledge(m *member, sm *syncMessage, now time.Time) bool {
	if m.expect == nil || len(sm.changes) != 0 || len(sm.need) != 0 {
		return false
	}
	var sb strings.Builder
	for _, h := range sm.heads {
		sb.Write(h)
	}
	key := sb.String()
	for i, f := range m.unacked {
		if f.heads == key {
			r.ackTime += (now.Sub(f.at) - r.ackTime) / 8
			m.unacked = append(m.unacked[:0], m.unacked[i+1:]...)
			return true
		}
	}
	return len(m.unacked) == 0 && sm.namesExactly(m.expect)
}

// syncWithChanges is the sync message the room sends a peer whose heads it
// knows: the room's heads, nothing needed, everything up to its heads had
// (so the peer sends only changes of its own), and the changes the peer
// lacks.
func syncWithChanges(heads []automerge.ChangeHash, cs []*automerge.Change) []byte {
	b := appendHeads([]byte{syncMessageV1}, heads)
	b = append(b, 0) // need
	b = append(b, 1) // one have
	b = appendHeads(b, heads)
	b = append(b, 0) // an empty bloom filter
	b = binary.AppendUvarint(b, uint64(len(cs)))
	for _, c := range cs {
		b = appendBytes(b, c.Save())
	}
	return b
}

func headsKey(hs []automerge.ChangeHash) string {
	var sb strings.Builder
	sb.Grow(len(hs) * 32)
	for _, h := range hs {
		sb.Write(h[:])
	}
	return sb.String()
}
