package awareness

import "time"

// room is the presence of one document.
type room struct {
	id     string
	state  State
	feed   *Feed                // its local members, and what they are sent (feed.go)
	typing map[string]time.Time // peer id → when its typing flag expires
	// Coalescing: sent holds the (peer, channel) pairs forwarded in the
	// peer's current period; pending those waiting for its trailing edge.
	// changed is the tick (of ticks) in which each pending peer last
	// changed; held counts the ticks the pending peers whose period ended
	// with a stale value have waited for a fresher one (flush).
	sent    map[string]map[string]struct{}
	pending map[string]map[string]struct{}
	changed map[string]uint64
	held    map[string]int
	// present holds the peers that speak presence here and have not said
	// goodbye: the server keeps their status channel, so a peer with an
	// empty state is still seen.
	present map[string]bool
	// guessed holds the remote peers this node removed on a guess (their
	// node died, went silent or left them out of a roster): the tombstone
	// it wrote gives way to the peer's own node, which knows better.
	guessed map[string]bool
	// ticks counts the hub's ticks seen by the room (flush); leads the
	// leading edges forwarded in the current tick (schedule).
	ticks uint64
	leads int
}

func newRoom(h *Hub, id, session string) *room {
	r := &room{
		id:      id,
		state:   State{},
		typing:  make(map[string]time.Time),
		sent:    make(map[string]map[string]struct{}),
		pending: make(map[string]map[string]struct{}),
		changed: make(map[string]uint64),
		held:    make(map[string]int),
		present: make(map[string]bool),
		guessed: make(map[string]bool),
	}
	r.feed = newFeed(h, r, session)
	return r
}

func (r *room) drop(peer string) {
	r.feed.leave(peer)
	delete(r.typing, peer)
	delete(r.sent, peer)
	delete(r.pending, peer)
	delete(r.changed, peer)
	delete(r.held, peer)
	delete(r.present, peer)
}
