package mention

import (
	"context"
	"iter"
	"sync"
	"time"

	"github.com/tandemhq/tandem/doc"
	"github.com/tandemhq/tandem/doc/amcheck"
)

// maxWait bounds how long a burst's mentions wait to be reported however
// long its author keeps typing: the settle timer restarts with every
// change, and an author typing for minutes would otherwise keep their
// mentions waiting all that time.
var maxWait = 10 * time.Second // a var for tests

// room follows the mentions in one room's text: it is the room's
// doc.Observer. A local peer's changes about to be applied (Applying)
// and applied (Applied), changes from the store or another node about to
// be applied and applied, a burst settled (report). The text is read
// again when the peer whose changes are not yet counted (pending) stops
// being the only author since the last count: when another peer's change
// arrives, when a burst settles, or when changes come from elsewhere.
// What changed between two counts is that one peer's, so a mention counts
// once, for the peer whose changes inserted it; re-syncing or reloading a
// change inserts nothing. A keystroke of a peer typing alone costs no read
// of the text.
//
// Reading the text takes milliseconds in a large document
// (BenchmarkMentionCount), so it is not done under the room's main lock:
// it is read under the room's apply lock alone (Applying, Applied, doc.Room.Hold),
// which every change to the document takes, and the counts change under
// mu. The read holds up the next change to the document, not the
// acknowledgements and fan-outs of the others.
//
// What the room still owes (bursts, and reports not yet handed over) is
// its journal, stored with the changes it accounts for (journal.go).
type room struct {
	t   *Tracker
	doc doc.Room
	id  string

	// text is the mention fields' values (content.go), changed by Applied
	// and read under the room's apply lock.
	text *content
	// runs counts the runs of the message under way (Applied), and reads
	// the times the text was read to count its mentions (settle), under
	// the room's apply lock.
	runs, reads int

	// roundMu makes one caller at a time hand the room's reports over
	// (handover.go); taken before mu.
	roundMu sync.Mutex

	mu      sync.Mutex     // guards everything below; taken after the room's locks
	counts  map[string]int // mentions in the text at the last count, by user
	stale   bool           // counts predate a change nobody local made
	pending doc.Peer       // author of the changes since the last count; nil if none
	bursts  map[string]*burst
	gone    bool // the room left memory (Busy): nothing more is taken

	ready   []*Report       // settled reports not yet handed over, oldest first
	dirty   bool            // the journal changed since it was last taken for a write
	drop    []string        // nodes whose journals were taken over, to delete
	takenBy map[string]bool // nodes whose journals this room took over
	// Reports of ready that failed for now wait (handRound): they are
	// offered again after backoff (retrying while that is scheduled).
	waiting  map[*Report]bool
	retrying bool
	backoff  time.Duration
}

// burst sums what one peer's recent changes did to the mentions.
type burst struct {
	peer        doc.Peer
	key         string
	actor, name string
	net         map[string]int
	timer       *time.Timer
	gen         uint64
	since       time.Time // the burst's first change
}

var _ doc.Observer = (*room)(nil)

func newRoom(t *Tracker, d doc.Room) *room {
	return &room{
		t: t, doc: d, id: d.DocumentID(), text: newContent(t.cfg.Fields),
		counts: map[string]int{}, bursts: map[string]*burst{}, takenBy: map[string]bool{}, waiting: map[*Report]bool{},
	}
}

// author names the user behind a peer (Config.Author).
func (r *room) author(p doc.Peer) (string, string) {
	if r.t.cfg.Author == nil || p == nil {
		return "", ""
	}
	return r.t.cfg.Author(r.id, p)
}

// journalChanged records that the journal changed: the room is queued
// for a write, once until the journal is taken. The caller holds r.mu.
func (r *room) journalChanged() {
	r.t.owes(r, len(r.bursts) > 0 || len(r.ready) > 0)
	if !r.dirty {
		r.dirty = true
		r.doc.Write()
	}
}

