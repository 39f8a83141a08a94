package webhook

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/tandemhq/tandem/internal/lifecycle"
)

// Queue is where deliveries are queued: the node's River client
// (notify.Service.Queue), in the transaction that decides their event.
type Queue interface {
	InsertManyTx(ctx context.Context, tx *sql.Tx, params []river.InsertManyParams) ([]*rivertype.JobInsertResult, error)
}

// Hooks decides the events and delivers them.
type Hooks struct {
	// Fixed after New.
	cfg    Config
	keys   [][]byte // each signs every delivery
	eps    []*endpoint
	byKey  map[string]*endpoint
	sends  map[string]bool // the event types sent
	store  *store
	log    *slog.Logger
	m      *metrics
	queue  atomic.Pointer[Queue] // set by UseQueue, before Run
	handed chan presenceItem     // the recorder's batches, waiting (Tee)

	mu           sync.Mutex // guards pending, pendingBytes and flushing
	pending      map[string]*docChange
	pendingBytes int // what pending's entries are charged (docChange.cost)
	// flushSoon asks for a flush before its time: pending is half full.
	flushSoon chan struct{}
	// flushing is the batch a flush is writing, taken out of pending:
	// the sweep asks both whether a window's document has changes here
	// that are not written yet.
	flushing map[string]*docChange

	handoff atomic.Int64 // intervals in handed

	// wmu guards windows: on SQLite, where this node is the database's
	// only writer, the open windows as this node last wrote them
	// (changes_window.go).
	wmu       sync.Mutex
	windows   map[string]*knownWindow
	forgotten map[string]bool // during a flush: the windows a sweep closed

	bmu   sync.Mutex     // guards depth and added
	depth map[string]int // by endpoint key: deliveries waiting at the last count
	added map[string]int // by endpoint key: queued here since

	loop lifecycle.Loop
}

// New checks cfg and prepares the webhook tables; it starts nothing. The
// deliveries' worker and queues go to the node's River client through
// Register (notify.Config.Jobs) and the client comes back through
// UseQueue.
func New(ctx context.Context, cfg Config) (*Hooks, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	eps, err := parseEndpoints(cfg.Endpoints)
	if err != nil {
		return nil, err
	}
	if len(eps) == 0 {
		return nil, fmt.Errorf("%w: no endpoint", ErrConfig)
	}
	keys, err := parseSecrets(cfg.Secret)
	if err != nil {
		return nil, err
	}
	h := &Hooks{
		cfg: cfg, keys: keys, eps: eps, byKey: map[string]*endpoint{}, sends: map[string]bool{},
		store:     &store{db: cfg.DB, postgres: cfg.Postgres},
		log:       cfg.Logger.With("component", "webhook"),
		m:         newMetrics(cfg.Registerer),
		handed:    make(chan presenceItem, 1024),
		pending:   map[string]*docChange{},
		windows:   map[string]*knownWindow{},
		flushSoon: make(chan struct{}, 1),
		depth:     map[string]int{}, added: map[string]int{},
	}
	for _, ep := range eps {
		h.byKey[ep.key] = ep
	}
	for _, e := range cfg.Events {
		h.sends[e] = true
	}
	if err := h.store.migrate(ctx); err != nil {
		return nil, err
	}
	return h, nil
}

// Register adds the delivery worker and a queue per endpoint (Concurrency
// workers each) to a River configuration: notify.Config.Jobs.
func (h *Hooks) Register(w *river.Workers, queues map[string]river.QueueConfig) {
	river.AddWorker(w, &deliveryWorker{h: h})
	for _, ep := range h.eps {
		queues[ep.queue] = river.QueueConfig{MaxWorkers: h.cfg.Concurrency}
	}
}

// UseQueue sets the River client deliveries are queued on; call it
// before Run.
func (h *Hooks) UseQueue(q Queue) { h.queue.Store(&q) }

// Sends reports whether events of type typ are sent.
func (h *Hooks) Sends(typ string) bool { return h.sends[typ] }

