package doc

import (
	"context"
	"errors"
	"fmt"

	"github.com/automerge/automerge-go"
)

// Applying what other nodes accepted (cluster.go speaks the protocol), and
// catching up from the store after a gap in what the bus carried.

// applyRemoteChanges applies changes that another node accepted, if this
// node has the document in memory, and syncs them to the local peers.
// Changes arrive possibly twice or out of order: automerge ignores what it
// has and holds what misses a dependency until the dependency comes.
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
	return r.applyOthers(h, func(d *automerge.Doc) error {
		// Changes or a whole document, both read by LoadIncremental; never
		// Doc.Apply of what LoadChanges read (see loadChanges).
		if err := loadChanges(d, data); err != nil {
			return fmt.Errorf("apply remote changes to %s: %w", r.id, err)
		}
		return nil
	})
}

// applyOthers applies, with apply, changes that other nodes' peers made,
// and syncs what is new to the local peers. It reports whether the
// document changed.
func (r *room) applyOthers(h *Hub, apply func(*automerge.Doc) error) (bool, error) {
	r.applyMu.Lock()
	defer r.applyMu.Unlock()
	mentioned, _ := r.readMentions(func(t *mentionTracker) bool { return t.needsCount() }, false)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.evicted {
		return false, nil
	}
	before := r.doc.Heads()
	if r.mentions != nil {
		r.mentions.count(mentioned) // local peers' pending changes are theirs
	}
	if err := apply(r.doc); err != nil {
		return false, err
	}
	if sameHeads(before, r.doc.Heads()) {
		return false, nil
	}
	// The guard's ledger follows what other nodes' peers wrote, so that
	// their next change here continues their sequence.
	_, err := r.ledger.recordSince(r.doc, before)
	r.exists = true
	if r.mentions != nil {
		r.mentions.refresh() // mentions from other nodes are theirs to report
	}
	r.dirty = true
	r.fanout(h)
	if err != nil {
		return true, fmt.Errorf("read remote changes to %s: %w", r.id, err)
	}
	return true, nil
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
	if errors.Is(err, ErrNotFound) {
		r.caughtUp.Store(gaps)
		return
	}
	if err != nil {
		h.log.Warn("catch up from the store: serving what is in memory", "document", r.id, "err", err)
		return
	}
	changed, err := r.applyOthers(h, func(d *automerge.Doc) error {
		for _, data := range append([][]byte{stored.Snapshot}, stored.Chunks...) {
			if data == nil {
				continue
			}
			if err := d.LoadIncremental(data); err != nil {
				h.log.Error("catch up: skipping a stored chunk that does not load", "document", r.id, "err", err)
			}
		}
		return nil
	})
	r.caughtUp.Store(gaps)
	if changed {
		h.catchUps.Inc()
		h.markDirty(r)
	}
	if err != nil {
		h.log.Warn("catch up from the store", "document", r.id, "err", err)
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
	since, missing := r.sinceHeads(theirs)
	if missing {
		return true, nil
	}
	if sameHeads(since, r.doc.Heads()) {
		return false, nil
	}
	changes, err := r.doc.Changes(since...)
	if err != nil || len(changes) == 0 {
		return false, nil
	}
	return false, automerge.SaveChanges(changes)
}

// changesSince returns what a node with these heads lacks: the changes
// after them, or the whole document if some heads are unknown here.
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
	since, unknown := r.sinceHeads(theirs)
	if unknown {
		return r.doc.Save()
	}
	changes, err := r.doc.Changes(since...)
	if err != nil || len(changes) == 0 {
		return nil
	}
	return automerge.SaveChanges(changes)
}

// sinceHeads converts another node's heads to change hashes, and reports
// whether some of them are unknown here. The caller holds r.mu.
func (r *room) sinceHeads(theirs [][]byte) (since []automerge.ChangeHash, unknown bool) {
	since = make([]automerge.ChangeHash, 0, len(theirs))
	for _, b := range theirs {
		if !r.known(b) {
			unknown = true
			continue
		}
		var ch automerge.ChangeHash
		copy(ch[:], b)
		since = append(since, ch)
	}
	return since, unknown
}
