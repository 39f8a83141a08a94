package doc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tandemhq/tandem/doc/amcheck"
	"github.com/tandemhq/tandem/doc/amsync"
	"github.com/tandemhq/tandem/doc/guard"
	"github.com/tandemhq/tandem/doc/store"
)

// errEvicted tells a caller that raced with eviction to look the room up
// again.
var errEvicted = errors.New("room evicted")

// room is one document in memory with the peers syncing it.
type room struct {
	id      string
	loaded  chan struct{} // closed once log is loaded (or loadErr set)
	loadErr error         // written before loaded is closed

	// applyMu is held, before mu, by whoever changes the document: a
	// local peer's message carrying changes, another node's changes, a
	// catch-up. The observer works under applyMu alone (Observer.Applying,
	// Room.Hold), so what it reads is the document's, while
	// acknowledgements and fan-outs, under mu alone, go on.
	applyMu sync.Mutex
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

	mu   sync.Mutex // guards everything below
	log  *amsync.Log
	left []string // peers that left while applyMu was held (dropLeft)
	// untold are the runs of changes the log took that the observer is
	// yet to be told of (tellApplied): written by take and emptied by
	// tellApplied, under applyMu and mu; read by tellApplied under
	// applyMu and by takeWrite under mu.
	untold     []appliedRun
	exists     bool // the document has content: stored, or changes received
	members    map[string]*member
	emptySince time.Time
	evicted    bool

	// Persistence (durable.go). unstored are the log indices of the
	// changes local peers made that are not yet taken for a write (every
	// other change is stored: apply.go); pending holds the chunks taken
	// but not yet stored; chunks counts what the store holds after its
	// snapshot.
	dirty        bool
	unstored     []int32
	pending      [][]byte
	chunks       int
	forceCompact bool

	// The saved document for new readers (saved.go): a save is under
	// way; the log's bytes when the last was taken; the last is not yet
	// stored.
	saving, savedDirty bool
	saveTried          int64         // the log's bytes when its last save took them
	savedBytes         int64         // the bytes of the changes the saved document holds
	waitTimer          bool          // a deadline for the readers waiting for a save is set
	hurry              chan struct{} // closed when a reader waits for the save under way; nil once closed
	quiet              *time.Timer   // saves once the document goes quiet; nil until needed
	quietDue           bool          // quiet is set to go off

	// Durable before acknowledged (durable.go): applied counts the local
	// peers' messages that changed the document, stored how many of them
	// the store holds. While stored lags, every message that names the
	// document's heads waits in untilStored, in the order it was made.
	applied, stored uint64
	untilStored     []outgoing
	publish         func(documentID string, changes []byte) // nil outside a cluster

	guard *guard.Ledger // the guard's account of the document

	// Requests for a document the room does not have (lookup.go).
	asked        []askedPeer  // waiting peers, in the order they asked
	looking      bool         // a lookup is scheduled or running
	lookupGen    uint64       // the latest scheduling of the lookup; older ones do nothing
	foundRetries int          // lookups again because another node said it has it
	arriving     int          // messages with changes between acquire and apply
	deferred     bool         // a lookup waits for arriving to reach zero
	questions    []func(bool) // other nodes' Holds, waiting for arriving to reach zero

	obs Observer // nil unless Config.Observe is set (observer.go)

	// paceAt is when a fan-out to peers held back for their answers is
	// due (fanout.go); zero if none is scheduled.
	paceAt time.Time
	// writer and wroteAt are the peer that sent the log's last change
	// ("" for the store, another node or the API) and when, otherAt when
	// another last did; gather says that was within gatherWriters: readers'
	// messages gather (Config.SyncGather, fanout.go).
	writer           string
	wroteAt, otherAt time.Time
	gather           bool
	// whole is the last copy of the whole document sent a peer that had
	// nothing, while a connection's queue still holds it (fanout.go).
	whole wholeCopy
}

// member is a peer of the room and the sync state the server keeps with it.
type member struct {
	peer Peer
	sync *amsync.State
	// ahead is set while the room lacks the document and the peer's last
	// message named heads the room does not know: the document is on its
	// way from this peer (lookup.go).
	ahead bool
	// bare is set while the peer's last message said it has nothing of
	// the document (syncMessage.bare): a request or a reset.
	bare bool
	// whole is set once the room sent the bare peer the document's
	// changes, until the peer answers with a message that is not bare.
	// Meanwhile a bare message is not answered: the copy it asks for is
	// on its way (repeats).
	whole bool
	// kept is what its sync state was last charged (syncstate.go).
	kept int64
	// saveWait is where the bare peer stands with the save it may wait
	// for before it is sent the document (saved.go: waitForSave).
	saveWait uint8
	// early is set while the request of a peer sent the stored save
	// before the load (saved.go) is yet to come through: it is answered.
	early bool
}

