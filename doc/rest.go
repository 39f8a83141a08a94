package doc

import (
	"time"

	"github.com/automerge/automerge-go"
)

// Resting members. An automerge sync state costs a few KiB of C heap, and
// most members of a big room need none most of the time: a peer level
// with the room is served without automerge (fanout.go) until it sends
// changes or asks for some. So a member's state is made at its first use,
// and dropped once the peer has been level, with every fan-out to it
// acknowledged, for restAfter. A state made again starts from the heads
// the room knows the peer to stand at (member.expect, which fan-outs keep
// up to date), so its first message names those, not the whole history: a rested peer costs one round trip more at most, never a
// resend of the document.

// restAfter is how long a level member keeps a sync state it does not use.
const restAfter = 5 * time.Second

// syncState returns m's sync state, made now if it has none. The caller
// holds r.mu.
func (r *room) syncState(m *member) *automerge.SyncState {
	m.used = time.Now()
	if m.state != nil {
		return m.state
	}
	if m.expect != nil {
		// Made from where the room knows the peer stands, in the form
		// of a saved sync state: its shared heads.
		if ss, err := automerge.LoadSyncState(r.doc, appendHeads([]byte{0x43}, m.expect)); err == nil {
			m.state = ss
		}
	}
	if m.state == nil {
		m.state = automerge.NewSyncState(r.doc)
	}
	return m.state
}

// rest drops the sync states of members level with the room and quiet
// since before now minus restAfter.
func (r *room) rest(now time.Time) (rested int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.members {
		if m.state != nil && m.expect != nil && len(m.unacked) == 0 && now.Sub(m.used) > restAfter {
			m.state = nil
			m.unacked = nil // empty: its array goes too
			rested++
		}
	}
	return rested
}

// restMembers rests the members of every room (rest).
func (h *Hub) restMembers(now time.Time) {
	h.mu.Lock()
	rooms := make([]*room, 0, len(h.rooms))
	for _, r := range h.rooms {
		rooms = append(rooms, r)
	}
	h.mu.Unlock()
	n := 0
	for _, r := range rooms {
		n += r.rest(now)
	}
	h.rested.Add(float64(n))
}
