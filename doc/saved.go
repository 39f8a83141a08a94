package doc

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"time"

	"github.com/tandemhq/tandem/doc/amdoc"
	"github.com/tandemhq/tandem/doc/amsync"
	"github.com/tandemhq/tandem/doc/store"
)

// A saved document for new readers. Automerge 0.6 and later (what
// automerge-repo clients run) load a document saved as one document chunk
// several times faster than the same changes one by one: 100,000 typed
// changes in 0.4 s against 1.0 s, and a paste of 1 MiB in 0.8 s against
// 2 s. So a room of a large document keeps its changes saved that way
// (amsync.Log.SetSaved), made by Config.SaveDocument (doc/amdoc: written
// in Go from the log's changes, off the path of every message), and a
// peer that has nothing and reads a message's changes as one is sent it,
// then the changes since.
//
// A save covers the log as it stood when the saver took it; the room
// takes another once the log's bytes have grown by more than an eighth
// since (for a document of at least savedMinChanges changes or
// savedMinBytes bytes), so the saves of a growing document cost about
// nine times its last one in all; a new reader is sent at most a
// sixteenth of the document as changes, or waits for a save (below).
// Once the document goes
// Config.SaveQuiet without a change, the changes since are saved too if
// they are more than a sixteenth of it: a document is mostly read after
// its editing pauses, and its readers then load it in one pass. A
// document just loaded waits for quiet (or its next change) too: a reader
// asked for it, and a save would take the CPU it is to be served with.
// One save of a room runs at a time; a failed one is counted and logged,
// and the next waits for the same growth. The saver takes its jobs in
// turn and paces them (amdoc.Saver), so a document written fast is sent
// to a new reader as its last save and more of its changes; a save a
// reader waits for (below) is not paced.
//
// A save is stored with the document (Write.Saved, with the room's next
// write), so that the first reader after a restart has it too: at load it
// is taken back if the log's first changes are still those it holds
// (Log.SetSaved checks its heads), and otherwise left for the next save.

// A document is saved for new readers from this many changes, or bytes
// (a paste of 1 MiB is one change): below both, its changes load about
// as fast as a saved document.
const (
	savedMinChanges = 1000
	savedMinBytes   = 256 << 10
)

// savedGrowShare: a document is saved again once its bytes have grown by
// more than this share of what its last save tried (1/savedGrowShare).
const savedGrowShare = 8

// A new reader that would be sent much of the document as changes waits
// for a save instead: automerge 3 takes in a change several times slower
// than the same change in a saved document, and a save costs the node
// less than the reader's automerge saves. So a peer that has nothing and
// reads a saved document (State.Joins) while more than a sixteenth of the
// log's bytes are past its save waits for the save under way, or one
// made for it if the log has grown since the last was tried (a save that
// failed is not tried again for each reader), then is sent what there
// is: at most one save, so a document written without pause is still
// sent to it, and for at most savedReaderWait, so a saver busy with
// other documents does not hold it.
const (
	savedReaderShare = 16
	savedReaderWait  = 2 * time.Second
)

// Where a member stands with the save it may wait for.
const (
	saveNotWaited = iota
	saveWaiting
	saveWaited
)

// waitForSave reports whether m's answer waits for a save (and has one
// made if none is under way). The caller holds r.mu.
func (r *room) waitForSave(h *Hub, m *member) bool {
	switch {
	case m.saveWait == saveWaiting:
		return true
	case m.saveWait == saveWaited || !m.bare || m.whole || !m.sync.Joins() ||
		h.cfg.SaveDocument == nil || r.evicted || !r.savable():
		return false
	}
	size := r.log.Bytes()
	if size-r.savedBytes <= size/savedReaderShare || (!r.saving && size <= r.saveTried) {
		return false
	}
	m.saveWait = saveWaiting
	h.readersWaited.Inc()
	if r.saving {
		r.hurryNow()
	} else {
		r.save(h, true, false)
	}
	if !r.waitTimer {
		r.waitTimer = true
		h.goAfter(savedReaderWait, func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.waitTimer = false
			if !r.evicted {
				r.answerWaiting(h) // those the save has not answered yet
			}
		})
	}
	return true
}

// hurryNow has the save under way stop waiting for the saver's pace: a
// reader waits for it. The caller holds r.mu.
func (r *room) hurryNow() {
	if r.hurry != nil {
		close(r.hurry)
		r.hurry = nil
	}
}

// answerWaiting answers the members that waited for the save just done
// or failed. The caller holds r.mu.
func (r *room) answerWaiting(h *Hub) {
	for _, m := range r.members {
		if m.saveWait == saveWaiting {
			m.saveWait = saveWaited
			r.answer(h, m, nil)
		}
	}
}

