package doc

import (
	"errors"
	"slices"
	"time"
)

// Mention reports that a local peer inserted mentions of users into a
// document's text: `@<userId>` in its text field (MentionFields).
type Mention struct {
	DocumentID string
	// Key names this report for good: a report handed over again (after
	// a failed attempt, or by the node that took over a dead node's
	// journal) has the same key, so that the receiver can tell a repeat.
	Key string
	// Peer is the peer whose changes inserted them; nil when the report
	// comes from the journal of a node that died (PeerID names it then).
	Peer   Peer
	PeerID string
	// Actor and ActorName are the user behind the peer, as
	// Config.MentionAuthor said when the peer's edits began or settled;
	// Actor is the peer id when it could not say.
	Actor, ActorName string
	// Title is the document's title field, or else the first line of its
	// text, for the notification to name the document.
	Title string
	// Users has one entry per inserted mention.
	Users []string
}

// mentionSettle is how long a peer's edits must pause before the mentions
// they inserted count: typing "@ana" passes through "@a" and "@an", and
// only what is there when the typing pauses is a mention.
const mentionSettle = 1500 * time.Millisecond

// maxMentionWait bounds how long a burst's mentions wait to be reported
// however long its author keeps typing: the settle timer restarts with
// every change, and an author typing for minutes would otherwise keep
// their mentions waiting all that time.
var maxMentionWait = 10 * time.Second // a var for tests

// mentionTracker follows the mentions in a room's text, from the room's
// change events: a local peer's change about to be applied (before) and
// accepted (changed), another node's changes about to be applied (count)
// and applied (refresh), a burst settled (take). The text is read again
// when the peer whose changes are not yet counted (pending) stops being
// the only author since the last count: when another peer's change
// arrives, when a burst settles, or when changes come from elsewhere. What
// changed between two counts is that one peer's, so a mention counts
// once, for the peer whose changes inserted it; re-syncing or reloading a
// change inserts nothing. A keystroke of a peer typing alone costs no read
// of the text.
//
// Reading the text takes milliseconds in a large document
// (BenchmarkMentionCount), so it is not done under the room's lock: the
// room reads it under applyMu alone (readMentions), which every change to
// the document takes, and the tracker's counts change under both. The
// read holds up the next change to the document, not the acknowledgements
// and fan-outs of the others.
//
// What the tracker still owes (bursts, and reports not yet handed over)
// is the room's mention journal, stored with the changes it accounts for
// (mention_journal.go).
type mentionTracker struct {
	counts  map[string]int // mentions in the text at the last count, by user
	stale   bool           // counts predate a change nobody local made
	pending Peer           // author of the changes since the last count; nil if none
	bursts  map[string]*mentionBurst
	// fire reports a peer's burst once it has settled; gen tells a timer
	// that fired just before the burst grew again from the current one.
	fire func(peerID string, gen uint64)
	// author names the user behind a peer (Config.MentionAuthor).
	author func(Peer) (userID, name string)
	fields MentionFields

	ready   []*Mention      // settled reports not yet handed over, oldest first
	dirty   bool            // the journal changed since it was last written
	mark    func()          // queues the room for a write
	drop    []string        // nodes whose journals were taken over, to delete
	takenBy map[string]bool // nodes whose journals this room took over
	// Reports of ready that failed for now wait (handRound): they are
	// offered again after backoff (retrying while that is scheduled).
	waiting  map[*Mention]bool
	retrying bool
	backoff  time.Duration
}

// mentionBurst sums what one peer's recent changes did to the mentions.
type mentionBurst struct {
	peer        Peer
	key         string
	actor, name string
	net         map[string]int
	timer       *time.Timer
	gen         uint64
	since       time.Time // the burst's first change
}

// newMentionTracker makes the tracker of r, reporting to the hub.
func (h *Hub) newMentionTracker(r *room) *mentionTracker {
	author := func(p Peer) (string, string) {
		if h.cfg.MentionAuthor == nil || p == nil {
			return "", ""
		}
		return h.cfg.MentionAuthor(r.id, p)
	}
	return &mentionTracker{
		counts: map[string]int{}, bursts: map[string]*mentionBurst{}, takenBy: map[string]bool{}, waiting: map[*Mention]bool{},
		// A timer that fires while the hub closes does nothing: Close
		// reports every burst still open.
		fire:   func(peerID string, gen uint64) { h.whileOpen(func() { h.reportMentions(r, peerID, gen) }) },
		author: author,
		fields: h.cfg.MentionFields,
		mark:   func() { h.markDirty(r) },
	}
}

// journalChanged records that the journal changed: the room is queued
// for a write, once until the journal is written.
func (t *mentionTracker) journalChanged() {
	if !t.dirty {
		t.dirty = true
		t.mark()
	}
}

// busy reports whether the tracker owes anything: the room must stay.
func (t *mentionTracker) busy() bool {
	return len(t.bursts) > 0 || len(t.ready) > 0 || t.dirty
}

