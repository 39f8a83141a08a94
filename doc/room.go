package doc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/automerge/automerge-go"
)

// errEvicted tells a caller that raced with eviction to look the room up
// again.
var errEvicted = errors.New("room evicted")

// room is one document in memory with the peers syncing it.
type room struct {
	id      string
	loaded  chan struct{} // closed once doc is loaded (or loadErr set)
	loadErr error         // written before loaded is closed

	// applyMu is held, before mu, by whoever changes the document: a
	// local peer's message carrying changes (across its sandbox
	// rehearsal), another node's changes, a catch-up. The document
	// changes only under it (and mu), so a message rehearsed at some heads
	// is applied at the same heads, and the mention tracker reads the text
	// under applyMu alone (readMentions) while acknowledgements and
	// fan-outs, under mu alone, go on.
	applyMu sync.Mutex
	// beforeMentionRead, set by tests before any traffic, runs before the
	// mention tracker reads the text.
	beforeMentionRead func()
	// handMu makes one caller at a time hand the room's mention reports
	// over (mentions.go); taken before mu.
	handMu sync.Mutex
	// Gaps in what the bus carried of the document, counted: a caller
	// found the room without peers (the bus carries the document only
	// while the room has some) or the bus lost messages. caughtUp is the
	// count the room last read the store past; while they differ the room
	// reads the store before it serves (replica.go). catchMu makes one
	// caller at a time read it; taken before applyMu.
	gaps, caughtUp atomic.Uint64
	catchMu        sync.Mutex
	// vacant is set while members is empty, as it is from the load until
	// a peer joins: written under mu, read without it (arrive).
	vacant atomic.Bool

	mu         sync.Mutex // guards everything below
	doc        *automerge.Doc
	exists     bool // the document has content: stored, or changes received
	members    map[string]*member
	emptySince time.Time
	evicted    bool

	// Persistence. pending holds chunks taken out of doc but not yet
	// stored; chunks counts what the store holds after its snapshot.
	dirty        bool
	pending      [][]byte
	chunks       int
	forceCompact bool
	// noCompact is set once a snapshot of the document did not load back:
	// its changes are stored as chunks from then on, never compacted over.
	noCompact bool

	// Durable before acknowledged (durable.go): applied counts the local
	// peers' messages that changed the document, stored how many of them
	// the store holds. While stored lags, every message that names the
	// document's heads waits in held, in the order it was made.
	applied, stored uint64
	held            []outgoing
	publish         func(documentID string, changes []byte) // nil outside a cluster

	ledger ledger // the guard's account of the document (guard.go)

	// Requests for a document the room does not have (lookup.go).
	asked        []askedPeer  // waiting peers, in the order they asked
	looking      bool         // a lookup is scheduled or running
	lookupGen    uint64       // the latest scheduling of the lookup; older ones do nothing
	foundRetries int          // lookups again because another node said it has it
	arriving     int          // messages with changes between acquire and apply
	deferred     bool         // a lookup waits for arriving to reach zero
	questions    []func(bool) // other nodes' Holds, waiting for arriving to reach zero

	mentions *mentionTracker // nil unless the hub reports mentions

	lastFanout      time.Time     // when the room last sent its changes out (fanout.go)
	fanoutScheduled bool          // a fan-out waits for the end of the window
	ackTime         time.Duration // smoothed time peers take to acknowledge a fan-out
}

