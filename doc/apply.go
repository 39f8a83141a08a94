package doc

import (
	"fmt"
	"time"

	"github.com/tandemhq/tandem/doc/amsync"
	"github.com/tandemhq/tandem/doc/guard"
)

// One way in. Changes enter a room's log by one path, wherever they come
// from: a local peer's sync message (receiveSync), another node's
// (applyStored, from cluster.go), a catch-up from the store and the load
// (replica.go). The guard orders them, each after what it depends on,
// together with the changes that wait for a dependency, in one queue for
// all (waiting.go): a peer's changes checked as admit checks them, stored
// ones taken as they are (admitStored). take then adds what the guard
// admitted to the log and knows which of it the store holds already
// (change.stored): from the store, or from another node, which stores
// before it publishes. Only the others are written (durable.go) and sent
// to the other nodes, so that a change is written once in a cluster, by
// the node of the peer that made it.

// take adds the changes the guard admitted to the log, in the order it
// admitted them, and follows them: the guard's ledger (record), the
// room's observer (Observer.Applied), the changes that wait (queued for from, or stored), and
// for those a local peer made (from, not nil), the write that stores them
// and, once it is done, the copy for the other nodes. It reports whether
// the log took any. The caller holds r.applyMu and r.mu (or the room is
// not shared yet), fans out what changed and has told the observer first
// (Observer.Applying).
func (r *room) take(h *Hub, from Peer, ad *guard.Admission) bool {
	var deps []amsync.Hash
	added := ad.Apply[:0] // in place: the i-th added is at most the i-th admitted
	local := 0
	for i := range ad.Apply {
		c := &ad.Apply[i]
		deps = deps[:0]
		for _, d := range c.Deps {
			deps = append(deps, d)
		}
		ok, err := r.log.Add(c.Hash, deps, c.Raw)
		if err != nil {
			// The guard admits a change only after what it depends on.
			h.log.Error("a change the guard admitted does not follow its dependencies",
				"document", r.id, "change", fmt.Sprintf("%x", c.Hash[:8]), "err", err)
			continue
		}
		if !ok {
			continue // the log has it
		}
		added = append(added, *c)
		if !c.Stored {
			r.unstored = append(r.unstored, int32(r.log.Len()-1))
			local++
		}
	}
	if len(added) > 0 {
		r.record(added) // first: what the queue held and the log took leaves it
	}
	if local > 0 {
		r.saveTaken(h) // before the observer reads the changes
	}
	peer := ""
	if from != nil {
		peer = from.ID()
	}
	if n := r.guard.Queue(ad, peer); n > 0 {
		h.remoteDropped.Add(float64(n))
		h.log.Warn("letting go stored changes that wait for a dependency: too many wait",
			"document", r.id, "changes", n)
	}
	r.noteDropped(h, ad)
	if len(added) == 0 {
		return false
	}
	r.exists = true
	r.tookFrom(peer, time.Now())
	if r.obs != nil {
		r.noteApplied(from, added)
	}
	if local == 0 {
		return true
	}
	r.dirty = true
	r.applied++
	h.markDirty(r)
	if r.publish != nil {
		r.sendWhenStored(outgoing{changes: joinChanges(r.log, r.unstored[len(r.unstored)-local:])})
	}
	return true
}

// appliedRun is a run of one author's changes the log took, for the
// observer (Observer.Applied).
type appliedRun struct {
	by      Peer
	changes []guard.Change
	stored  bool
}

// noteApplied notes what the log took for the observer, in its order, a
// run of one author's changes at a time: a peer's message may release
// changes another peer sent before what they depend on (waiting in the
// guard), and so may stored ones. Each change is its sender's, from's
// when it came in from's message; one whose sender left meanwhile is
// noted with no peer. The caller holds r.applyMu and r.mu, and calls
// tellApplied once it has let go of r.mu.
func (r *room) noteApplied(from Peer, added []guard.Change) {
	author := func(c *guard.Change) (Peer, bool) {
		if c.Stored {
			return nil, true
		}
		if id := c.From(); id != "" {
			if m := r.members[id]; m != nil {
				return m.peer, false
			}
			return nil, false
		}
		return from, false
	}
	for start := 0; start < len(added); {
		by, stored := author(&added[start])
		end := start + 1
		for end < len(added) {
			if p, st := author(&added[end]); p != by || st != stored {
				break
			}
			end++
		}
		r.untold = append(r.untold, appliedRun{by: by, changes: added[start:end], stored: stored})
		start = end
	}
}

// tellApplied tells the observer the runs noteApplied noted, under
// r.applyMu alone (or while a loading room is not shared yet): what it
// does with them (the mention tracker reads the text between two
// authors' runs) holds up the document's next change, not its room. A
// write waits meanwhile (takeWrite); the room is queued for it after.
func (r *room) tellApplied(h *Hub) {
	if len(r.untold) == 0 {
		return
	}
	for _, run := range r.untold {
		r.obs.Applied(run.by, changesOf(run.changes), run.stored)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(r.untold)
	r.untold = r.untold[:0]
	if r.dirty {
		h.markDirty(r)
	}
}

// applyStored adds changes from the store or another node to the log,
// with the changes that waited for them, and syncs what is new to the
// local peers. It reports whether the document changed.
func (r *room) applyStored(h *Hub, cs []guard.Change) bool {
	r.applyMu.Lock()
	defer r.unlockApply()
	if r.obs != nil {
		r.obs.Applying(nil)
	}
	defer r.guard.Release()
	defer r.tellApplied(h) // once r.mu is let go
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.evicted {
		return false
	}
	if !r.take(h, nil, r.guard.AdmitStored(h.cfg.Limits, cs, r.log.HasBytes)) {
		return false
	}
	r.fanout(h, nil)
	r.maybeSave(h, false)
	return true
}