// arm (re)starts a burst's settle timer; a timer armed earlier that has
// already fired finds a newer generation and does nothing.
func (t *mentionTracker) arm(id string, b *mentionBurst, after time.Duration) {
	if b.timer != nil {
		b.timer.Stop()
	}
	b.gen++
	gen := b.gen
	b.timer = time.AfterFunc(after, func() { t.fire(id, gen) })
}

// refresh records a change nobody local made (a load, another node's
// change): the counts are read again before the next local change. Before
// such a change is applied, count must have counted what was pending, for
// its author.
func (t *mentionTracker) refresh() {
	t.stale = true
}

// before prepares for p's change, about to be applied, given the mentions
// in the text now (read by readMentions when needsBefore said so): the
// counts start again from them if a change nobody local made came since
// the last count, and another peer's pending changes are counted for it.
func (t *mentionTracker) before(now map[string]int, p Peer) {
	if t.stale {
		t.counts = now
		t.stale = false
	}
	if t.pending != nil && t.pending != p {
		t.count(now) // the other peer's changes end here
	}
}

// needsBefore reports whether before(p) needs the text's mentions.
func (t *mentionTracker) needsBefore(p Peer) bool {
	return t.stale || (t.pending != nil && t.pending != p)
}

// needsCount reports whether count needs the text's mentions.
func (t *mentionTracker) needsCount() bool { return t.pending != nil }

// changed records a local peer's accepted change, after before. The burst
// is reported (on another goroutine) when the peer's edits settle.
func (t *mentionTracker) changed(p Peer, settle time.Duration) {
	b := t.bursts[p.ID()]
	if b == nil || b.peer != p {
		if b == nil {
			b = &mentionBurst{net: map[string]int{}, since: time.Now(), key: newUUID()}
			t.bursts[p.ID()] = b
		}
		b.peer = p // a peer id that reconnected goes on with its burst
		b.actor, b.name = t.author(p)
		t.journalChanged()
	}
	if t.pending != p {
		t.journalChanged() // the journal keeps the baseline of the pending changes
	}
	if left := time.Until(b.since.Add(maxMentionWait)); left < settle {
		settle = max(left, 0) // typing on and on: report what is there by now
	}
	t.pending = p
	t.arm(p.ID(), b, settle)
}

// count adds what changed in the text's mentions since the last count
// (after: the mentions in the text now, read by readMentions) to the
// pending author's burst.
func (t *mentionTracker) count(after map[string]int) {
	if t.pending == nil {
		return
	}
	p := t.pending
	t.pending = nil
	t.journalChanged()
	b := t.bursts[p.ID()]
	if b != nil && b.peer == p {
		for u, n := range after {
			if d := n - t.counts[u]; d != 0 {
				b.net[u] += d
			}
		}
		for u, n := range t.counts {
			if _, still := after[u]; !still {
				b.net[u] -= n
			}
		}
	}
	t.counts = after
}

// take removes a peer's burst and, if its edits mentioned anyone (once
// per mention still there), makes it a ready report named by title. gen,
// unless 0, must be the burst's.
func (t *mentionTracker) take(title, docID, peerID string, gen uint64) *Mention {
	b := t.bursts[peerID]
	if b == nil || (gen != 0 && b.gen != gen) {
		return nil
	}
	delete(t.bursts, peerID)
	b.timer.Stop()
	t.journalChanged()
	var users []string
	for u, n := range b.net {
		for ; n > 0; n-- {
			users = append(users, u)
		}
	}
	if len(users) == 0 {
		return nil
	}
	if b.actor == "" {
		b.actor, b.name = t.author(b.peer) // its presence may have come after its first change
	}
	m := &Mention{DocumentID: docID, Key: b.key, Peer: b.peer, PeerID: b.peer.ID(),
		Actor: b.actor, ActorName: b.name, Title: title, Users: users}
	if m.Actor == "" {
		m.Actor = m.PeerID
	}
	t.ready = append(t.ready, m)
	return m
}

// reportMentions makes a settled burst of a peer's mentions a report and
// hands it over.
func (h *Hub) reportMentions(r *room, peerID string, gen uint64) {
	if r.mentions == nil {
		return
	}
	r.applyMu.Lock()
	m := r.takeMentions(h, peerID, gen)
	r.applyMu.Unlock()
	if m != nil {
		h.handOver(r, true)
	}
}

// takeMentions makes a peer's burst a ready report. The caller holds
// r.applyMu, not r.mu.
func (r *room) takeMentions(h *Hub, peerID string, gen uint64) *Mention {
	now, title := r.readMentions(h, func(t *mentionTracker) bool { return t.needsCount() }, true)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.evicted {
		return nil
	}
	r.mentions.count(now) // the burst's last changes
	return r.mentions.take(title, r.id, peerID, gen)
}

