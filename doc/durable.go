package doc

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/tandemhq/tandem/doc/amsync"
	"github.com/tandemhq/tandem/doc/store"
)

// Durable before acknowledged. A sync message that names a head tells its
// peer the server has that change: the peer's automerge-repo then stops
// resending it. So no message that names a change leaves the room before
// the store holds it: not the reply to the peer that made it, not the
// messages to the other peers, not the copy for other nodes. Each is made
// at once (the sync states move on as if it were sent, as for a message
// on the wire) and waits in the room's untilStored queue; the hub's
// flusher writes the room as soon as it can, and when the write that
// covers a message's changes succeeds, the messages held for it go out in
// the order they were made. Writes are grouped (one batch holds every
// room that changed while the previous batch was written) but never
// reordered. A failed write keeps them held until a later one succeeds.
//
// Changes that arrive from another node are stored already (that node
// waited for the shared store before publishing them), so they hold
// nothing back by themselves and are not written again (apply.go);
// messages made while a local change waits still wait behind it.
//
// A room's write (takeWrite) is its local peers' changes not yet stored, as one chunk
// (change chunks one after another, as they came), or now and then the
// whole log as a snapshot that replaces the chunks it covers (a
// compaction). Both are the changes' own bytes: nothing is saved by
// automerge, and a stored document loads as a change log, in Go, with no
// automerge in the node. wrote records the outcome.

// maxUnstored bounds the messages with changes a room applies before the
// store has them: past it, changes are refused (ErrStoreBehind) until a
// write succeeds. While the store fails, held (a few messages per peer per
// applied message) and the document stop growing here.
const maxUnstored = 1024

// storeBehind reports whether the room takes no more changes until the
// store catches up. The caller holds r.mu.
func (r *room) storeBehind() bool { return r.applied-r.stored >= maxUnstored }

// outgoing is a message the room sends: a sync message or doc-unavailable
// for a peer, or (peer nil) accepted changes for the other nodes, or (then
// set) another node's answer that this node holds the document. One made
// while the document had changes not yet stored waits in untilStored.
type outgoing struct {
	peer        Peer
	data        []byte
	unavailable bool
	changes     []byte
	shared      *SharedSync // instead of data
	then        func()
	upTo        uint64 // the room's applied count when it was made
}

// sendWhenStored delivers s now if everything the room applied is
// stored, or holds it until it is (sendStored). The caller holds r.mu.
func (r *room) sendWhenStored(s outgoing) {
	if r.applied == r.stored {
		r.deliver(s)
		return
	}
	s.upTo = r.applied
	r.untilStored = append(r.untilStored, s)
}

func (r *room) deliver(s outgoing) {
	switch {
	case s.then != nil:
		s.then()
	case s.peer == nil:
		r.publish(r.id, s.changes)
	case s.unavailable:
		s.peer.SendDocUnavailable(r.id)
	case s.shared != nil:
		if ss, ok := s.peer.(SharedSender); ok {
			ss.SendSharedSync(r.id, s.shared)
		} else {
			s.peer.SendSync(r.id, s.shared.Data)
		}
	default:
		s.peer.SendSync(r.id, s.data)
	}
}

// sendStored records that the store holds what the room had applied up to
// upTo (its count when the write was taken), and sends the held messages
// that waited for it, in the order they were made. The caller holds r.mu.
func (r *room) sendStored(upTo uint64) {
	r.stored = max(r.stored, upTo)
	n := 0
	for n < len(r.untilStored) && r.untilStored[n].upTo <= r.stored {
		r.deliver(r.untilStored[n])
		r.untilStored[n] = outgoing{}
		n++
	}
	r.untilStored = r.untilStored[n:]
	if len(r.untilStored) == 0 {
		r.untilStored = nil // let the backing array go
	}
}

// markDirty queues r for the next write and wakes the flusher.
func (h *Hub) markDirty(r *room) {
	h.dirtyMu.Lock()
	h.dirty[r] = struct{}{}
	h.dirtyMu.Unlock()
	select {
	case h.kick <- struct{}{}:
	default: // the flusher is awake already
	}
}

// flushLoop writes changed rooms as soon as they change (one batch at a
// time, so that a batch groups every room that changed while the one
// before it was written), retries failed writes and evicts idle rooms
// until ctx ends.
func (h *Hub) flushLoop(ctx context.Context) {
	t := time.NewTicker(h.cfg.FlushInterval)
	defer t.Stop()
	failed := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.kick:
			if failed {
				continue // wait for the retry tick rather than spin on a failing store
			}
		case <-t.C:
			h.evictIdle(time.Now())
		}
		err := h.Flush(context.Background())
		failed = err != nil
		if failed {
			h.log.Error("flush documents", "err", err)
		}
	}
}