func newRoom(id string) *room {
	r := &room{
		id:         id,
		loaded:     make(chan struct{}),
		log:        amsync.NewLog(),
		members:    make(map[string]*member),
		emptySince: time.Now(),
	}
	r.guard = guard.NewLedger(r.log, nil, nil)
	r.vacant.Store(true)
	return r
}

// load reads the document from the store. A chunk that does not load is
// logged and skipped, so one damaged write cannot make a document
// unreadable.
func (r *room) load(ctx context.Context, s store.Store, h *Hub, early *earlyReader) {
	defer close(r.loaded)
	stored, err := s.Load(context.WithoutCancel(ctx), r.id)
	if errors.Is(err, store.ErrNotFound) {
		return
	}
	if err != nil {
		r.loadErr = err
		return
	}
	sentEarly := early != nil && h.cfg.SaveDocument != nil && r.sendEarly(early.peer, stored)
	size := amcheck.Chunks(stored.Snapshot)
	for _, c := range stored.Chunks {
		size += amcheck.Chunks(c)
	}
	all := make([]guard.Change, 0, size)
	if stored.Snapshot != nil {
		all, err = readChanges(all, stored.Snapshot)
		if err != nil {
			// Reported and left as it is: nothing stored is deleted.
			h.documentUnloadable.Inc()
			h.log.Error("a stored snapshot does not load: the document is unavailable until it is repaired",
				"document", r.id, "err", err)
			r.loadErr = fmt.Errorf("snapshot: %w", err)
			return
		}
	}
	for i, c := range stored.Chunks {
		if all, err = readChanges(all, c); err != nil {
			h.chunkUnloadable.Inc()
			h.log.Error("skipping a stored chunk that does not load",
				"document", r.id, "chunk", i, "err", err)
			r.forceCompact = true
		}
	}
	r.take(h, nil, r.guard.AdmitStored(h.cfg.Limits, all, r.log.HasBytes))
	r.tellApplied(h)
	r.guard.Release()
	r.chunks = len(stored.Chunks)
	if stored.Snapshot != nil && savedChunk(stored.Snapshot) {
		r.forceCompact = true // written again as change chunks
	}
	r.mu.Lock()
	if stored.Saved != nil {
		r.takeStoredSaved(stored.Saved)
	}
	if sentEarly {
		m := r.join(h, early.peer, early.readOnly)
		m.bare, m.whole, m.early = true, true, true // its request is answered
		h.readersEarly.Inc()
	}
	r.maybeSave(h, true)
	r.mu.Unlock()
	if r.obs != nil {
		// Last: the observer may queue the room for a write, which reads
		// what the load wrote without the lock.
		r.obs.Loaded(ctx, stored.Journals)
	}
}

// join returns p's membership, adding p, with a new sync state, if it is
// new or replaces an older connection with the same peer id.
func (r *room) join(h *Hub, p Peer, readOnly bool) *member {
	m := r.members[p.ID()]
	if m == nil || m.peer != p {
		if m != nil {
			m.release(h) // an older connection of the same peer id
		}
		m = &member{peer: p, sync: amsync.NewState()}
		m.sync.Spacing = h.cfg.SyncSpacing
		r.members[p.ID()] = m
		r.vacant.Store(false)
	}
	m.sync.ReadOnly = readOnly
	return m
}

// receiveSync applies a sync message from p, read as sm, and answers the
// room. counted says that the message was counted in r.arriving.
//
// A message carrying changes is admitted by the guard, in Go, and its
// changes go into the log as the bytes they came in: nothing on this path
// calls automerge.
func (r *room) receiveSync(h *Hub, p Peer, msg SyncMessage, sm *syncMessage, counted bool) error {
	if len(sm.changes) > 0 {
		r.applyMu.Lock()
		defer r.unlockApply()
		// A read-only peer's changes are refused: the observer is not told.
		if r.obs != nil && !msg.ReadOnly {
			r.obs.Applying(p)
		}
		if !msg.ReadOnly {
			// Deferred calls run last first: once the room's lock is let
			// go, the observer is told what the log took, then the
			// message gives back what its changes' lists held.
			defer r.guard.Release()
			defer r.tellApplied(h)
		}
	}
	return r.receiveLocked(h, p, msg, sm, counted)
}

