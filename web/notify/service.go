package notify

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"
	"github.com/tandemhq/tandem/internal/lifecycle"
)

// Pusher carries pushes to every node. A cluster passes one that goes
// through Redis; alone, a node delivers to its own subscribers.
type Pusher interface {
	// Publish sends a push for a user to every node, this one included.
	Publish(ctx context.Context, userID string, push []byte) error
	// Follow is called with on=true for every new subscription of a user
	// on this node and with on=false when it ends; the pusher receives a
	// user's pushes while more have started than ended.
	Follow(userID string, on bool)
}

// Push is what travels to a recipient's live connections.
type Push struct {
	// Type is "notification" (a new one) or "read" (some were marked read).
	Type         string        `json:"type"`
	Notification *Notification `json:"notification,omitempty"`
	// Unread is the recipient's unread count after this push.
	Unread int `json:"unread"`
}

// Config configures a Service.
type Config struct {
	// DB is the database for the queue, the windows and the notifications.
	DB *sql.DB
	// Postgres says DB is PostgreSQL (opened with the pgx stdlib driver);
	// otherwise it is SQLite.
	Postgres bool
	// Window is how long events with the same recipient, kind and
	// document are folded together; default one minute.
	Window time.Duration
	// Pusher reaches other nodes; nil delivers locally only.
	Pusher Pusher
	// SweepInterval is how often every node looks for windows past their
	// time (a window's own timer normally closes it on time); default 500ms.
	SweepInterval time.Duration
	// Jobs, when set, adds another component's workers and queues to the
	// node's one River queue before it is made (package web/webhook's
	// deliveries): every node's River client must know every kind of job
	// in the database, since the one that leads rescues all of them.
	// Queue reaches the client once made.
	Jobs func(w *river.Workers, queues map[string]river.QueueConfig)
	// Stored, when set, is called in the transaction that stores each
	// notification, before it commits: what it queues there is queued if
	// and only if the notification is stored. An error rolls both back
	// (the close is retried).
	Stored  func(ctx context.Context, tx *sql.Tx, n *Notification) error
	Logger  *slog.Logger
	Metrics *Metrics
}

// Service runs the pipeline and answers the API.
type Service struct {
	cfg    Config
	store  *store
	river  *river.Client[*sql.Tx]
	log    *slog.Logger
	pusher Pusher

	mu   sync.Mutex // guards subs and stop
	subs map[string]map[*Subscription]struct{}
	stop context.CancelFunc // ends the sweeper; set by Start

	poke      chan struct{}
	wg        sync.WaitGroup
	loop      lifecycle.Loop
	closeOnce sync.Once
	closeErr  error

	keysForgotten atomic.Int64 // when keys past KeyRetention were last deleted (Unix ms)
}

// New prepares the store and the queue (migrating both) but does not start
// working; call Run (or Start).
func New(ctx context.Context, cfg Config) (*Service, error) {
	if cfg.DB == nil {
		return nil, errors.New("notify: Config.DB is required")
	}
	if cfg.Window <= 0 {
		cfg.Window = time.Minute
	}
	if cfg.SweepInterval <= 0 {
		cfg.SweepInterval = 500 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	s := &Service{
		cfg:   cfg,
		store: &store{db: cfg.DB, dialect: sqlite},
		log:   cfg.Logger.With("component", "notify"),
		subs:  map[string]map[*Subscription]struct{}{},
		poke:  make(chan struct{}, 1),
	}
	if cfg.Postgres {
		s.store.dialect = postgres
	}
	s.pusher = cfg.Pusher
	if s.pusher == nil {
		s.pusher = localPusher{s}
	}
	if cfg.Postgres {
		unlock, err := lockMigrations(ctx, cfg.DB)
		if err != nil {
			return nil, err
		}
		defer unlock()
	}
	if err := s.store.migrate(ctx); err != nil {
		return nil, err
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &eventWorker{s: s})
	river.AddWorker(workers, &closeWorker{s: s})
	river.AddWorker(workers, &pushWorker{s: s})
	queues := map[string]river.QueueConfig{
		river.QueueDefault: {MaxWorkers: 8},
		// A close waits for the events of its window still queued; on
		// a queue of its own it never holds up the events it waits for.
		closeQueue: {MaxWorkers: 4},
	}
	if cfg.Jobs != nil {
		cfg.Jobs(workers, queues)
	}
	rc := &river.Config{
		Queues:        queues,
		Workers:       workers,
		FetchCooldown: 20 * time.Millisecond,
		// Jobs inserted here wake this node's workers at once (see
		// localSQLite); polling only picks up what other nodes, retries
		// and snoozes leave behind.
		FetchPollInterval:    time.Second,
		JobTimeout:           20 * time.Second,
		RescueStuckJobsAfter: 30 * time.Second, // a job of a node that died mid-run runs again after this
		MaxAttempts:          25,
		Logger:               slog.New(warnings{s.log.With("component", "river").Handler()}),
	}
	var err error
	if cfg.Postgres {
		drv := riverdatabasesql.New(cfg.DB)
		if err = migrateRiver(ctx, drv); err == nil {
			s.river, err = river.NewClient(drv, rc)
		}
	} else {
		drv := localSQLite{riversqlite.New(cfg.DB)}
		if err = migrateRiver(ctx, drv); err == nil {
			s.river, err = river.NewClient(drv, rc)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("notify: queue: %w", err)
	}
	return s, nil
}

// Queue is the node's River client: the queue other components insert
// their jobs into (see Config.Jobs), in their own transactions on the
// same database.
func (s *Service) Queue() *river.Client[*sql.Tx] { return s.river }

// localSQLite is River's SQLite driver without its listener, which polls
// an outbox table every 50 ms: an embedded store has one node, and without
// a listener River wakes this node's workers on every insert instead, so
// an idle server does no work.
type localSQLite struct{ *riversqlite.Driver }

func (localSQLite) SupportsListener() bool { return false }

// migrationLock is the advisory lock the document store takes for its own
// migrations (doc/store/postgres.go): the schema changes one node at a
// time across the cluster. Without it, nodes starting together on a fresh
// database raced to create the same tables, and one exited with a
// duplicate-key error.
const migrationLock = 7354123001

// lockMigrations holds migrationLock on a connection of its own until
// unlock is called.
func lockMigrations(ctx context.Context, db *sql.DB) (unlock func(), err error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("notify: migrate: %w", err)
	}
	if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, migrationLock); err != nil {
		conn.Close()
		return nil, fmt.Errorf("notify: migrate: lock: %w", err)
	}
	return func() {
		conn.ExecContext(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, migrationLock)
		conn.Close()
	}, nil
}

