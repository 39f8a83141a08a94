package doc

import (
	"fmt"

	"github.com/automerge/automerge-go"
)

// Replicator carries accepted changes to the other nodes of a cluster,
// once they are stored. PublishChanges must not block: it queues, and may
// drop under pressure, because the nodes repair gaps by comparing heads
// (see RemoteHeads). It is called with the room's lock held.
type Replicator interface {
	PublishChanges(documentID string, changes []byte)
}

// EphemeralReplicator is a Replicator that also carries the ephemeral
// messages of a document's peers to its peers on the other nodes. It must
// not block; it may drop under pressure (ephemerals are not kept).
type EphemeralReplicator interface {
	PublishEphemeral(documentID string, e Ephemeral)
}

// ApplyRemote applies changes that another node accepted, if this node has
// the document in memory, and syncs them to the local peers. Changes
// arrive possibly twice or out of order: automerge ignores what it has
// and holds what misses a dependency until the dependency comes.
func (h *Hub) ApplyRemote(documentID string, changes []byte) error {
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
	r.applyMu.Lock()
	defer r.applyMu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.evicted {
		return false, nil
	}
	before := r.doc.Heads()
	if r.mentions != nil {
		r.mentions.count(r.doc) // local peers' pending changes are theirs
	}
	if changes, err := automerge.LoadChanges(data); err == nil {
		err = r.doc.Apply(changes...)
		if err != nil {
			return false, fmt.Errorf("apply remote changes to %s: %w", r.id, err)
		}
	} else if err := r.doc.LoadIncremental(data); err != nil {
		return false, fmt.Errorf("load remote document %s: %w", r.id, err)
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

// Compare tells how another node's heads of a document relate to this
// node's copy: whether that node has changes this one lacks (missing), and
// the changes it lacks from this one (behind), if any. A nil behind with
// missing false means both are level, or the document is not here.
func (h *Hub) Compare(documentID string, theirs [][]byte) (missing bool, behind []byte) {
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

// ChangesSince returns what a node with these heads lacks: the changes
// after them, or the whole document if some heads are unknown here.
func (h *Hub) ChangesSince(documentID string, theirs [][]byte) []byte {
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

func (h *Hub) loadedRoom(documentID string) *room {
	h.mu.Lock()
	r := h.rooms[documentID]
	h.mu.Unlock()
	if r == nil {
		return nil
	}
	select {
	case <-r.loaded:
		if r.loadErr == nil {
			return r
		}
	default:
	}
	return nil
}
