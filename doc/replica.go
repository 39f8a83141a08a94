package doc

import (
	"context"
	"errors"
	"fmt"

	"github.com/tandemhq/tandem/doc/amsync"
	"github.com/tandemhq/tandem/doc/store"
)

// Applying what other nodes accepted (cluster.go speaks the protocol), and
// catching up from the store after a gap in what the bus carried.

// applyRemoteChanges applies changes that another node accepted, if this
// node has the document in memory, and syncs them to the local peers.
// Changes arrive possibly twice or out of order: the log ignores what it
// has, and what misses a dependency waits in the room until it comes.
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
	changed, err := r.applyRemote(h, changes)
	if changed {
		h.markDirty(r)
	}
	return err
}

func (r *room) applyRemote(h *Hub, data []byte) (bool, error) {
	cs, err := readChanges(nil, data)
	if err != nil {
		return false, fmt.Errorf("read remote changes to %s: %w", r.id, err)
	}
	return r.applyOthers(h, cs), nil
}

// maxRemoteWaiting bounds the changes from the store or other nodes a
// room keeps while they wait for a dependency; past it those that come are
// let go (the heads exchange and the store bring them again).
const maxRemoteWaiting = 4096

// holdRemote keeps changes from the store or another node that wait for
// a dependency, until it comes. The caller holds r.mu (or the room is not
// shared yet).
func (r *room) holdRemote(h *Hub, cs []change) {
	for _, c := range cs {
		if _, ok := r.remote[c.Hash]; !ok && len(r.remote) >= maxRemoteWaiting {
			h.remoteDropped.Inc()
			h.log.Warn("dropping another node's change that waits for a dependency: too many wait",
				"document", r.id, "change", fmt.Sprintf("%x", c.Hash[:8]))
			continue
		}
		if r.remote == nil {
			r.remote = make(map[amsync.Hash]change)
		}
		r.remote[c.Hash] = c
	}
}

// applyOthers adds changes that other nodes' peers made (or the store
// holds) to the log, with those of them that waited for these, and syncs
// what is new to the local peers. It reports whether the document
// changed.
func (r *room) applyOthers(h *Hub, cs []change) bool {
	r.applyMu.Lock()
	defer r.applyMu.Unlock()
	mentioned, _ := r.readMentions(h, func(t *mentionTracker) bool { return t.needsCount() }, false)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.evicted {
		return false
	}
	if r.mentions != nil {
		r.mentions.count(mentioned) // local peers' pending changes are theirs
	}
	for _, c := range r.remote {
		cs = append(cs, c)
	}
	clear(r.remote)
	added, waiting := addChanges(r.log, cs)
	r.holdRemote(h, waiting)
	if len(added) == 0 {
		return false
	}
	// The guard's ledger follows what other nodes' peers wrote, so that
	// their next change here continues their sequence.
	r.record(added)
	r.exists = true
	if r.mentions != nil {
		r.mentions.refresh() // mentions from other nodes are theirs to report
	}
	r.dirty = true
	r.fanout(h, nil)
	r.maybeSave(h, false)
	return true
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
	var cs []change
	for _, data := range append([][]byte{stored.Snapshot}, stored.Chunks...) {
		if data == nil {
			continue
		}
		if cs, err = readChanges(cs, data); err != nil {
			h.log.Error("catch up: skipping a stored chunk that does not load", "document", r.id, "err", err)
		}
	}
	changed := r.applyOthers(h, cs)
	r.caughtUp.Store(gaps)
	if changed {
		h.catchUps.Inc()
		h.markDirty(r)
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

// compare tells how another node's heads of a document relate to this
// node's copy: whether that node has changes this one lacks (missing), and
// the changes it lacks from this one (behind), if any. A nil behind with
// missing false means both are level, or the document is not here.
func (h *Hub) compare(documentID string, theirs [][]byte) (missing bool, behind []byte) {
	r := h.loadedRoom(documentID)
	if r == nil {
		return false, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.exists {
		return len(theirs) > 0, nil
	}
	hs := make([]amsync.Hash, 0, len(theirs))
	for _, b := range theirs {
		if !r.known(b) {
			return true, nil
		}
		hs = append(hs, hashOf(b))
	}
	since := r.log.Since(hs)
	if len(since) == 0 {
		return false, nil
	}
	return false, joinChanges(r.log, since)
}

// changesSince returns what a node with these heads lacks: the changes
// after them (heads unknown here are passed over).
func (h *Hub) changesSince(documentID string, theirs [][]byte) []byte {
	r := h.loadedRoom(documentID)
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.exists {
		return nil
	}
	hs := make([]amsync.Hash, 0, len(theirs))
	for _, b := range theirs {
		if len(b) == len(amsync.Hash{}) {
			hs = append(hs, hashOf(b))
		}
	}
	since := r.log.Since(hs)
	if len(since) == 0 {
		return nil
	}
	return joinChanges(r.log, since)
}
