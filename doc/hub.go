package doc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemhq/tandem/doc/guard"
	"github.com/tandemhq/tandem/internal/lifecycle"
)

// Hub owns the rooms of the documents in use on this node.
type Hub struct {
	cfg Config
	log *slog.Logger

	mu     sync.Mutex // guards rooms and closed
	rooms  map[string]*room
	closed bool

	dirtyMu sync.Mutex // guards dirty; taken after a room's lock, never before
	dirty   map[*room]struct{}

	flushMu sync.Mutex    // serializes flushes: one writer per document at a time
	kick    chan struct{} // wakes the flusher: a room changed

	flushSeconds prometheus.Histogram
	// lockSeconds is how long a peer's message held its room's lock, by
	// kind: an acknowledgement (no changes, nothing needed, the room's
	// heads) or any other sync message.
	lockAck, lockSync prometheus.Observer
	// Requests for a document not here (lookup.go): how they ended, and
	// the lookups (store read again, cluster asked) they took.
	requestsArrived, requestsUnavailable prometheus.Counter
	lookups                              prometheus.Counter
	// catchUps counts rooms that found changes in the store after a gap
	// in what the bus carried (replica.go).
	catchUps prometheus.Counter
	// Integrity events: a queued change refused once it was ready, a
	// stored chunk or snapshot that did not load.
	queuedRefused, chunkUnloadable, documentUnloadable, remoteDropped, seqTaken prometheus.Counter
	// waiting sums the bytes of changes every room's guard keeps waiting
	// for a dependency (Limits.WaitingBytes); checking what the messages
	// being checked hold (Limits.CheckBytes).
	waiting, checking atomic.Int64
	// checkHook, if set (tests), is called as a message's changes are
	// about to be read and checked, without the room's lock (room.admit).
	checkHook func(documentID string)
	// repeats counts requests left unanswered: their peer had not yet
	// answered the whole document it was sent (member.repeats).
	repeats prometheus.Counter
	// savesPending counts the rooms whose save is decided and not done
	// (saved.go): waiting for quiet, for the saver, or running.
	savesPending prometheus.Gauge
	// copiedSave is held by the one save that copied its room's changes
	// when it was decided rather than at its turn (saved.go).
	copiedSave atomic.Bool
	// saves and savesFailed count the saved documents made for new
	// readers (saved.go).
	saves, savesFailed prometheus.Counter
	// readersWaited counts new readers that waited for a save, and
	// readersEarly those sent a stored one while the document loaded
	// (saved.go).
	readersWaited, readersEarly prometheus.Counter

	refusals *guard.Refusals // refused changes, remembered by hash
	// syncStates sums the sync states kept per connection (syncstate.go).
	syncStates *syncStates

	background lifecycle.Background // timers and retries off the loop, waited for by Close

	// The document lane (cluster.go): other nodes' changes, heads and
	// wants, handled in order by laneLoop.
	lane chan laneWork

	loop      lifecycle.Loop
	stop      chan struct{} // closed by Close
	closeOnce sync.Once
	closeErr  error
}