// Flush writes every accepted change not yet stored, in one batch.
func (h *Hub) Flush(ctx context.Context) error {
	h.flushMu.Lock()
	defer h.flushMu.Unlock()

	h.dirtyMu.Lock()
	rooms := make([]*room, 0, len(h.dirty))
	for r := range h.dirty {
		rooms = append(rooms, r)
	}
	clear(h.dirty)
	h.dirtyMu.Unlock()
	if len(rooms) == 0 {
		return nil
	}

	writes := make([]roomWrite, 0, len(rooms))
	batch := make([]store.Write, 0, len(rooms))
	taken := rooms[:0]
	for _, r := range rooms {
		w, ok := r.takeWrite(h.cfg.CompactAfter)
		if !ok {
			continue // queued again once the observer is told (tellApplied)
		}
		taken = append(taken, r)
		writes = append(writes, w)
		batch = append(batch, w.Write)
	}
	rooms = taken
	if len(rooms) == 0 {
		return nil
	}
	start := time.Now()
	err := h.cfg.Store.Write(ctx, batch)
	h.flushSeconds.Observe(time.Since(start).Seconds())
	for i, r := range rooms {
		r.wrote(writes[i], err == nil)
		if err != nil {
			h.markDirty(r) // try again on the next tick
		}
	}
	if err != nil {
		return fmt.Errorf("write %d documents: %w", len(batch), err)
	}
	h.log.Debug("flushed documents", "count", len(batch), "took", time.Since(start))
	return nil
}

// bytesPerCompactChunk makes a large document collect more incremental
// chunks before it is rewritten as one snapshot: one more per this many
// bytes of changes it holds. A snapshot writes the whole log, so spreading
// it over proportionally more writes keeps what a write costs, on average,
// the same for a document of any size (about this many bytes); a load
// reads the same change bytes either way, in a bounded number of chunks
// per byte.
const bytesPerCompactChunk = 4 << 10

// roomWrite is a room's part of a batch: what the store is to store, and
// what the room records of it when the write is done (wrote).
type roomWrite struct {
	store.Write
	upTo    uint64 // the room's applied count this write makes durable
	pending int    // the room's pending chunks this write stores
}

// takeWrite takes the changes not yet stored out of the log. While the
// observer is yet to be told of changes the log took (untold), it takes
// nothing and reports false: the observer's journal that accounts for
// them is to be stored in the same transaction, or a node that dies after
// the write (and after acknowledging them) would lose what the journal
// was to say (a mention). tellApplied queues the room again.
func (r *room) takeWrite(compactAfter int) (roomWrite, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.untold) > 0 {
		return roomWrite{}, false
	}
	w := roomWrite{Write: store.Write{DocumentID: r.id}, upTo: r.applied}
	n := r.log.Len()
	if len(r.unstored) > 0 {
		r.pending = append(r.pending, joinChanges(r.log, r.unstored))
		r.unstored = nil
	}
	if r.forceCompact || r.chunks+len(r.pending) > compactAfter+int(r.log.Bytes()/bytesPerCompactChunk) {
		w.Snapshot = joinChanges(r.log, span(0, n))
		w.Covers = r.coverage(n)
		w.pending = len(r.pending)
		r.forceCompact = false
	} else {
		w.Chunks = r.pending
		w.pending = len(r.pending)
	}
	r.dirty = false
	if r.obs != nil {
		w.Journals = r.obs.Journal()
	}
	if r.savedDirty {
		_, w.Saved = r.log.Saved()
		r.savedDirty = false
	}
	return w, true
}

// wrote records the outcome of storing w.
func (r *room) wrote(w roomWrite, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.obs != nil && w.Journals != nil {
		r.obs.Wrote(w.Journals, ok)
	}
	if !ok {
		if w.Snapshot != nil {
			r.forceCompact = true // written again as a whole at the next write
		}
		// A saved document that failed to be stored is not tried again
		// with the changes: were it what the store refused, it would hold
		// them back. The next save is stored in its turn.
		return
	}
	if w.Snapshot != nil {
		r.chunks = 0
	}
	r.chunks += len(w.Chunks)
	r.pending = r.pending[w.pending:]
	if len(r.pending) == 0 {
		r.pending = nil
	}
	r.sendStored(w.upTo)
}

// coverage returns what a compaction writing the log's first n changes
// (a snapshot) may delete: the stored chunks whose every change is among
// them. The caller holds r.mu: the hashes of those changes are taken now,
// so that the store, which calls the function during its write, one chunk
// after another, reads nothing of the room and takes no lock of it. They
// cost 32 bytes a change, at a compaction only, which copies the whole
// log's bytes anyway.
func (r *room) coverage(n int) func(chunk []byte) bool {
	c := make(covered, n)
	for i := range c {
		c[i] = r.log.HashAt(int32(i))
	}
	slices.SortFunc(c, compareHashes)
	return c.covers
}

// covered is what a compaction covers: the hashes of its changes, sorted.
// It is not changed once made.
type covered []amsync.Hash

// covers reports whether every change of chunk is covered. A chunk that
// does not read as changes is kept: nothing is deleted that is not known
// to be in the snapshot.
func (c covered) covers(chunk []byte) bool {
	cs, err := readChanges(nil, chunk)
	if err != nil {
		return false
	}
	for i := range cs {
		if _, ok := slices.BinarySearchFunc(c, amsync.Hash(cs[i].Hash), compareHashes); !ok {
			return false
		}
	}
	return true
}

func compareHashes(a, b amsync.Hash) int { return bytes.Compare(a[:], b[:]) }