// member is a peer of the room and the sync state the server keeps with it.
type member struct {
	peer Peer
	// state is made when first needed (syncState) and dropped while the
	// peer is level and quiet (syncstate.go); used is when it was last needed.
	state *automerge.SyncState
	used  time.Time
	// sentAt holds the document's heads when the peer was last sent a
	// sync message; nil before the first.
	sentAt []automerge.ChangeHash
	// ahead is set while the room lacks the document and the peer's last
	// message named heads the room does not know: the document is on its
	// way from this peer (lookup.go).
	ahead bool
	// expect holds the heads the peer will have once it has read what it
	// was sent, when the room knows them; nil when automerge's sync state
	// serves the peer (fanout.go).
	expect []automerge.ChangeHash
	// unacked holds the fan-outs the peer has not acknowledged yet,
	// oldest first, for the room's ack time (fanout.go).
	unacked []sentFanout
	// bare is set while the peer's last message said it has nothing of
	// the document (syncMessage.bare): a request or a reset.
	bare bool
	// whole is set once the room sent the bare peer the document's
	// changes, until the peer answers with a message that is not bare.
	// Meanwhile a bare message is not answered: the copy it asks for is
	// on its way (repeats).
	whole bool
}

func newRoom(id string) *room {
	r := &room{
		id:         id,
		loaded:     make(chan struct{}),
		members:    make(map[string]*member),
		emptySince: time.Now(),
	}
	r.vacant.Store(true)
	return r
}

// load reads the document from the store. A chunk that does not load is
// logged and skipped, so one damaged write cannot make a document
// unreadable.
func (r *room) load(ctx context.Context, s Store, h *Hub) {
	defer close(r.loaded)
	stored, err := s.Load(context.WithoutCancel(ctx), r.id)
	if errors.Is(err, ErrNotFound) {
		r.doc = automerge.New()
		return
	}
	if err != nil {
		r.loadErr = err
		return
	}
	if stored.Snapshot != nil {
		r.doc, err = automerge.Load(stored.Snapshot)
		if err != nil {
			// Reported and left as it is: nothing stored is deleted.
			h.documentUnloadable.Inc()
			h.log.Error("a stored snapshot does not load: the document is unavailable until it is repaired",
				"document", r.id, "err", err)
			r.loadErr = fmt.Errorf("snapshot: %w", err)
			return
		}
	} else {
		r.doc = automerge.New()
	}
	for i, c := range stored.Chunks {
		if err := r.doc.LoadIncremental(c); err != nil {
			h.chunkUnloadable.Inc()
			h.log.Error("skipping a stored chunk that does not load",
				"document", r.id, "chunk", i, "err", err)
			r.forceCompact = true
		}
	}
	r.chunks = len(stored.Chunks)
	r.exists = len(r.doc.Heads()) > 0
	if _, err := r.ledger.recordSince(r.doc, nil); err != nil {
		r.loadErr = fmt.Errorf("read the document's changes: %w", err)
		return
	}
	if r.mentions != nil {
		r.mentions.refresh()
		h.takeOverAtLoad(ctx, r, stored.Journals)
	}
	// What was loaded is already stored: start incremental saves from here.
	r.doc.SaveIncremental()
}

// join returns p's membership, adding p, with no sync state yet, if it is
// new or replaces an older connection with the same peer id.
func (r *room) join(p Peer) *member {
	m := r.members[p.ID()]
	if m == nil || m.peer != p {
		m = &member{peer: p}
		r.members[p.ID()] = m
		r.vacant.Store(false)
	}
	return m
}