// NewHub makes a hub; it starts nothing: Run writes, evicts and handles
// other nodes' messages, and Close stops it.
func NewHub(cfg Config) (*Hub, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	h := &Hub{
		cfg:   cfg,
		log:   cfg.Logger,
		rooms: make(map[string]*room),
		dirty: make(map[*room]struct{}),
		kick:  make(chan struct{}, 1),
		stop:  make(chan struct{}),

		lane: make(chan laneWork, laneSize),

		flushSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tandem_storage_flush_seconds",
			Help:    "Time to write one batch of accepted changes to the store.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
	}
	h.refusals = guard.NewRefusals(cfg.RefusedChanges, cfg.RefusedChangeBytes, cfg.Registerer)
	h.syncStates = newSyncStates(cfg.SyncStateBytes)
	lockSeconds := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "tandem_document_lock_seconds",
		Help:    "How long one peer's sync message held its document's lock, by kind (acknowledgement, sync).",
		Buckets: prometheus.ExponentialBuckets(1e-6, 4, 12),
	}, []string{"kind"})
	h.lockAck, h.lockSync = lockSeconds.WithLabelValues("acknowledgement"), lockSeconds.WithLabelValues("sync")
	waited := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tandem_document_requests_waited_total",
		Help: "Requests for a document this node did not have, by how they ended: arrived (the document came while the peer waited) or unavailable.",
	}, []string{"outcome"})
	h.requestsArrived, h.requestsUnavailable = waited.WithLabelValues("arrived"), waited.WithLabelValues("unavailable")
	h.lookups = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tandem_document_lookups_total",
		Help: "Lookups for a requested document after its grace window: the store read again and, in a cluster, the other nodes asked.",
	})
	h.catchUps = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tandem_document_store_catchups_total",
		Help: "Documents in memory that found other nodes' changes in the store after a gap in what the bus carried (a peer came to a room without peers, or Redis was unreachable).",
	})
	h.repeats = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tandem_document_requests_repeated_total",
		Help: "Requests (or sync resets) left unanswered because the whole document sent to the same peer was not yet answered: the copy asked for is on its way.",
	})
	integrity := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tandem_document_integrity_total",
		Help: "Damage kept out of documents, by event: queued_change_refused (a change that waited for a dependency failed the guard's checks once ready, and was dropped), chunk_unloadable (a stored chunk did not load and was skipped), document_unloadable (a stored snapshot did not load: the document is unavailable, nothing deleted), remote_change_dropped (a change from the store or another node waited for a dependency past the room's bound and was let go: the heads exchange and the store bring it again), seq_taken (a change from the store or another node left out: the document holds another change of its actor's sequence number, which two nodes took at once).",
	}, []string{"event"})
	h.queuedRefused = integrity.WithLabelValues("queued_change_refused")
	h.chunkUnloadable = integrity.WithLabelValues("chunk_unloadable")
	h.documentUnloadable = integrity.WithLabelValues("document_unloadable")
	h.remoteDropped = integrity.WithLabelValues("remote_change_dropped")
	h.seqTaken = integrity.WithLabelValues("seq_taken")
	saves := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tandem_document_saves_total",
		Help: "Large documents saved as automerge saves a document, for new readers (Config.SaveDocument), by outcome: saved, failed (the readers are sent the changes).",
	}, []string{"outcome"})
	h.saves, h.savesFailed = saves.WithLabelValues("saved"), saves.WithLabelValues("failed")
	h.readersWaited = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tandem_document_readers_waited_for_save_total",
		Help: "New readers of a large document that waited for its save, rather than be sent much of it as changes.",
	})
	h.readersEarly = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tandem_document_readers_sent_early_total",
		Help: "New readers of a large document sent its stored save while the document loaded.",
	})
	h.savesPending = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tandem_document_saves_pending",
		Help: "Large documents whose save for new readers is decided and not done: waiting for the document to go quiet, for the saver's turn, or under way.",
	})
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(h.flushSeconds, h.syncStates.gauge, lockSeconds, waited, h.lookups, h.catchUps, h.repeats, integrity, saves, h.savesPending, h.readersWaited, h.readersEarly,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "tandem_documents", Help: "Documents in memory on this node.",
			}, func() float64 { return float64(h.Stats().Rooms) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "tandem_document_peers", Help: "Peers syncing documents on this node, summed over documents.",
			}, func() float64 { return float64(h.Stats().Peers) }),
		)
	}
	return h, nil
}

// Run works until ctx ends or Close: it writes accepted changes to the
// store as they come (and nothing names a change before it is stored),
// handles other nodes' document messages in order and evicts idle rooms.
// Without Run, changes are stored only by Flush and Close.
func (h *Hub) Run(ctx context.Context) error {
	return h.loop.Run(ctx, func(ctx context.Context) error {
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); h.flushLoop(ctx) }()
		go func() { defer wg.Done(); h.laneLoop(ctx) }()
		wg.Wait()
		return nil
	})
}

// SyncMessage is a sync or request message from a peer.
type SyncMessage struct {
	DocumentID string
	// Data is the automerge sync message.
	Data []byte
	// Request is set when the peer asks for a document it does not have.
	Request bool
	// ReadOnly peers receive the document but their changes are refused.
	ReadOnly bool
}

// Sync handles a sync or request message from peer for the document:
// it applies the changes it carries, answers the peer, and sends every other
// peer of the room what changed. A request for a document that nobody has
// is answered with the room's empty sync message, then doc-unavailable
// once its grace has passed (lookup.go); the peer stays in the room and receives
// the document if another peer creates it later. A read-only peer's
// changes are dropped and ErrReadOnly returned, after the peer was answered.
// A message the guard refuses (ErrLimit, ErrRefused) is remembered, and a
// later one carrying the same refused change is refused by its hash alone
// (refused.go).
func (h *Hub) Sync(ctx context.Context, p Peer, m SyncMessage) error {
	// Read outside the room's lock; refused before the room is loaded.
	sm, err := parseSyncMessage(m.Data)
	if errors.Is(err, errUnsafe) {
		err = fmt.Errorf("%w: %v", ErrRefused, err)
		h.refusals.Refused(m.DocumentID, nil, err, h.cfg.Limits)
		return err
	}
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadSyncMessage, err)
	}
	if !m.ReadOnly { // a reader's changes are dropped unread anyway
		if err := h.refusals.Check(m.DocumentID, sm.changes); err != nil {
			return err
		}
	}
	var early *earlyReader
	if sm.bare() && sm.msg.HasFlags {
		early = &earlyReader{peer: p, readOnly: m.ReadOnly}
	}
	for {
		r, err := h.acquireFor(ctx, m.DocumentID, early)
		if err != nil {
			return err
		}
		carries := len(sm.changes) > 0
		if carries {
			// Counted until applied: a request meanwhile waits for it.
			r.mu.Lock()
			r.arriving++
			r.mu.Unlock()
		}
		err = r.receiveSync(h, p, m, sm, carries)
		if errors.Is(err, errEvicted) {
			continue
		}
		if errors.Is(err, errUnsafe) {
			// Its sync state was refused, not its changes.
			h.refusals.Refused(m.DocumentID, nil, err, h.cfg.Limits)
		} else if errors.Is(err, ErrLimit) || errors.Is(err, ErrRefused) {
			h.refusals.Refused(m.DocumentID, sm.changes, err, h.cfg.Limits)
		}
		return err
	}
}