// receiveLocked is receiveSync under the room's lock, but for the check
// of the message's changes (admitUnlocked).
func (r *room) receiveLocked(h *Hub, p Peer, msg SyncMessage, sm *syncMessage, counted bool) error {
	r.mu.Lock()
	locked, lock := time.Now(), h.lockSync
	var held time.Duration // before the check, if any
	defer func() {
		lock.Observe((held + time.Since(locked)).Seconds())
		r.mu.Unlock()
	}()
	defer r.resumeDeferred(h) // deferred calls run last first: after the count below
	if counted {
		defer func() { r.arriving-- }()
	}
	if r.evicted {
		return errEvicted
	}
	if m := r.members[p.ID()]; m != nil && m.peer == p && m.repeats(sm) {
		if m.early {
			m.early = false // its own request, answered before the load
		} else {
			h.repeats.Inc()
		}
		return nil // the whole document is on its way to it
	}
	if err := amsync.CheckHeads(r.log, sm.msg); err != nil {
		return fmt.Errorf("%w: %w: %w", ErrRefused, errUnsafe, err)
	}
	fits := func() error {
		if !h.syncStates.fits(p, holds(sm.msg)) {
			return fmt.Errorf("%w: %w: it may keep %d bytes of them", ErrRefused, errSyncState, h.cfg.SyncStateBytes)
		}
		return nil
	}
	if err := fits(); err != nil {
		return err
	}
	var ad *guard.Admission
	var err error
	changed := false
	refused := msg.ReadOnly && len(sm.changes) > 0
	if len(sm.changes) > 0 && !msg.ReadOnly {
		held = time.Since(locked)
		ad, err = r.admitUnlocked(h, sm.changes)
		locked = time.Now()
		if err != nil {
			return err
		}
		if err := fits(); err != nil {
			return err // what it is owed grew meanwhile
		}
		if len(ad.Apply) > 0 && r.storeBehind() {
			return ErrStoreBehind
		}
	}
	m := r.join(h, p, msg.ReadOnly)
	if m.bare = sm.bare(); !m.bare {
		m.saveWait = saveNotWaited
	}
	before := r.log.Heads()
	if ad != nil {
		changed = r.take(h, p, ad)
	}
	if !changed && len(sm.changes) == 0 && len(sm.msg.Need) == 0 && r.log.IsHeads(sm.msg.Heads) {
		lock = h.lockAck // an acknowledgement: the peer is level
	}
	r.noteAhead(m, sm.msg.Heads)
	m.sync.Receive(r.log, sm.msg, before)
	r.answer(h, m, nil)
	if msg.Request && !r.exists {
		r.ask(h, p)
	}
	if changed {
		r.fanout(h, m)
		r.maybeSave(h, false)
	}
	if refused {
		return ErrReadOnly
	}
	return nil
}

// admitUnlocked reads a message's changes, each whole document among
// them into its changes, and has the guard check them, without the room's
// lock, which the caller holds and holds again once they are checked
// (even if the check panics). applyMu, which the caller holds too, keeps
// the log and the guard's ledger still meanwhile: whatever changes them
// holds it, but for the waiting changes of a peer that leaves, which
// leave leaves to whoever holds applyMu (dropLeft). Acknowledgements,
// fan-outs, ephemerals, leaves and the hub's writes, which take the lock
// alone, go on: a large document, or one crafted to take long, takes its
// sender's time, not its room's.
func (r *room) admitUnlocked(h *Hub, chunks [][]byte) (*guard.Admission, error) {
	r.mu.Unlock()
	defer r.mu.Lock()
	if h.checkHook != nil {
		h.checkHook(r.id)
	}
	changes, err := r.expandDocuments(h.cfg.Limits, chunks)
	if err != nil {
		return nil, err
	}
	return r.guard.Admit(h.cfg.Limits, changes, r.log.HasBytes)
}

// unlockApply lets go of r.applyMu, under r.mu, first dropping the
// waiting changes of the peers that left while it was held (dropLeft).
// applyMu is let go only under mu, so that a leave that found it held,
// and then takes mu, finds it held still, and left to drop, or free.
func (r *room) unlockApply() {
	r.mu.Lock()
	r.dropLeft()
	r.applyMu.Unlock()
	r.mu.Unlock()
}

// dropLeft drops the waiting changes of the peers that left while
// r.applyMu was held, but for those that are back. The caller holds
// r.applyMu and r.mu.
func (r *room) dropLeft() {
	for _, id := range r.left {
		if r.members[id] == nil {
			r.guard.DropFrom(id)
		}
	}
	r.left = nil
}

// record follows the changes the log took in the guard's ledger.
func (r *room) record(added []guard.Change) {
	r.guard.Record(added)
}