// receiveSync applies a sync message from p, read as sm, and answers the
// room. It reports whether the document changed. counted says that the
// message was counted in r.arriving.
//
// A message carrying changes is first rehearsed in the sandbox, outside
// the room's lock (under applyMu, so that the document stays at the heads
// rehearsed on): acknowledgements and fan-outs go on meanwhile.
func (r *room) receiveSync(h *Hub, p Peer, msg SyncMessage, sm *syncMessage, counted bool) (changed bool, err error) {
	var in *admitted
	var rehearsal error
	var mentioned map[string]int // the text's mentions before this change, if the tracker needs them
	if len(sm.changes) > 0 {
		r.applyMu.Lock()
		defer r.applyMu.Unlock()
		if h.cfg.Sandbox != nil {
			in, rehearsal = r.rehearse(h, msg, sm)
		}
		// A read-only peer's changes are refused: they cost no read.
		if r.mentions != nil && rehearsal == nil && !msg.ReadOnly {
			mentioned, _ = r.readMentions(func(t *mentionTracker) bool { return t.needsBefore(p) }, false)
		}
	}
	r.mu.Lock()
	locked, lock := time.Now(), h.lockSync
	defer func() {
		lock.Observe(time.Since(locked).Seconds())
		r.mu.Unlock()
	}()
	defer r.resumeDeferred(h) // deferred calls run last first: after the count below
	if counted {
		defer func() { r.arriving-- }()
	}
	if r.evicted {
		return false, errEvicted
	}
	if rehearsal != nil {
		return false, rehearsal
	}
	if m := r.members[p.ID()]; m != nil && m.peer == p {
		if m.repeats(sm) {
			h.repeats.Inc()
			return false, nil // the whole document is on its way to it
		}
		if in == nil && !msg.Request && r.acknowledge(m, sm, locked) {
			lock = h.lockAck
			return false, nil // nothing to apply or answer
		}
	}
	if in == nil {
		if in, err = r.admit(h, msg, sm); err != nil {
			return false, err
		}
		if len(in.sm.changes) > 0 && r.storeBehind() {
			return false, ErrStoreBehind
		}
	}
	sm, refused, guarded := in.sm, in.refused, in.guarded
	m := r.join(p)
	m.bare = sm.bare()
	if r.mentions != nil && len(sm.changes) > 0 {
		if mentioned == nil && r.mentions.needsBefore(p) {
			// Not read above (changes a read-only peer may still send,
			// those the room has): read under the lock, as rarely as that.
			mentioned = countMentions(r.mentions.fields.text(r.doc))
		}
		r.mentions.before(mentioned, p)
	}
	before := r.doc.Heads()
	// A peer that has nothing (a client's first find) is sent everything,
	// built as a fan-out is: it needs no sync state, now or once level.
	empty := m.state == nil && r.exists && len(before) > 0 &&
		len(sm.heads) == 0 && len(sm.need) == 0 && len(sm.changes) == 0
	if !empty {
		if _, err := r.syncState(m).ReceiveMessage(sm.raw); err != nil {
			return false, fmt.Errorf("%w: %v", ErrBadSyncMessage, err)
		}
	}
	after := r.doc.Heads()
	changed = !sameHeads(before, after)
	if changed {
		r.accepted(h, p, before)
	}
	r.noteAhead(m, sm.heads)
	r.ledger.queueHeld(guarded, p.ID())
	r.noteDropped(h, guarded)
	switch {
	case empty:
		r.answerAuthor(m, nil, after)
	case changed && !msg.Request && len(sm.need) == 0 && r.knowsAll(sm.heads):
		r.answerAuthor(m, sm.heads, after)
	case msg.Request || changed || !sm.settled(after, m.sentAt, r.known):
		r.sendSync(m, after)
	}
	if len(sm.need) == 0 && sm.namesExactly(after) {
		m.expect = after // level with the room: served without automerge from now on
	}
	if msg.Request && !r.exists {
		r.ask(h, p)
	}
	if changed {
		r.fanout(h)
	}
	if refused {
		return changed, ErrReadOnly
	}
	return changed, nil
}

// admitted is a message the guard let through: sm without what a
// read-only peer may not write (refused says some was), and guarded, the
// guard's account of the changes it admitted and those it keeps waiting.
type admitted struct {
	sm      *syncMessage
	refused bool
	guarded *admission
}

// admit runs the guard on a message. The caller holds r.mu.
func (r *room) admit(h *Hub, msg SyncMessage, sm *syncMessage) (*admitted, error) {
	in := &admitted{sm: sm}
	if msg.ReadOnly {
		in.sm, in.refused = sm.stripForReadOnly(r.known, r.heads())
	}
	ad, err := r.ledger.admit(h.cfg.Limits, in.sm.changes, r.known)
	if err != nil {
		return nil, err
	}
	if ad.rewrite {
		in.sm = in.sm.withChanges(ad.apply)
	}
	in.guarded = ad
	return in, nil
}

