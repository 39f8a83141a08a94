package doc

import (
	"context"
	"errors"
	"time"

	"github.com/tandemhq/tandem/doc/amsync"
	"github.com/tandemhq/tandem/doc/store"
)

// Requests for a document the room does not have.
//
// automerge-repo's sync server reads every socket on one thread, so a
// creator's first sync that reached it before another client's request is
// applied before that request is answered. Tandem reads each connection on
// its own goroutine, and in a cluster the creator may be on another node:
// answering doc-unavailable the moment the room finds nothing would make a
// stock client's find() fail for a document created a millisecond earlier.
//
// So a request for a document the room does not have is answered with the
// room's own (empty) sync message, and the requester becomes a member of
// the room, waiting: the moment the document arrives, from a local peer or
// another node, it is synced to the requester like to every member. It is
// told doc-unavailable only when its grace window (Config.UnavailableGrace)
// has passed and the document is nowhere:
//
//   - it is not on its way on one of this node's connections: no message
//     carrying changes for it is between being read and being applied
//     (room.arriving), and no member has said it has heads the room lacks
//     (member.ahead: a creator's first sync message names its heads but
//     carries no changes; they follow once the server answers). A member
//     that says so but never sends them holds requests back for at most
//     aheadWait;
//   - the store does not have it (another node may have written it since
//     the room was loaded);
//   - no other node holds it (Config.Finder asks them all at once).
//
// After doc-unavailable the peer stays a member, as with the stock server:
// a document that appears later is still synced to it, and a stock
// client's handle turns ready.

// askedPeer is a peer waiting for a document the room does not have.
type askedPeer struct {
	peer Peer
	due  time.Time // the end of its grace window
}

// aheadWait bounds how long past its grace window a request waits for a
// member that said it has the document to send it. A variable for tests.
var aheadWait = 5 * time.Second

// maxQuestions bounds the other nodes' questions a room keeps waiting
// while the document is on its way; beyond it they are answered no.
const maxQuestions = 64

// maxFoundRetries bounds how often a lookup looks again when another node
// said it holds the document but the store does not show it yet.
const maxFoundRetries = 3

// Finder asks the other nodes of a cluster whether they hold a document.
type Finder interface {
	// FindDocument asks every other live node whether it holds the
	// document and calls done once: with true as soon as one node answers
	// that it does and has stored it (this node then reads it from the
	// shared store), with false once every node answered that it does
	// not, or the wait timed out. It must not block.
	FindDocument(documentID string, done func(found bool))
}

// ask records p's request for a document the room does not have. A peer
// that asks again keeps its first grace window. The caller holds r.mu.
func (r *room) ask(h *Hub, p Peer) {
	for _, a := range r.asked {
		if a.peer == p {
			return
		}
	}
	due := time.Now().Add(h.cfg.UnavailableGrace)
	r.asked = append(r.asked, askedPeer{peer: p, due: due})
	if !r.looking {
		r.looking = true
		r.scheduleLookup(h, due)
	}
}

// scheduleLookup runs the room's lookup at the given time. A lookup
// scheduled later supersedes every earlier one, so one chain of lookups
// runs at a time. The caller holds r.mu.
func (r *room) scheduleLookup(h *Hub, at time.Time) {
	r.lookupGen++
	gen := r.lookupGen
	h.goAfter(time.Until(at), func() { h.lookup(r, gen) })
}

// endLookup records that no request waits any more; those still waiting
// when the document exists got it. The caller holds r.mu.
func (r *room) endLookup(h *Hub) {
	if r.exists {
		h.requestsArrived.Add(float64(len(r.asked)))
	}
	r.asked, r.looking, r.deferred, r.foundRetries = nil, false, false, 0
}

// waitLonger reports whether the verdict must wait because the document
// may be on its way, and arranges for the lookup to run again: when the
// messages being applied are done (resumeDeferred), or, for a member that
// named heads the room lacks, once it had aheadWait past the first window
// to send them. The caller holds r.mu.
func (r *room) waitLonger(h *Hub, now time.Time) bool {
	if r.arriving > 0 {
		r.deferred = true // resumeDeferred schedules the lookup
		return true
	}
	if r.onItsWay() {
		if bound := r.asked[0].due.Add(aheadWait); now.Before(bound) {
			r.scheduleLookup(h, bound)
			return true
		}
	}
	return false
}

// onItsWay reports whether the room lacks the document but one of this
// node's connections is bringing it. The caller holds r.mu.
func (r *room) onItsWay() bool {
	if r.exists {
		return false
	}
	if r.arriving > 0 {
		return true
	}
	for _, m := range r.members {
		if m.ahead {
			return true
		}
	}
	return false
}

// resumeDeferred runs, once the document is no longer on its way, what
// waited for that: a deferred lookup, and other nodes' questions (Holds).
// It is called after every sync message and leave. The caller holds r.mu.
func (r *room) resumeDeferred(h *Hub) {
	if r.deferred && r.arriving == 0 {
		r.deferred = false
		r.scheduleLookup(h, time.Now()) // it waits on for a member ahead, if any
	}
	if len(r.questions) == 0 || r.onItsWay() {
		return
	}
	for _, answer := range r.questions {
		r.answerHolds(answer)
	}
	r.questions = nil
}