func migrateRiver[TTx any](ctx context.Context, drv riverdriver.Driver[TTx]) error {
	m, err := rivermigrate.New(drv, &rivermigrate.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	return err
}

// Start starts the workers and the sweeper. They stop with Close.
func (s *Service) Start(ctx context.Context) error {
	ctx, stop := context.WithCancel(ctx)
	s.mu.Lock()
	s.stop = stop
	s.mu.Unlock()
	if err := s.river.Start(ctx); err != nil {
		return fmt.Errorf("notify: start queue: %w", err)
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.sweepLoop(ctx)
	}()
	return nil
}

// Run starts the workers and the sweeper and returns when ctx ends or
// Close is called. The workers stop only at Close, which lets running jobs
// finish: a node posts its last mentions between the two.
func (s *Service) Run(ctx context.Context) error {
	return s.loop.Run(ctx, func(ctx context.Context) error {
		if err := s.Start(context.WithoutCancel(ctx)); err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	})
}

// Close stops the workers, letting running jobs finish (up to ctx), and
// ends every subscription. Safe to call twice.
func (s *Service) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		_, lerr := s.loop.Stop(ctx)
		s.mu.Lock()
		stop := s.stop
		s.mu.Unlock()
		var err error
		if stop != nil { // started
			err = s.river.Stop(ctx)
			stop()
		}
		s.wg.Wait()
		s.mu.Lock()
		for _, set := range s.subs {
			for sub := range set {
				sub.closeLocked()
			}
		}
		s.subs = map[string]map[*Subscription]struct{}{}
		s.mu.Unlock()
		s.closeErr = errors.Join(lerr, err)
	})
	return s.closeErr
}

// Post queues an event. It is durable once Post returns.
func (s *Service) Post(ctx context.Context, e Event) error {
	return s.PostMany(ctx, []Event{e})
}

// MaxBatch bounds the events of one PostMany.
const MaxBatch = 1000

// KeyRetention is how long an event's key is remembered.
const KeyRetention = 7 * 24 * time.Hour