// rehearse admits a message carrying changes and applies it in the
// sandbox at the document's heads, holding r.mu only to read the room.
// The caller holds r.applyMu, so the document stays as rehearsed until
// the message is applied.
func (r *room) rehearse(h *Hub, msg SyncMessage, sm *syncMessage) (*admitted, error) {
	r.mu.Lock()
	if r.evicted {
		r.mu.Unlock()
		return nil, errEvicted
	}
	in, err := r.admit(h, msg, sm)
	if err == nil && len(in.sm.changes) > 0 && r.storeBehind() {
		err = ErrStoreBehind // a read-only peer's changes, stripped, ask nothing of the store
	}
	var heads []automerge.ChangeHash
	if err == nil {
		heads = r.doc.Heads()
	}
	r.mu.Unlock()
	if err != nil || len(in.sm.changes) == 0 {
		return in, err
	}
	err = h.cfg.Sandbox.check(r.id, heads, in.sm.raw, r.read)
	if errors.Is(err, errSandboxFault) {
		return nil, fmt.Errorf("%w: %v", ErrRefused, err)
	}
	return in, err
}

// noteDropped reports queued changes the guard refused once they were
// ready. The caller holds r.mu.
func (r *room) noteDropped(h *Hub, ad *admission) {
	for _, d := range ad.dropped {
		h.queuedRefused.Inc()
		h.log.Warn("dropped a change that waited for a dependency: refused once ready",
			"document", r.id, "change", fmt.Sprintf("%x", d.hash[:8]), "err", d.err)
	}
}

// read runs f on the document under the room's lock.
func (r *room) read(f func(*automerge.Doc)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(r.doc)
}

// accepted records changes a local peer made: they are to be stored, and
// once stored, replicated; everything sent from now on waits for that.
func (r *room) accepted(h *Hub, p Peer, before []automerge.ChangeHash) {
	r.exists = true
	r.dirty = true
	r.applied++
	saved, err := r.ledger.recordSince(r.doc, before)
	if err != nil {
		h.log.Error("read accepted changes", "document", r.id, "err", err)
	}
	if r.publish != nil && len(saved) > 0 {
		r.sendWhenStored(outgoing{changes: saved})
	}
	if r.mentions != nil {
		r.mentions.changed(p, h.cfg.MentionSettle)
	}
}

func (r *room) heads() [][]byte {
	hs := r.doc.Heads()
	out := make([][]byte, len(hs))
	for i := range hs {
		out[i] = hs[i][:]
	}
	return out
}

// known reports whether the document has the change with this hash.
func (r *room) known(hash []byte) bool {
	var h automerge.ChangeHash
	copy(h[:], hash)
	_, err := r.doc.Change(h)
	return err == nil
}

// sendSync sends m what automerge says it lacks, if anything; heads are
// the document's now.
func (r *room) sendSync(m *member, heads []automerge.ChangeHash) {
	if msg, ok := r.syncState(m).GenerateMessage(); ok {
		data := msg.Bytes()
		if len(r.ledger.queued) > 0 {
			data = r.askForMissing(data)
		}
		r.sendWhenStored(outgoing{peer: m.peer, data: data})
		m.sentAt = heads
		m.expect, m.unacked = nil, nil // what it will have is automerge's to know
		if m.bare && carriesChanges(data) {
			m.whole = true
		}
	}
}

