package doc

import (
	"time"

	"github.com/automerge/automerge-go"
)

// A member's automerge sync state. One costs a few KiB of C heap, and
// most members of a big room need none most of the time: a peer level
// with the room is served without automerge (fanout.go) until it sends
// changes or asks for some. So a member's state is made at its first use,
// and dropped once the peer has been level, with every fan-out to it
// acknowledged, for keepIdleSyncState. A state made again starts from the
// heads the room knows the peer to stand at (member.expect, which
// fan-outs keep up to date), so its first message names those, not the
// whole history: a peer whose state was dropped costs one round trip more
// at most, never a resend of the document.

// keepIdleSyncState is how long a level member keeps a sync state it does
// not use.
const keepIdleSyncState = 5 * time.Second

// savedSyncStateV1 is the type byte of a saved automerge sync state,
// followed by the shared heads (count, 32-byte hashes; appendHeads).
const savedSyncStateV1 = 0x43

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
		if ss, err := automerge.LoadSyncState(r.doc, appendHeads([]byte{savedSyncStateV1}, m.expect)); err == nil {
			m.state = ss
		}
	}
	if m.state == nil {
		m.state = automerge.NewSyncState(r.doc)
	}
	return m.state
}

// dropIdleSyncStates drops the sync states of members level with the
// room and quiet since before now minus keepIdleSyncState, and returns
// how many it dropped.
func (r *room) dropIdleSyncStates(now time.Time) (dropped int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.members {
		if m.state != nil && m.expect != nil && len(m.unacked) == 0 && now.Sub(m.used) > keepIdleSyncState {
			m.state = nil
			m.unacked = nil // empty: its array goes too
			dropped++
		}
	}
	return dropped
}

// dropIdleSyncStates drops the idle sync states of every room's members.
func (h *Hub) dropIdleSyncStates(now time.Time) {
	n := 0
	for _, r := range h.roomsNow() {
		n += r.dropIdleSyncStates(now)
	}
	h.syncStatesDropped.Add(float64(n))
}
