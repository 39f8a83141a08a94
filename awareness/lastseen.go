package awareness

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// LastSeenStore keeps when each user was last seen, written when the user
// goes offline (never per heartbeat). The lastseen package has the stores.
// A write refused for a user id the store cannot hold fails with
// ErrUnstorable; a batch holding one fails whole.
type LastSeenStore interface {
	SaveLastSeen(ctx context.Context, userID string, at time.Time) error
	LastSeen(ctx context.Context, userID string) (time.Time, bool, error)
}

// LastSeenBatcher is a LastSeenStore that can store many users' times in
// one round trip; the hub uses it when its store has it.
type LastSeenBatcher interface {
	SaveLastSeenBatch(ctx context.Context, at map[string]time.Time) error
}

// maxPendingLastSeen bounds the users whose last-seen waits to be stored;
// past it a newcomer's is not stored (counted), the in-memory time stays.
const maxPendingLastSeen = 1 << 17

// lastSeenWriter stores last-seen times off the paths that decide them
// (the tick, a node's death, a connection closing): they are queued,
// newest per user, and one goroutine writes them in batches. A node that
// sees a thousand users go at once makes a few writes, and its presence
// never waits for the store.
type lastSeenWriter struct {
	store   LastSeenStore
	log     *slog.Logger
	lost    prometheus.Counter // not queued: too many waited
	refused prometheus.Counter // refused by the store as data it cannot hold
	wake    chan struct{}

	mu      sync.Mutex // guards pending and running
	pending map[string]time.Time
	running bool // Run's writer goroutine is on: add queues, else writes inline
}

func newLastSeenWriter(store LastSeenStore, log *slog.Logger, m *metrics) *lastSeenWriter {
	return &lastSeenWriter{store: store, log: log, lost: m.lastSeenLost, refused: m.storeRefused.WithLabelValues("last_seen"),
		pending: make(map[string]time.Time), wake: make(chan struct{}, 1)}
}

// add queues us's last-seen time; without a running writer (a hub driven
// by hand) it is written at once.
func (w *lastSeenWriter) add(us UserStatus) {
	if w.store == nil {
		return
	}
	w.mu.Lock()
	if !w.running {
		w.mu.Unlock()
		w.write(context.Background(), map[string]time.Time{us.UserID: us.LastSeen})
		return
	}
	if at, ok := w.pending[us.UserID]; ok || len(w.pending) < maxPendingLastSeen {
		if !ok || us.LastSeen.After(at) {
			w.pending[us.UserID] = us.LastSeen
		}
	} else {
		w.lost.Inc()
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// run writes what is queued until ctx ends, then what is left (for up to
// five seconds).
func (w *lastSeenWriter) run(ctx context.Context) {
	w.mu.Lock()
	w.running = true
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.running = false
		w.mu.Unlock()
		fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		w.write(fctx, w.take())
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
			if failed := w.write(ctx, w.take()); failed != nil {
				w.requeue(failed)
				select { // the store is failing: try again in a second
				case <-ctx.Done():
					return
				case <-time.After(time.Second):
				}
				w.poke()
			}
		}
	}
}

func (w *lastSeenWriter) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *lastSeenWriter) take() map[string]time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.pending
	w.pending = make(map[string]time.Time)
	return p
}

// requeue puts back times that were not stored, unless newer ones came.
func (w *lastSeenWriter) requeue(failed map[string]time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for u, at := range failed {
		if cur, ok := w.pending[u]; !ok || at.After(cur) {
			if !ok && len(w.pending) >= maxPendingLastSeen {
				w.lost.Inc()
				continue
			}
			w.pending[u] = at
		}
	}
}

// write stores the times, in one batch when the store can; it returns
// those it could not store, to be tried again. A batch the store refuses
// for the data of a row (ErrUnstorable) is written again user by user: a
// user the store refuses is dropped, counted and logged, and the others
// are stored; a write that fails otherwise keeps the rest for later.
func (w *lastSeenWriter) write(ctx context.Context, at map[string]time.Time) (failed map[string]time.Time) {
	if len(at) == 0 {
		return nil
	}
	if b, ok := w.store.(LastSeenBatcher); ok {
		bctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := b.SaveLastSeenBatch(bctx, at)
		cancel()
		if err == nil {
			return nil
		}
		if !errors.Is(err, ErrUnstorable) {
			w.log.Error("presence: store last seen", "users", len(at), "err", err)
			return at
		}
	}
	var down error
	for u, t := range at {
		err := down
		if err == nil {
			uctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err = w.store.SaveLastSeen(uctx, u, t)
			cancel()
		}
		switch {
		case err == nil:
		case errors.Is(err, ErrUnstorable):
			w.refused.Inc()
			w.log.Error("presence: the store refused a last-seen time, dropped", "user", u, "err", err)
		default:
			if down == nil {
				w.log.Error("presence: store last seen", "user", u, "err", err)
				down = err // the store is failing: the rest wait for the next try
			}
			if failed == nil {
				failed = make(map[string]time.Time)
			}
			failed[u] = t
		}
	}
	return failed
}