// askForMissing rewrites a sync message automerge made so that it asks
// for what the guard's queued changes wait for. automerge never sees those
// changes, so it asks for them, by the heads the peer named, instead of
// for their missing dependencies; a stock client does not send a change
// twice on one sync state, and would never send the dependency a bloom
// filter's false positive made it leave out. The caller holds r.mu.
func (r *room) askForMissing(data []byte) []byte {
	sm, err := parseSyncMessage(data)
	if err != nil {
		return data
	}
	var need [][]byte
	for _, h := range sm.need {
		var k [32]byte
		copy(k[:], h)
		if _, queued := r.ledger.queued[k]; !queued {
			need = append(need, h)
		}
	}
	need = sortedUnion(need, r.ledger.missing(r.known))
	return sm.withNeed(need)
}

// repeats reports whether sm, from m, asks for the whole document again
// while the whole document the room sent m is unanswered: a peer that
// never reads, asking again and again, would otherwise have a copy of a
// document of any size queued for it each time. A stock client answers
// the copy as soon as it has read it (with its new heads, or its own
// changes), and gets answers again from then on. Otherwise repeats
// records whether m said it has nothing. The caller holds the room's lock.
func (m *member) repeats(sm *syncMessage) bool {
	if !sm.bare() {
		m.bare, m.whole = false, false
		return false
	}
	if m.whole {
		return true
	}
	m.bare = true
	return false
}

// knowsAll reports whether the document has every change named.
func (r *room) knowsAll(heads [][]byte) bool {
	for _, h := range heads {
		if !r.known(h) {
			return false
		}
	}
	return true
}

// answerAuthor answers a peer whose message brought the document changes
// and named heads the document now has: the peer holds at least those
// heads, so the room sends it, built as a fan-out is, the changes it has
// beyond them (none, if it is level: then only the room's heads) and
// serves it without automerge from then on, as it does a reader. Left to
// automerge, a peer typing while others type would stay on its sync state:
// every fan-out to it generated for it alone and every acknowledgement
// from it received by automerge under the room's lock. The caller holds
// r.mu.
func (r *room) answerAuthor(m *member, had [][]byte, heads []automerge.ChangeHash) {
	from := make([]automerge.ChangeHash, len(had))
	for i := range had {
		copy(from[i][:], had[i])
	}
	cs, err := r.doc.Changes(from...)
	if err != nil {
		r.sendSync(m, heads)
		return
	}
	r.sendWhenStored(outgoing{peer: m.peer, data: syncWithChanges(heads, cs)})
	m.sentAt, m.expect = heads, heads
	if len(cs) > 0 {
		m.remember(headsKey(heads), time.Now())
		m.whole = m.whole || m.bare
	}
}

// relayEphemeral sends e to every peer of the room but its sender.
func (r *room) relayEphemeral(p Peer, e Ephemeral) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.evicted {
		return errEvicted
	}
	r.join(p)
	for id, m := range r.members {
		if id != p.ID() {
			m.peer.SendEphemeral(r.id, e)
		}
	}
	return nil
}

func (r *room) leave(h *Hub, p Peer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mentions != nil {
		if b := r.mentions.bursts[p.ID()]; b != nil && b.peer == p {
			r.mentions.arm(p.ID(), b, 0) // a leaving peer's mentions count at once
		}
	}
	if m := r.members[p.ID()]; m != nil && m.peer == p {
		delete(r.members, p.ID())
		r.ledger.unqueueFrom(p.ID())
		if len(r.members) == 0 {
			r.emptySince = time.Now()
			r.vacant.Store(true) // in a cluster, the bus stops carrying it
		}
		r.resumeDeferred(h)
	}
}

// evictable reports whether the room can leave memory; if so it marks it
// evicted so that late callers look it up again.
func (r *room) evictable(now time.Time, after time.Duration) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.members) > 0 || r.dirty || len(r.pending) > 0 || r.forceCompact || len(r.held) > 0 ||
		(r.mentions != nil && r.mentions.busy()) ||
		now.Sub(r.emptySince) < after {
		return false
	}
	r.evicted = true
	r.ledger.unqueueAll()
	return true
}

func sameHeads(a, b []automerge.ChangeHash) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i][:], b[i][:]) {
			return false
		}
	}
	return true
}