// Run writes changes to their windows, closes the windows due, turns
// presence into events and counts the endpoints' queues, until ctx ends
// or Close. What is pending then is written, for up to five seconds.
func (h *Hooks) Run(ctx context.Context) error {
	if h.queue.Load() == nil {
		return errors.New("webhook: Run before UseQueue")
	}
	return h.loop.Run(ctx, func(ctx context.Context) error {
		var wg sync.WaitGroup
		every := func(d time.Duration, early <-chan struct{}, f func(context.Context)) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				t := time.NewTicker(d)
				defer t.Stop()
				for {
					select {
					case <-ctx.Done():
						return
					case <-t.C:
					case <-early:
					}
					f(ctx)
				}
			}()
		}
		every(h.cfg.FlushEvery, h.flushSoon, h.flush)
		every(h.cfg.SweepEvery, nil, h.sweep)
		every(h.cfg.BacklogEvery, nil, h.countBacklog)
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.presenceLoop(ctx)
		}()
		h.countBacklog(ctx)
		<-ctx.Done()
		wg.Wait()
		fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		h.drainPresence(fctx)
		h.flush(fctx)
		return nil
	})
}

// Close stops Run, after what is pending is written. Safe to call twice.
func (h *Hooks) Close(ctx context.Context) error {
	_, err := h.loop.Stop(ctx)
	return err
}

// enqueue queues a delivery of each message to every endpoint with room
// for it, in tx. Messages of a type not sent are left out. It returns the
// messages queued, to count once tx commits.
func (h *Hooks) enqueue(ctx context.Context, tx *sql.Tx, msgs []message) ([]message, error) {
	qp := h.queue.Load()
	if qp == nil {
		return nil, errors.New("webhook: no queue")
	}
	var params []river.InsertManyParams
	var sent []message
	for _, m := range msgs {
		if !h.sends[m.typ] {
			continue
		}
		sent = append(sent, m)
		for _, ep := range h.eps {
			if !h.room(ep) {
				h.m.dropped.WithLabelValues("backlog").Inc()
				continue
			}
			params = append(params, river.InsertManyParams{
				Args:       deliveryArgs{Endpoint: ep.key, ID: m.id, Type: m.typ, Body: string(m.body)},
				InsertOpts: &river.InsertOpts{Queue: ep.queue, MaxAttempts: maxAttempts},
			})
		}
	}
	if len(params) == 0 {
		return sent, nil
	}
	if _, err := (*qp).InsertManyTx(ctx, tx, params); err != nil {
		return nil, err
	}
	return sent, nil
}

// counted counts messages queued in a transaction that committed.
func (h *Hooks) counted(msgs []message) {
	for _, m := range msgs {
		h.m.events.WithLabelValues(m.typ).Inc()
	}
}

// room takes a place in ep's backlog; false if it is full.
func (h *Hooks) room(ep *endpoint) bool {
	h.bmu.Lock()
	defer h.bmu.Unlock()
	if h.depth[ep.key]+h.added[ep.key] >= h.cfg.MaxBacklog {
		return false
	}
	h.added[ep.key]++
	return true
}

// release gives back a place in ep's backlog: a delivery of it is done
// (delivered, given up or cancelled). The count read next replaces what
// this estimates.
func (h *Hooks) release(ep *endpoint) {
	h.bmu.Lock()
	defer h.bmu.Unlock()
	switch {
	case h.added[ep.key] > 0:
		h.added[ep.key]--
	case h.depth[ep.key] > 0:
		h.depth[ep.key]--
	}
}

// countBacklog reads how many deliveries wait for each endpoint.
func (h *Hooks) countBacklog(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	byQueue, err := h.store.backlog(cctx)
	if err != nil {
		if ctx.Err() == nil {
			h.log.Warn("counting the deliveries waiting", "err", err)
		}
		return
	}
	h.bmu.Lock()
	for _, ep := range h.eps {
		h.depth[ep.key] = byQueue[ep.queue]
		h.added[ep.key] = 0
		h.m.backlog.WithLabelValues(ep.key).Set(float64(byQueue[ep.queue]))
	}
	h.bmu.Unlock()
}

// decide runs fn in a transaction that commits what it queues, then counts
// it.
func (h *Hooks) decide(ctx context.Context, fn func(tx *sql.Tx) ([]message, error)) error {
	tx, err := h.store.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := h.store.durable(ctx, tx); err != nil {
		return err
	}
	msgs, err := fn(tx)
	if err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	h.counted(msgs)
	return nil
}