// Busy implements doc.Observer: the room stays while it owes anything.
func (r *room) Busy() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	busy := len(r.bursts) > 0 || len(r.ready) > 0 || r.dirty
	r.gone = !busy
	return busy
}

// arm (re)starts a burst's settle timer; a timer armed earlier that has
// already fired finds a newer generation and does nothing. The caller
// holds r.mu.
func (r *room) arm(id string, b *burst, after time.Duration) {
	if b.timer != nil {
		b.timer.Stop()
	}
	b.gen++
	gen := b.gen
	b.timer = time.AfterFunc(after, func() { r.fire(id, gen) })
}

// fire reports a peer's burst once it has settled; gen tells a timer that
// fired just before the burst grew again from the current one. A timer
// that fires while the tracker closes does nothing: Close reports every
// burst still open.
func (r *room) fire(peerID string, gen uint64) {
	r.t.background.Do(func() { r.report(peerID, gen) })
}

// Applying implements doc.Observer: what the text's mentions need
// counted before p's changes apply is counted (settle).
func (r *room) Applying(p doc.Peer) {
	r.runs = 0
	r.settle(p)
}

// maxRunsCounted bounds the runs of one message's changes (Applied) whose
// mentions are told apart: a message whose changes released changes of
// other peers' that waited for them counts the text before each author's
// run, and one crafted to alternate two authors' changes a thousand
// times would have it read a thousand times. Past the bound the counts
// go stale: what those runs mention is reported by no one.
const maxRunsCounted = 8

// settle counts what the text's mentions need counted before p's changes
// apply. Before p's (p not nil), the counts start again from the text if
// a change nobody local made came since the last count, and another
// peer's pending changes are counted for it; before changes from
// elsewhere (p nil), the pending changes are counted for their author.
// The text is read only then.
func (r *room) settle(p doc.Peer) {
	r.mu.Lock()
	need := !r.gone && (p == nil && r.pending != nil || p != nil && (r.stale || r.pending != nil && r.pending != p))
	r.mu.Unlock()
	if !need {
		return
	}
	r.reads++
	now := countMentions(r.text.mentionText())
	r.mu.Lock()
	defer r.mu.Unlock()
	if p == nil {
		r.count(now) // local peers' pending changes are theirs
		return
	}
	if r.stale {
		r.counts = now
		r.stale = false
	}
	if r.pending != nil && r.pending != p {
		r.count(now) // the other peer's changes end here
	}
}

// Applied implements doc.Observer: the text follows the changes; changes
// from elsewhere, or of a peer that left, make the counts stale (their
// mentions are not this node's peers' to report), and a local peer's
// start or extend its burst, reported (on another goroutine) when the
// peer's edits settle. The changes of one message may be several
// authors' (a change that waited for another's): Applying settled the
// counts for the first, and each other's is settled here, reading the
// text, which only such a message pays (up to maxRunsCounted runs).
func (r *room) Applied(by doc.Peer, changes iter.Seq[*amcheck.Change], elsewhere bool) {
	r.runs++
	counted := r.runs <= maxRunsCounted
	if counted {
		r.settle(by)
	}
	r.text.take(changes)
	r.mu.Lock()
	defer r.mu.Unlock()
	if by == nil || !counted {
		if !counted {
			r.pending = nil // what it wrote since the last count is not told apart
		}
		r.stale = true
		return
	}
	r.changed(by)
}

// changed records a local peer's accepted change. The caller holds r.mu.
func (r *room) changed(p doc.Peer) {
	settle := r.t.cfg.Settle
	b := r.bursts[p.ID()]
	if b == nil || b.peer != p {
		if b == nil {
			b = &burst{net: map[string]int{}, since: time.Now(), key: newKey()}
			r.bursts[p.ID()] = b
		}
		b.peer = p // a peer id that reconnected goes on with its burst
		b.actor, b.name = r.author(p)
		r.journalChanged()
	}
	if r.pending != p {
		r.journalChanged() // the journal keeps the baseline of the pending changes
	}
	if left := time.Until(b.since.Add(maxWait)); left < settle {
		settle = max(left, 0) // typing on and on: report what is there by now
	}
	r.pending = p
	r.arm(p.ID(), b, settle)
}