// noteAhead records whether m, whose message named these heads, has
// changes the room lacks. Only a room without the document asks. The
// caller holds r.mu.
func (r *room) noteAhead(m *member, heads []amsync.Hash) {
	m.ahead = false
	if r.exists {
		return
	}
	for _, h := range heads {
		if !r.log.Has(h) {
			m.ahead = true
			return
		}
	}
}

// lookup decides what to tell the peers whose grace window has passed:
// nothing yet if the document may be on its way, the document if the
// store or another node has it, doc-unavailable otherwise. gen is the
// scheduling it was started by; a superseded one does nothing.
func (h *Hub) lookup(r *room, gen uint64) {
	r.mu.Lock()
	if gen != r.lookupGen {
		r.mu.Unlock()
		return
	}
	if r.evicted || r.exists {
		r.endLookup(h)
		r.mu.Unlock()
		return
	}
	r.pruneAsked()
	if len(r.asked) == 0 {
		r.endLookup(h)
		r.mu.Unlock()
		return
	}
	now := time.Now()
	if r.asked[0].due.After(now) {
		r.scheduleLookup(h, r.asked[0].due)
		r.mu.Unlock()
		return
	}
	if r.waitLonger(h, now) {
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()

	h.lookups.Inc()
	h.reload(r)
	if h.cfg.Finder == nil {
		h.verdict(r, gen, now, false)
		return
	}
	h.cfg.Finder.FindDocument(r.id, func(found bool) {
		h.goAfter(0, func() {
			if found {
				h.reload(r)
			}
			h.verdict(r, gen, now, found)
		})
	})
}

// verdict tells the peers whose grace window ended by cutoff that the
// document is unavailable, unless it has arrived, or may be on its way.
// gen is the lookup's; if another was scheduled meanwhile, that one
// decides.
func (h *Hub) verdict(r *room, gen uint64, cutoff time.Time, found bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if gen != r.lookupGen {
		return
	}
	if r.evicted || r.exists {
		r.endLookup(h)
		return
	}
	r.pruneAsked()
	if len(r.asked) == 0 {
		r.endLookup(h)
		return
	}
	if r.waitLonger(h, time.Now()) {
		return
	}
	if found && r.foundRetries < maxFoundRetries {
		// Another node has it stored, yet the store did not show it:
		// look again rather than deny a document that exists.
		r.foundRetries++
		r.scheduleLookup(h, time.Now().Add(h.cfg.UnavailableGrace))
		return
	}
	if found {
		h.log.Warn("a node holds a document the store does not show; reporting it unavailable",
			"document", r.id)
	}
	r.foundRetries = 0
	n := 0
	for n < len(r.asked) && !r.asked[n].due.After(cutoff) {
		r.sendWhenStored(outgoing{peer: r.asked[n].peer, unavailable: true})
		n++
	}
	h.requestsUnavailable.Add(float64(n))
	r.asked = r.asked[n:]
	if len(r.asked) == 0 {
		r.endLookup(h)
		return
	}
	r.scheduleLookup(h, r.asked[0].due)
}

// pruneAsked drops waiting peers that left or were replaced. The caller
// holds r.mu.
func (r *room) pruneAsked() {
	kept := r.asked[:0]
	for _, a := range r.asked {
		if m := r.members[a.peer.ID()]; m != nil && m.peer == a.peer {
			kept = append(kept, a)
		}
	}
	clear(r.asked[len(kept):])
	r.asked = kept
}

// reload reads the document from the store again, for a room that was
// loaded before another node stored it, and applies what it finds.
func (h *Hub) reload(r *room) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stored, err := h.cfg.Store.Load(ctx, r.id)
	if errors.Is(err, store.ErrNotFound) {
		return
	}
	if err != nil {
		h.log.Warn("read a requested document again", "document", r.id, "err", err)
		return
	}
	chunks := stored.Chunks
	if stored.Snapshot != nil {
		chunks = append([][]byte{stored.Snapshot}, chunks...)
	}
	for _, c := range chunks {
		if _, err := r.applyRemote(h, c); err != nil {
			h.log.Warn("apply a stored chunk of a requested document", "document", r.id, "err", err)
		}
	}
}

// Holds answers another node's question whether this node holds a
// document: true once the document, with content, is in memory here and
// stored, false when it is not here. A message with changes on its way
// into the room, or the room still loading, delays the answer. answer is
// called once, maybe later, maybe with a room's lock held: it must not
// block.
func (h *Hub) Holds(documentID string, answer func(held bool)) {
	h.mu.Lock()
	r := h.rooms[documentID]
	h.mu.Unlock()
	if r == nil {
		answer(false)
		return
	}
	select {
	case <-r.loaded:
	default:
		h.goAfter(0, func() {
			<-r.loaded
			h.Holds(documentID, answer)
		})
		return
	}
	if r.loadErr != nil {
		answer(false)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.onItsWay() && len(r.questions) < maxQuestions {
		r.questions = append(r.questions, answer)
		return
	}
	r.answerHolds(answer)
}

// answerHolds answers a question of Holds: true once stored. The caller
// holds r.mu.
func (r *room) answerHolds(answer func(bool)) {
	if !r.exists || r.evicted {
		answer(false)
		return
	}
	r.sendWhenStored(outgoing{then: func() { answer(true) }})
}