// noteDropped reports queued changes the guard refused once they were
// ready. The caller holds r.mu.
func (r *room) noteDropped(h *Hub, ad *guard.Admission) {
	for _, d := range ad.Dropped {
		if errors.Is(d.Err, guard.ErrSeqTaken) {
			h.seqTaken.Inc()
			h.log.Warn("left out a stored change: the document holds another change of its actor's sequence number (taken by two nodes at once)",
				"document", r.id, "change", fmt.Sprintf("%x", d.Hash[:8]), "err", d.Err)
			continue
		}
		h.queuedRefused.Inc()
		h.log.Warn("dropped a change that waited for a dependency: refused once ready",
			"document", r.id, "change", fmt.Sprintf("%x", d.Hash[:8]), "err", d.Err)
	}
}

// heads returns the document's heads as a message holds them.
func (r *room) heads() [][]byte { return headsBytes(r.log.Heads()) }

// known reports whether the document has the change with this hash.
func (r *room) known(hash []byte) bool { return r.log.HasBytes(hash) }

// repeats reports whether sm, from m, asks for the whole document again
// while the whole document the room sent m is unanswered: a peer that
// never reads, asking again and again, would otherwise have a copy of a
// document of any size queued for it each time. A stock client answers
// the copy as soon as it has read it (with its new heads, or its own
// changes), and gets answers again from then on. Otherwise repeats
// records whether m said it has nothing. The caller holds the room's lock.
func (m *member) repeats(sm *syncMessage) bool {
	if !sm.bare() {
		m.bare, m.whole, m.saveWait = false, false, saveNotWaited
		return false
	}
	if m.whole {
		return true
	}
	m.bare = true
	return false
}

// relayEphemeral sends e to every peer of the room but its sender.
func (r *room) relayEphemeral(h *Hub, p Peer, e Ephemeral) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.evicted {
		return errEvicted
	}
	if m := r.members[p.ID()]; m == nil || m.peer != p {
		r.join(h, p, false)
	}
	for id, m := range r.members {
		if id != p.ID() {
			m.peer.SendEphemeral(r.id, e)
		}
	}
	return nil
}

func (r *room) leave(h *Hub, p Peer) {
	// The peer's waiting changes are the ledger's, which a message's
	// check reads under applyMu alone: dropped now if no change is
	// under way, else by whoever holds applyMu, as it lets go (dropLeft).
	// A leave never waits for a check.
	applying := r.applyMu.TryLock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if applying {
		defer r.applyMu.Unlock() // under mu (unlockApply)
	}
	if r.obs != nil {
		r.obs.Left(p)
	}
	if m := r.members[p.ID()]; m != nil && m.peer == p {
		m.release(h)
		delete(r.members, p.ID())
		if applying {
			r.guard.DropFrom(p.ID())
		} else {
			r.left = append(r.left, p.ID())
			if r.applyMu.TryLock() { // let go before this took mu
				r.dropLeft()
				r.applyMu.Unlock()
			}
		}
		if len(r.members) == 0 {
			r.emptySince = time.Now()
			r.vacant.Store(true) // in a cluster, the bus stops carrying it
		}
		r.resumeDeferred(h)
	}
}

// evictable reports whether the room can leave memory; if so it marks it
// evicted so that late callers look it up again.
func (r *room) evictable(h *Hub, now time.Time) bool {
	// Under the hub's lock: a room busy now (a large message being
	// admitted, say) is not idle, and waiting for it would hold up
	// every other document's acquire.
	if !r.mu.TryLock() {
		return false
	}
	defer r.mu.Unlock()
	if !r.applyMu.TryLock() {
		return false // a change under way: its check reads the ledger
	}
	defer r.applyMu.Unlock() // under mu (unlockApply)
	after := h.cfg.EvictAfter
	select {
	case <-r.loaded: // the load writes the log without the lock
		if r.log.Len() == 0 && r.arriving == 0 && len(r.questions) == 0 && !r.deferred {
			// A document with no change here, and none on its way
			// (arriving, with questions and a lookup waiting for it),
			// keeps nothing worth keeping, and a client asking for
			// absent documents
			// (connect, ask for many, leave, again) would otherwise
			// keep a room each for EvictAfter.
			after = 0
		}
	default:
	}
	if len(r.members) > 0 || r.dirty || len(r.pending) > 0 || r.forceCompact || len(r.untilStored) > 0 ||
		now.Sub(r.emptySince) < after {
		return false
	}
	if r.obs != nil && r.obs.Busy() { // asked last: on false it is gone
		return false
	}
	r.evicted = true
	r.guard.DropAll()
	r.stopQuiet(h)
	return true
}
