package doc

import (
	"strings"
	"time"

	"github.com/automerge/automerge-go"
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

// mentionTracker follows the mentions in a room's text. The text is read
// again when the peer whose changes are not yet counted (pending) stops
// being the only author since the last count: when another peer's change
// arrives, when a burst settles, or when changes come from elsewhere. What
// changed between two counts is that one peer's, so a mention counts
// once, for the peer whose changes inserted it; re-syncing or reloading a
// change inserts nothing. A keystroke of a peer typing alone costs no read
// of the text (reading a text of a million characters takes tens of
// milliseconds). Guarded by the room's mutex.
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
	// After a failed handover the ready reports are offered again in
	// backoff (retrying while that is scheduled).
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

// touch records that the journal changed.
func (t *mentionTracker) touch() {
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

// before prepares for p's change, about to be applied: the counts are
// read again if a change nobody local made came since the last count, and
// another peer's pending changes are counted for it.
func (t *mentionTracker) before(d *automerge.Doc, p Peer) {
	if t.stale {
		t.counts = countMentions(t.fields.text(d))
		t.stale = false
	}
	if t.pending != nil && t.pending != p {
		t.count(d) // the other peer's changes end here
	}
}

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
		t.touch()
	}
	if t.pending != p {
		t.touch() // the journal keeps the baseline of the pending changes
	}
	if left := time.Until(b.since.Add(maxMentionWait)); left < settle {
		settle = max(left, 0) // typing on and on: report what is there by now
	}
	t.pending = p
	t.arm(p.ID(), b, settle)
}

// count reads the text and adds what changed in its mentions since the
// last count to the pending author's burst.
func (t *mentionTracker) count(d *automerge.Doc) {
	if t.pending == nil {
		return
	}
	p := t.pending
	t.pending = nil
	t.touch()
	after := countMentions(t.fields.text(d))
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
// per mention still there), makes it a ready report. gen, unless 0, must
// be the burst's.
func (t *mentionTracker) take(d *automerge.Doc, docID, peerID string, gen uint64) *Mention {
	b := t.bursts[peerID]
	if b == nil || (gen != 0 && b.gen != gen) {
		return nil
	}
	delete(t.bursts, peerID)
	b.timer.Stop()
	t.touch()
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
		Actor: b.actor, ActorName: b.name, Title: t.fields.title(d), Users: users}
	if m.Actor == "" {
		m.Actor = m.PeerID
	}
	t.ready = append(t.ready, m)
	return m
}

// MentionFields names where a document keeps what mentions are read
// from: Text, the text searched for `@<userId>`, and Title, what names the
// document in a notification. Each is a key of the root map, or a path of
// keys through nested maps separated by dots ("body.text"). Defaults
// "text" and "title", the demo's.
type MentionFields struct {
	Text, Title string
}

func (f *MentionFields) setDefaults() {
	if f.Text == "" {
		f.Text = "text"
	}
	if f.Title == "" {
		f.Title = "title"
	}
}

// text returns the text field, or "".
func (f MentionFields) text(d *automerge.Doc) string {
	return stringAt(d, f.Text)
}

// title returns the title field, or the text's first non-blank line, at
// most 80 characters.
func (f MentionFields) title(d *automerge.Doc) string {
	t := strings.TrimSpace(stringAt(d, f.Title))
	if t == "" {
		for _, line := range strings.Split(f.text(d), "\n") {
			if t = strings.TrimSpace(strings.TrimLeft(line, "#")); t != "" {
				break
			}
		}
	}
	if r := []rune(t); len(r) > 80 {
		t = string(r[:79]) + "…"
	}
	return t
}

// stringAt reads a text or string at a dotted path of map keys; anything
// else, or nothing there, is "".
func stringAt(d *automerge.Doc, path string) string {
	keys := strings.Split(path, ".")
	p := make([]any, len(keys))
	for i, k := range keys {
		p[i] = k
	}
	v, err := d.Path(p...).Get()
	if err != nil {
		return ""
	}
	switch v.Kind() {
	case automerge.KindText:
		s, _ := v.Text().Get()
		return s
	case automerge.KindStr:
		return v.Str()
	}
	return ""
}

// maxMentionID bounds a mentioned user id.
const maxMentionID = 64

// countMentions counts `@<userId>` in text. A mention starts at an @ that
// does not follow a letter, digit or one of _ . - @ (so e-mail addresses
// are not mentions), and its id is letters, digits, _ . - starting with a
// letter, digit or _ and without a trailing . or -.
func countMentions(text string) map[string]int {
	out := map[string]int{}
	for i := 0; i < len(text); i++ {
		if text[i] != '@' || (i > 0 && (mentionChar(text[i-1]) || text[i-1] == '@')) {
			continue
		}
		j := i + 1
		for j < len(text) && j-i-1 < maxMentionID && mentionChar(text[j]) {
			j++
		}
		id := strings.TrimRight(text[i+1:j], ".-")
		if id != "" && id[0] != '.' && id[0] != '-' {
			out[id]++
		}
		i = j - 1
	}
	return out
}

func mentionChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
}

// reportMentions makes a settled burst of a peer's mentions a report and
// hands it over.
func (h *Hub) reportMentions(r *room, peerID string, gen uint64) {
	r.mu.Lock()
	var m *Mention
	if r.mentions != nil {
		m = r.takeMentions(peerID, gen)
	}
	r.mu.Unlock()
	if m != nil {
		h.handOver(r, true)
	}
}

// takeMentions makes a peer's burst a ready report. Called with r.mu held.
func (r *room) takeMentions(peerID string, gen uint64) *Mention {
	if r.doc == nil {
		return nil
	}
	r.mentions.count(r.doc) // the burst's last changes
	return r.mentions.take(r.doc, r.id, peerID, gen)
}

// handOver gives the room's ready reports to Config.Mentions, oldest
// first, one caller per room at a time. A report leaves the journal once
// Mentions took it; on an error the rest wait, and, if retry is set, are
// handed over again after a backoff (1 s, doubling up to a minute).
func (h *Hub) handOver(r *room, retry bool) {
	r.handMu.Lock()
	defer r.handMu.Unlock()
	for {
		r.mu.Lock()
		if len(r.mentions.ready) == 0 {
			r.mentions.backoff = 0
			r.mu.Unlock()
			return
		}
		m := r.mentions.ready[0]
		r.mu.Unlock()
		if err := h.cfg.Mentions(*m); err != nil {
			h.mentionsFailed.Inc()
			r.mu.Lock()
			t := r.mentions
			t.backoff = min(max(2*t.backoff, time.Second), time.Minute)
			if retry && !t.retrying {
				t.retrying = true
				h.after(t.backoff, func() {
					r.mu.Lock()
					r.mentions.retrying = false
					r.mu.Unlock()
					h.handOver(r, true)
				})
			}
			wait := t.backoff
			r.mu.Unlock()
			h.log.Warn("handing over mentions; they stay in the journal", "document", r.id,
				"users", len(m.Users), "retry_in", wait, "err", err)
			return
		}
		h.mentionsHanded.Inc()
		r.mu.Lock()
		if len(r.mentions.ready) > 0 && r.mentions.ready[0] == m {
			r.mentions.ready = r.mentions.ready[1:]
			r.mentions.touch()
		}
		r.mu.Unlock()
	}
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
		for id := range r.mentions.bursts {
			r.takeMentions(id, 0)
		}
		r.mu.Unlock()
		h.handOver(r, false)
	}
}