// readMentions reads, for the tracker, the mentions in the document's text
// if need says the tracker will use them, and the title if asked. The
// caller holds r.applyMu and not r.mu: every change to the document takes
// applyMu, so the text read is the text the tracker counts at, while
// acknowledgements and fan-outs, which take only r.mu, go on. The text
// is kept in Go as the changes come (content.go); reading it out takes a
// walk over its elements (BenchmarkMentionCount).
func (r *room) readMentions(h *Hub, need func(*mentionTracker) bool, withTitle bool) (counts map[string]int, title string) {
	r.mu.Lock()
	t := r.mentions
	read := t != nil && !r.evicted && need(t)
	c := r.text
	r.mu.Unlock()
	if t == nil || c == nil || (!read && !withTitle) {
		return nil, ""
	}
	if r.beforeMentionRead != nil {
		r.beforeMentionRead()
	}
	if read {
		counts = countMentions(c.mentionText())
	}
	if withTitle {
		title = c.title()
	}
	return counts, title
}

// handOver gives the room's ready reports to Config.Mentions
// (handRound): with retry, those that are not waiting for a retry round,
// and one that fails for now waits for one; without (the hub is closing),
// every report, once.
func (h *Hub) handOver(r *room, retry bool) { h.handRound(r, !retry, retry) }

// handRound offers the room's ready reports (all of them, or those that
// are not waiting) to Config.Mentions, one round per room at a time. The
// order rule: oldest first, each report once a round, none waiting for
// another's answer. A report Mentions takes leaves the journal. One it
// refuses for good (refusedForGood: the notifications cannot carry it) is
// dropped, counted and logged, and leaves the journal too: offered again
// it would fail again. One that fails for now stays in the journal and
// waits; if retry is set, every waiting report is offered again in a
// round after a backoff (1 s, doubling while rounds fail, up to a minute;
// from 1 s again once none waits). A new report is offered at once, not
// behind the waiting ones: one author's report never holds up another's
// for more than the round they share, though it may overtake an older
// one. A notification queue that is away costs one call per new report,
// and one per waiting report a backoff.
func (h *Hub) handRound(r *room, all, retry bool) {
	r.handMu.Lock()
	defer r.handMu.Unlock()
	r.mu.Lock()
	t := r.mentions
	offer := make([]*Mention, 0, len(t.ready))
	for _, m := range t.ready {
		if all || !t.waiting[m] {
			offer = append(offer, m)
		}
	}
	r.mu.Unlock()
	failed := 0
	var lastErr error
	for _, m := range offer {
		err := h.cfg.Mentions(*m)
		gone := err == nil || refusedForGood(err)
		switch {
		case err == nil:
			h.mentionsHanded.Inc()
		case gone:
			h.mentionsDropped.Inc()
			h.log.Warn("dropping a mention report the notifications refuse for good", "document", r.id,
				"actor", m.Actor, "users", len(m.Users), "err", err)
		default:
			h.mentionsFailed.Inc()
			failed++
			lastErr = err
		}
		r.mu.Lock()
		if gone {
			if i := slices.Index(t.ready, m); i >= 0 {
				t.ready = slices.Delete(t.ready, i, i+1)
				t.journalChanged()
			}
			delete(t.waiting, m)
		} else {
			t.waiting[m] = true
		}
		r.mu.Unlock()
	}
	r.mu.Lock()
	if failed == 0 {
		if len(t.waiting) == 0 {
			t.backoff = 0
		}
		r.mu.Unlock()
		return
	}
	t.backoff = min(max(2*t.backoff, time.Second), time.Minute)
	if retry && !t.retrying {
		t.retrying = true
		h.goAfter(t.backoff, func() {
			r.mu.Lock()
			r.mentions.retrying = false
			r.mu.Unlock()
			h.handRound(r, true, true)
		})
	}
	wait := t.backoff
	r.mu.Unlock()
	h.log.Warn("handing over mentions; they stay in the journal", "document", r.id,
		"reports", failed, "retry_in", wait, "err", lastErr)
}

// refusedForGood reports whether Config.Mentions refused a report for
// good: its error, or one it wraps, has a method Permanent() bool that
// says so (the notification service's ErrBadEvent does).
func refusedForGood(err error) bool {
	var p interface{ Permanent() bool }
	return errors.As(err, &p) && p.Permanent()
}

// reportAllMentions makes every burst still settling a report and hands
// them over, at once: the node is stopping. What cannot be handed over
// stays in the journal, written by the last flush.
func (h *Hub) reportAllMentions() {
	rooms := h.roomsNow()
	for _, r := range rooms {
		r.mu.Lock()
		if r.mentions == nil {
			r.mu.Unlock()
			continue
		}
		ids := make([]string, 0, len(r.mentions.bursts))
		for id := range r.mentions.bursts {
			ids = append(ids, id)
		}
		r.mu.Unlock()
		r.applyMu.Lock()
		for _, id := range ids {
			r.takeMentions(h, id, 0)
		}
		r.applyMu.Unlock()
		h.handOver(r, false)
	}
}
