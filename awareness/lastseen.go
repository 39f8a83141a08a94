package awareness

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// LastSeenStore keeps when each user was last seen, written when the user
// goes offline (never per heartbeat). The lastseen package has the stores.
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
	store LastSeenStore
	log   *slog.Logger

	mu      sync.Mutex
	pending map[string]time.Time
	running bool // Run's writer goroutine is on: add queues, else writes inline
	wake    chan struct{}
	lost    func(n int)
}

func newLastSeenWriter(store LastSeenStore, log *slog.Logger, lost func(int)) *lastSeenWriter {
	return &lastSeenWriter{store: store, log: log, pending: make(map[string]time.Time), wake: make(chan struct{}, 1), lost: lost}
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
		w.lost(1)
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
				w.lost(1)
				continue
			}
			w.pending[u] = at
		}
	}
}

// write stores the times, in one batch when the store can; it returns
// those it could not store.
func (w *lastSeenWriter) write(ctx context.Context, at map[string]time.Time) (failed map[string]time.Time) {
	if len(at) == 0 {
		return nil
	}
	if b, ok := w.store.(LastSeenBatcher); ok {
		bctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := b.SaveLastSeenBatch(bctx, at); err != nil {
			w.log.Error("presence: store last seen", "users", len(at), "err", err)
			return at
		}
		return nil
	}
	for u, t := range at {
		uctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := w.store.SaveLastSeen(uctx, u, t)
		cancel()
		if err != nil {
			w.log.Error("presence: store last seen", "user", u, "err", err)
			if failed == nil {
				failed = make(map[string]time.Time)
			}
			failed[u] = t
		}
	}
	return failed
}