// PostMany queues events in one transaction: all or none. Events whose
// key was posted before are dropped as repeats (counted as kind
// "repeated").
func (s *Service) PostMany(ctx context.Context, events []Event) error {
	if len(events) == 0 || len(events) > MaxBatch {
		return fmt.Errorf("%w: post 1 to %d events at once", ErrBadEvent, MaxBatch)
	}
	now := nowMillis()
	for i := range events {
		e := &events[i]
		if err := e.Validate(); err != nil {
			s.cfg.Metrics.Events.WithLabelValues("refused").Inc()
			return fmt.Errorf("event %d: %w", i, err)
		}
		e.At = now
	}
	tx, err := s.store.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("notify: queue event: %w", err)
	}
	defer tx.Rollback()
	err = s.store.durable(ctx, tx)
	fresh := make([]*Event, 0, len(events))
	for i := 0; err == nil && i < len(events); i++ {
		ok := true
		if events[i].Key != "" {
			ok, err = s.store.claimKey(ctx, tx, events[i].Key, now)
		}
		if ok && err == nil {
			fresh = append(fresh, &events[i])
		}
	}
	var res []*rivertype.JobInsertResult
	if err == nil && len(fresh) > 0 {
		params := make([]river.InsertManyParams, len(fresh))
		for i, e := range fresh {
			params[i] = river.InsertManyParams{Args: eventArgs{Recipient: e.Recipient, EventKind: e.Kind, Document: e.Document}}
		}
		res, err = s.river.InsertManyTx(ctx, tx, params)
	}
	for i := 0; err == nil && i < len(res); i++ {
		err = s.store.addEvent(ctx, tx, res[i].Job.ID, fresh[i])
	}
	if err == nil {
		err = tx.Commit()
	}
	if err != nil {
		return fmt.Errorf("notify: queue event: %w", err)
	}
	for _, e := range fresh {
		s.cfg.Metrics.event(e.Kind).Inc()
	}
	if repeated := len(events) - len(fresh); repeated > 0 {
		s.cfg.Metrics.Events.WithLabelValues("repeated").Add(float64(repeated))
	}
	if keyed := len(events) > 0 && events[0].Key != ""; keyed && s.keysForgotten.Load() < now-time.Hour.Milliseconds() {
		s.keysForgotten.Store(now)
		if err := s.store.forgetKeys(ctx, now-KeyRetention.Milliseconds()); err != nil {
			s.log.Warn("notify: forgetting old event keys", "err", err)
		}
	}
	return nil
}

// List returns a page of a recipient's notifications, newest first, the
// unread count and the cursor of the next page (0 at the end).
func (s *Service) List(ctx context.Context, recipient string, o ListOptions) (page []*Notification, unread int, next int64, err error) {
	if o.Limit <= 0 || o.Limit > 100 {
		o.Limit = 20
	}
	page, err = s.store.list(ctx, recipient, o)
	if err != nil {
		return nil, 0, 0, err
	}
	if unread, err = s.store.unread(ctx, recipient); err != nil {
		return nil, 0, 0, err
	}
	if len(page) == o.Limit && o.After == 0 {
		next = page[len(page)-1].ID
	}
	return page, unread, next, nil
}

// MarkRead marks some (ids) or all (nil) of a recipient's notifications
// read, tells the recipient's other connections, and returns the unread
// count.
func (s *Service) MarkRead(ctx context.Context, recipient string, ids []int64) (int, error) {
	changed, err := s.store.markRead(ctx, recipient, ids)
	if err != nil {
		return 0, err
	}
	unread, err := s.store.unread(ctx, recipient)
	if err != nil {
		return 0, err
	}
	if changed > 0 {
		s.publish(ctx, recipient, &Push{Type: "read", Unread: unread})
	}
	return unread, nil
}

// Unread returns a recipient's unread count.
func (s *Service) Unread(ctx context.Context, recipient string) (int, error) {
	return s.store.unread(ctx, recipient)
}

func (s *Service) publish(ctx context.Context, user string, p *Push) error {
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	if err := s.pusher.Publish(ctx, user, b); err != nil {
		s.cfg.Metrics.Pushes.WithLabelValues("error").Inc()
		return err
	}
	s.cfg.Metrics.Pushes.WithLabelValues(p.Type).Inc()
	return nil
}

// sweepLoop closes windows whose time has come: at once when this node
// opened one (its timer pokes), and every SweepInterval for windows opened
// by nodes that have died since.
func (s *Service) sweepLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.poke:
		}
		ids, err := s.store.dueWindows(ctx, nowMillis(), 1000)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("looking for due windows", "err", err)
			}
			continue
		}
		for _, id := range ids {
			// Unique by window: however many nodes sweep, one job per window.
			_, err := s.river.Insert(ctx, closeArgs{WindowID: id}, &river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}})
			if err != nil && ctx.Err() == nil {
				s.log.Warn("queueing a window's close", "window", id, "err", err)
			}
		}
	}
}

// wake makes the sweeper look now.
func (s *Service) wake() {
	select {
	case s.poke <- struct{}{}:
	default:
	}
}

// warnings passes on warnings and errors only: River reports its routine
// at info level every few seconds.
type warnings struct{ slog.Handler }

func (w warnings) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && w.Handler.Enabled(ctx, l)
}

func (w warnings) WithAttrs(a []slog.Attr) slog.Handler { return warnings{w.Handler.WithAttrs(a)} }
func (w warnings) WithGroup(g string) slog.Handler      { return warnings{w.Handler.WithGroup(g)} }