// Ephemeral relays an ephemeral message from p to every other peer of the
// document, and makes p a peer of the room if it was not yet.
func (h *Hub) Ephemeral(ctx context.Context, p Peer, documentID string, e Ephemeral) error {
	for {
		r, err := h.acquire(ctx, documentID)
		if err != nil {
			return err
		}
		if err := r.relayEphemeral(h, p, e); !errors.Is(err, errEvicted) {
			if err == nil {
				h.publishEphemeral(documentID, e) // the document's peers on other nodes
			}
			return err
		}
	}
}

// Leave removes p from the document's room. A peer that has since been
// replaced by a newer connection with the same peer id is left alone.
func (h *Hub) Leave(p Peer, documentID string) {
	h.mu.Lock()
	r := h.rooms[documentID]
	h.mu.Unlock()
	if r != nil {
		r.leave(h, p)
	}
}

// Stats counts what the hub holds in memory.
type Stats struct {
	Rooms int
	Peers int
}

// roomsNow returns the rooms in memory now.
func (h *Hub) roomsNow() []*room {
	h.mu.Lock()
	defer h.mu.Unlock()
	rooms := make([]*room, 0, len(h.rooms))
	for _, r := range h.rooms {
		rooms = append(rooms, r)
	}
	return rooms
}

// Stats returns the current counts.
func (h *Hub) Stats() Stats {
	rooms := h.roomsNow()
	s := Stats{Rooms: len(rooms)}
	for _, r := range rooms {
		r.mu.Lock()
		s.Peers += len(r.members)
		r.mu.Unlock()
	}
	return s
}

// loadedRoom returns the room of a document if it is in memory and
// loaded, nil otherwise.
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

// acquire returns the loaded room of a document, loading it on first use.
func (h *Hub) acquire(ctx context.Context, documentID string) (*room, error) {
	return h.acquireFor(ctx, documentID, nil)
}

// acquireFor is acquire for a reader that has nothing of the document and
// reads a saved one (nil: none): should this call load the document, the
// reader may be sent it before the load is done (saved.go: early).
func (h *Hub) acquireFor(ctx context.Context, documentID string, early *earlyReader) (*room, error) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, ErrClosed
	}
	r, ok := h.rooms[documentID]
	if !ok {
		r = newRoom(documentID)
		r.guard = guard.NewLedger(r.log, &h.waiting, &h.checking)
		if h.cfg.Cluster != nil {
			r.publish = h.publishChanges
		}
		if h.cfg.Observe != nil {
			r.obs = h.cfg.Observe(observed{h, r})
		}
		h.rooms[documentID] = r
	}
	h.mu.Unlock()
	if !ok {
		r.load(ctx, h.cfg.Store, h, early)
	}
	select {
	case <-r.loaded:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if r.loadErr != nil {
		h.mu.Lock()
		if h.rooms[documentID] == r {
			delete(h.rooms, documentID)
		}
		h.mu.Unlock()
		return nil, fmt.Errorf("load document %s: %w", documentID, r.loadErr)
	}
	if ok {
		r.arrive() // the load, if this call made it, was the read
	}
	r.catchUp(ctx, h)
	return r, nil
}

// evictIdle drops rooms whose last peer left more than EvictAfter ago and
// whose changes are all stored.
func (h *Hub) evictIdle(now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for id, r := range h.rooms {
		if r.evictable(h, now) {
			delete(h.rooms, id)
		}
	}
}

// Close refuses new work, stops Run and waits for it, then writes every
// pending change. The store stays open: it is its opener's to close, after
// this. Close is safe to call more than once.
func (h *Hub) Close(ctx context.Context) error {
	h.closeOnce.Do(func() {
		h.mu.Lock()
		h.closed = true
		h.mu.Unlock()
		h.background.Refuse()
		close(h.stop) // a ReceiveRemote waiting for the lane gives up
		_, err := h.loop.Stop(ctx)
		h.background.Close()
		h.closeErr = errors.Join(err, h.Flush(ctx))
	})
	return h.closeErr
}

// goAfter runs f on a goroutine of its own once d has passed, as the
// hub's background work: not once the hub is closing, and Close waits
// for it.
func (h *Hub) goAfter(d time.Duration, f func()) { h.background.After(d, f) }

// RefusalStats returns the hub's refusal counts.
func (h *Hub) RefusalStats() guard.RefusalStats {
	return h.refusals.Stats()
}
