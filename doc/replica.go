package doc

import (
	"context"
	"errors"
	"fmt"

	"github.com/tandemhq/tandem/doc/amsync"
	"github.com/tandemhq/tandem/doc/guard"
	"github.com/tandemhq/tandem/doc/store"
)

// Applying what other nodes accepted (cluster.go speaks the protocol), and
// catching up from the store after a gap in what the bus carried.

// applyRemoteChanges applies changes that another node accepted and
// stored, if this node has the document in memory, and syncs them to the
// local peers. Changes arrive possibly twice or out of order: the log
// ignores what it has, and what misses a dependency waits in the guard's
// queue until it comes (apply.go).
func (h *Hub) applyRemoteChanges(documentID string, changes []byte) error {
	h.mu.Lock()
	r := h.rooms[documentID]
	h.mu.Unlock()
	if r == nil {
		return nil // not here: it will be loaded from the store when needed
	}
	select {
	case <-r.loaded:
	default:
		return nil // still loading: the heads exchange catches up afterwards
	}
	if r.loadErr != nil {
		return nil
	}
	_, err := r.applyRemote(h, changes)
	return err
}

// applyRemote applies the changes data holds, stored already, as
// applyStored does.
func (r *room) applyRemote(h *Hub, data []byte) (bool, error) {
	cs, err := readChanges(nil, data)
	if err != nil {
		return false, fmt.Errorf("read stored changes of %s: %w", r.id, err)
	}
	return r.applyStored(h, cs), nil
}

// A room in memory hears other nodes' changes only while the bus carries
// its document: while the room has a local peer (the bus follows only
// what this node's clients need) and Redis is reachable. Past such a gap
// the room may lack changes that other nodes stored, and nobody may be
// left to repair it by comparing heads (they may have evicted the
// document, or died). So a room that had a gap reads the store, which
// holds every acknowledged change, before it serves a peer again; what
// was stored after that read reaches it over the bus, whose new
// subscription greets the nodes that hold the document.
//
// A room without peers is such a gap, however it came to have none: its
// last peer left, or none ever joined (a message the guard refused loaded
// it, or a mention journal's takeover did). So whoever finds the room
// without peers, other than the caller whose arrival just loaded it,
// has it read the store first (arrive).

// arrive opens a gap, unless one is open already, for a caller that finds
// the room (in a cluster) without peers: the bus has not been carrying
// its document. A caller that loaded the room itself has just read the
// store, and does not call it.
func (r *room) arrive() {
	if r.publish == nil || !r.vacant.Load() {
		return
	}
	// A gap open already is read past once for all who found it: callers
	// arriving together share one read, as they did when the last peer's
	// leaving opened the gap.
	caught := r.caughtUp.Load()
	r.gaps.CompareAndSwap(caught, caught+1)
}

// Missed tells the hub that the bus may have lost messages (Redis was
// unreachable): every room in memory catches up from the store, at once
// for those with peers, at their next peer for the others.
func (h *Hub) Missed() {
	rooms := h.roomsNow()
	var busy []*room
	for _, r := range rooms {
		r.gaps.Add(1)
		r.mu.Lock()
		if len(r.members) > 0 {
			busy = append(busy, r)
		}
		r.mu.Unlock()
	}
	if len(busy) > 0 {
		h.goAfter(0, func() {
			for _, r := range busy {
				r.catchUp(context.Background(), h)
			}
		})
	}
}

// catchUp reads the store into the room if it had a gap since it last
// did. Callers wait for a catch-up under way; a store that fails leaves
// the gap for the next caller, and the room serves what it has meanwhile.
func (r *room) catchUp(ctx context.Context, h *Hub) {
	if r.gaps.Load() == r.caughtUp.Load() {
		return
	}
	r.catchMu.Lock()
	defer r.catchMu.Unlock()
	gaps := r.gaps.Load() // a gap opening from here on needs another read
	if gaps == r.caughtUp.Load() {
		return // caught up by the caller before
	}
	stored, err := h.cfg.Store.Load(context.WithoutCancel(ctx), r.id)
	if errors.Is(err, store.ErrNotFound) {
		r.caughtUp.Store(gaps)
		return
	}
	if err != nil {
		h.log.Warn("catch up from the store: serving what is in memory", "document", r.id, "err", err)
		return
	}
	var cs []guard.Change
	for _, data := range append([][]byte{stored.Snapshot}, stored.Chunks...) {
		if data == nil {
			continue
		}
		if cs, err = readChanges(cs, data); err != nil {
			h.log.Error("catch up: skipping a stored chunk that does not load", "document", r.id, "err", err)
		}
	}
	changed := r.applyStored(h, cs)
	r.caughtUp.Store(gaps)
	if changed {
		h.catchUps.Inc()
	}
}

// Heads returns the heads of a document in memory on this node.
func (h *Hub) Heads(documentID string) ([][]byte, bool) {
	r := h.loadedRoom(documentID)
	if r == nil {
		return nil, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.exists {
		return nil, false
	}
	return r.heads(), true
}

// compare tells whether another node, whose heads of a document are
// theirs, has changes this node lacks (missing); if it lacks some of this
// node's instead, they are sent to the other nodes (sendSince).
func (h *Hub) compare(documentID string, theirs [][]byte) (missing bool) {
	r := h.loadedRoom(documentID)
	if r == nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.exists {
		return len(theirs) > 0
	}
	for _, b := range theirs {
		if !r.known(b) {
			return true
		}
	}
	r.sendSince(theirs)
	return false
}

// changesSince sends the other nodes what a node with these heads lacks
// (sendSince).
func (h *Hub) changesSince(documentID string, theirs [][]byte) {
	r := h.loadedRoom(documentID)
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.exists {
		r.sendSince(theirs)
	}
}

// sendSince sends the other nodes the changes after these heads (heads
// unknown here are passed over), once the store holds them: a node takes
// what another sends as stored (apply.go). The caller holds r.mu.
func (r *room) sendSince(theirs [][]byte) {
	if r.publish == nil {
		return
	}
	hs := make([]amsync.Hash, 0, len(theirs))
	for _, b := range theirs {
		if len(b) == len(amsync.Hash{}) {
			hs = append(hs, hashOf(b))
		}
	}
	if since := r.log.Since(hs); len(since) > 0 {
		r.sendWhenStored(outgoing{changes: joinChanges(r.log, since)})
	}
}