// A document's first reader after it left memory (a restart, say) need
// not wait for its load: the load reads every stored change into the log,
// the guard's index and the observer's text, which takes longer than the
// reader's own load of the document saved. So when the store holds a save
// whose heads are among the stored changes, the reader whose request
// loads the room is sent that save as soon as the store has read it,
// naming the save's heads as the room's; it joins the room, with its
// request answered, once the load is done, and its answer (the save's
// heads) is then answered as any peer's: with the changes the save
// lacks, if any.

// earlyReader is a reader that has nothing of a document and reads a
// saved one, whose request may load it.
type earlyReader struct {
	peer     Peer
	readOnly bool
}

// sendEarly sends p the stored save, if its heads are among the stored
// changes, and reports whether it did. It runs in the room's load, before
// the room holds anything.
func (r *room) sendEarly(p Peer, stored store.Stored) bool {
	if stored.Saved == nil {
		return false
	}
	heads, err := amsync.DocumentHeads(stored.Saved)
	if err != nil || len(heads) == 0 || !storedHolds(stored, heads) {
		return false
	}
	p.SendSync(r.id, (&amsync.Message{Heads: heads, Changes: [][]byte{stored.Saved}}).Encode())
	return true
}

// storedHolds reports whether the changes a store holds include every one
// of hashes, reading only each change's hash; false if they are not all
// plain change chunks (a snapshot saved by automerge, say).
func storedHolds(stored store.Stored, hashes []amsync.Hash) bool {
	want := make(map[amsync.Hash]bool, len(hashes))
	for _, h := range hashes {
		want[h] = false
	}
	found := 0
	for _, b := range append([][]byte{stored.Snapshot}, stored.Chunks...) {
		for len(b) > 0 {
			hash, n, ok := changeHash(b)
			if !ok {
				return false
			}
			if seen, ok := want[hash]; ok && !seen {
				want[hash] = true
				found++
			}
			b = b[n:]
		}
	}
	return found == len(want)
}

// changeHash reads a plain change chunk's hash and its length.
func changeHash(b []byte) (hash amsync.Hash, n int, ok bool) {
	if len(b) < 10 || b[8] != 1 {
		return hash, 0, false
	}
	size, k := binary.Uvarint(b[9:])
	if k <= 0 || size > uint64(len(b)-9-k) {
		return hash, 0, false
	}
	n = 9 + k + int(size)
	return sha256.Sum256(b[8:n]), n, true
}

// maybeSave takes a save of the document if it is due, or with quiet
// once the document goes quiet (a room just loaded). The save copies
// the changes only when the saver is ready for them, under the room's
// lock; meanwhile it holds nothing but the room. The caller holds r.mu.
func (r *room) maybeSave(h *Hub, quiet bool) {
	if h.cfg.SaveDocument == nil || r.saving || r.evicted {
		return
	}
	if !r.savable() {
		r.stopQuiet(h)
		return
	}
	size := r.log.Bytes()
	switch grown := size - r.saveTried; {
	case grown > r.saveTried/savedGrowShare && !quiet:
		r.save(h, false, false)
	case grown > size/savedQuietShare:
		r.saveWhenQuiet(h)
	}
}

// savable reports whether the document is one to save: large enough to
// be worth it, and with op counters below savedMaxOp. The caller holds
// r.mu.
func (r *room) savable() bool {
	return r.guard.MaxOp() < savedMaxOp && (r.log.Len() >= savedMinChanges || r.log.Bytes() >= savedMinBytes)
}

// savedMaxOp: automerge 3.5 does not load a saved document whose op
// counters reach this ("out of memory" inflating its ops), though it
// takes the same changes one by one. The guard has a change's ops start
// right after its past's, so only a document of that many ops reaches it
// (the default budget pays for 16 M).
const savedMaxOp = 1 << 25

// savedQuietShare: a document that goes quiet is saved again if more than
// this share of its bytes came since its last save (1/savedQuietShare).
const savedQuietShare = 16

// saveWhenQuiet has the room save its document once it has gone
// Config.SaveQuiet without a change; each change puts that off again.
// The caller holds r.mu.
func (r *room) saveWhenQuiet(h *Hub) {
	r.setQuietDue(h, true)
	if r.quiet != nil {
		r.quiet.Reset(h.cfg.SaveQuiet)
		return
	}
	r.quiet = time.AfterFunc(h.cfg.SaveQuiet, func() {
		h.background.Do(func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			if !r.quietDue {
				return // stopped after it went off
			}
			r.setQuietDue(h, false)
			if size := r.log.Bytes(); !r.saving && !r.evicted && r.savable() && size-r.saveTried > size/savedQuietShare {
				r.save(h, false, false)
			}
		})
	})
}