// Left implements doc.Observer: a leaving peer's mentions count at once.
func (r *room) Left(p doc.Peer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if b := r.bursts[p.ID()]; b != nil && b.peer == p {
		r.arm(p.ID(), b, 0)
	}
}

// count adds what changed in the text's mentions since the last count
// (after: the mentions in the text now) to the pending author's burst.
// The caller holds r.mu.
func (r *room) count(after map[string]int) {
	if r.pending == nil {
		return
	}
	p := r.pending
	r.pending = nil
	r.journalChanged()
	b := r.bursts[p.ID()]
	if b != nil && b.peer == p {
		for u, n := range after {
			if d := n - r.counts[u]; d != 0 {
				b.net[u] += d
			}
		}
		for u, n := range r.counts {
			if _, still := after[u]; !still {
				b.net[u] -= n
			}
		}
	}
	r.counts = after
}

// take removes a peer's burst and, if its edits mentioned anyone (once
// per mention still there), makes it a ready report named by title. gen,
// unless 0, must be the burst's. The caller holds r.mu.
func (r *room) take(title, peerID string, gen uint64) *Report {
	b := r.bursts[peerID]
	if b == nil || (gen != 0 && b.gen != gen) {
		return nil
	}
	delete(r.bursts, peerID)
	b.timer.Stop()
	var users []string
	for u, n := range b.net {
		for ; n > 0; n-- {
			users = append(users, u)
		}
	}
	if len(users) == 0 {
		r.journalChanged()
		return nil
	}
	if b.actor == "" {
		b.actor, b.name = r.author(b.peer) // its presence may have come after its first change
	}
	m := &Report{DocumentID: r.id, Key: b.key, Peer: b.peer, PeerID: b.peer.ID(),
		Actor: b.actor, ActorName: b.name, Title: title, Users: users}
	if m.Actor == "" {
		m.Actor = m.PeerID
	}
	r.ready = append(r.ready, m)
	r.journalChanged()
	return m
}

// report makes a settled burst of a peer's mentions a report and hands it
// over.
func (r *room) report(peerID string, gen uint64) {
	var m *Report
	r.doc.Hold(func() { m = r.takeHeld(peerID, gen) })
	if m != nil {
		r.handOver(true)
	}
}

// takeHeld makes a peer's burst a ready report: the burst's last changes
// counted, with the text read, held still (doc.Room.Hold).
func (r *room) takeHeld(peerID string, gen uint64) *Report {
	r.mu.Lock()
	need := !r.gone && r.pending != nil
	r.mu.Unlock()
	var now map[string]int
	if need {
		now = countMentions(r.text.mentionText())
	}
	title := r.text.title()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gone {
		return nil
	}
	r.count(now) // the burst's last changes
	return r.take(title, peerID, gen)
}

// Loaded implements doc.Observer: the counts start from the text loaded,
// and the journals of gone nodes stored with the document, this node's
// own among them (a room is loaded once, so its journal is of an earlier
// run under the same node id), become this room's, handed over at once.
func (r *room) Loaded(ctx context.Context, journals map[string][]byte) {
	r.mu.Lock()
	r.stale = true
	r.mu.Unlock()
	var now map[string]int
	var title string
	for node, data := range journals {
		if node != r.t.cfg.NodeID && r.t.nodeAlive(ctx, node) {
			continue // its node reports it
		}
		if now == nil {
			now, title = countMentions(r.text.mentionText()), r.text.title()
		}
		n, err := r.takeOver(now, title, node, data)
		if err != nil {
			r.t.log.Error("taking over a mention journal", "document", r.id, "node", node, "err", err)
			continue
		}
		r.t.taken.Add(float64(n))
	}
	r.mu.Lock()
	owed := len(r.ready) > 0
	r.mu.Unlock()
	if owed {
		r.t.goAfter(0, func() { r.handOver(true) })
	}
}