// stopQuiet stops a save waiting for quiet. The caller holds r.mu.
func (r *room) stopQuiet(h *Hub) {
	if r.quiet != nil {
		r.quiet.Stop()
		r.setQuietDue(h, false)
	}
}

// setQuietDue records whether a save waits for quiet, and counts it
// pending. The caller holds r.mu.
func (r *room) setQuietDue(h *Hub, due bool) {
	switch {
	case due && !r.quietDue:
		h.savesPending.Inc()
	case !due && r.quietDue:
		h.savesPending.Dec()
	}
	r.quietDue = due
}

// saveTaken is maybeSave for the changes a local peer's message just
// brought, before the room's observer reads them: a save due now (after a
// paste, say) starts while the observer reads and the message still holds
// the room (save, copyNow). The caller holds r.mu.
func (r *room) saveTaken(h *Hub) {
	if h.cfg.SaveDocument == nil || r.saving || r.evicted || !r.savable() {
		return
	}
	if r.log.Bytes()-r.saveTried > r.saveTried/savedGrowShare {
		r.save(h, false, true)
	}
}

// save takes a save of the document. The caller holds r.mu.
//
// A save takes the room's changes when the saver is ready for them, under
// the room's lock, so that saves waiting their turn hold no copies and a
// room that leaves memory meanwhile is not copied. But one decided while
// the room's lock is held for long (copyNow: the message that brought a
// paste, which the observer reads next) would wait for the lock: so the
// first such save in the node (copiedSave, one at a time) copies the
// changes as it is decided, and starts at once if the saver is free.
func (r *room) save(h *Hub, urgent, copyNow bool) {
	r.stopQuiet(h)
	r.saving = true
	hurry := make(chan struct{})
	r.hurry = hurry
	if urgent {
		r.hurryNow()
	}
	h.savesPending.Inc()
	var copied []byte
	copiedN := 0
	if copyNow && h.copiedSave.CompareAndSwap(false, true) {
		copiedN = r.log.Len()
		r.saveTried = r.log.Bytes()
		copied = joinChanges(r.log, span(0, copiedN))
	}
	go h.background.Do(func() {
		if copied != nil {
			defer h.copiedSave.Store(false)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ctx = amdoc.Hurry(ctx, hurry) // not paced once a reader waits for it
		go func() {
			select {
			case <-h.stop: // the hub closes: the job ends with it
				cancel()
			case <-ctx.Done():
			}
		}()
		n := 0
		saved, err := h.cfg.SaveDocument(ctx, func() ([]byte, error) {
			if copied != nil {
				n = copiedN
				b := copied
				copied = nil
				return b, nil
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.evicted {
				return nil, errEvicted
			}
			n = r.log.Len()
			r.saveTried = r.log.Bytes()
			return joinChanges(r.log, span(0, n)), nil
		})
		r.mu.Lock()
		defer r.mu.Unlock()
		r.saving = false
		h.savesPending.Dec()
		if ctx.Err() != nil || errors.Is(err, errEvicted) || r.evicted {
			return // the hub closed or the room left memory: nothing to send
		}
		if err == nil {
			err = r.log.SetSaved(n, saved)
		}
		if err != nil {
			h.savesFailed.Inc()
			h.log.Warn("saving a document for new readers failed: they are sent its changes",
				"document", r.id, "changes", n, "err", err)
			r.answerWaiting(h)
			return
		}
		h.saves.Inc()
		r.savedBytes = r.saveTried
		r.savedDirty = true
		h.markDirty(r) // stored with the next write
		r.answerWaiting(h)
		r.maybeSave(h, false) // for what came while it was saved
	})
}

// takeStoredSaved takes back a saved document the store held, if the
// log's first changes are those it holds. The caller holds r.mu or is
// the room's load.
func (r *room) takeStoredSaved(saved []byte) {
	heads, err := amsync.DocumentHeads(saved)
	if err != nil || len(heads) == 0 {
		return
	}
	n := int32(-1)
	for _, h := range heads {
		i, ok := r.log.IndexOf(h)
		if !ok {
			return
		}
		n = max(n, i)
	}
	if r.log.SetSaved(int(n)+1, saved) == nil {
		for i := range n + 1 {
			r.saveTried += int64(r.log.ChangeLen(i)) // the next save when the log has grown past it
		}
		r.savedBytes = r.saveTried
	}
}
