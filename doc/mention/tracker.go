package mention

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemhq/tandem/doc"
	"github.com/tandemhq/tandem/internal/lifecycle"
)

// Tracker follows the mentions in the text of every document of a hub,
// one room (room.go) per room of the hub's, which the hub makes through
// Observe (doc.Config.Observe), and hands the reports over.
type Tracker struct {
	cfg Config
	log *slog.Logger

	// Reports taken over from gone nodes' journals, handed over, failed to
	// hand over (for now), dropped (refused for good).
	taken, handed, failed, dropped prometheus.Counter
	sweepNow                       chan struct{} // NodeGone asks for a sweep

	mu    sync.Mutex         // guards owing
	owing map[*room]struct{} // rooms with bursts or reports: Close reports them
	// background is the work off the loop (timers, retries), which Close
	// waits for.
	background lifecycle.Background

	loop      lifecycle.Loop
	closeOnce sync.Once
	closeErr  error
}

// New makes a tracker. It starts nothing: Run sweeps the journals, and
// the rooms the hub makes start their own timers.
func New(cfg Config) (*Tracker, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	t := &Tracker{cfg: cfg, log: cfg.Logger, sweepNow: make(chan struct{}, 1), owing: map[*room]struct{}{}}
	reports := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tandem_mention_reports_total",
		Help: "Mention reports, by event: taken_over (from the journal of a gone node), handed_over (to the notification queue), failed (handing over failed for now; the report stays in the journal), dropped (the notifications refused the report for good; it leaves the journal).",
	}, []string{"event"})
	t.taken, t.handed = reports.WithLabelValues("taken_over"), reports.WithLabelValues("handed_over")
	t.failed, t.dropped = reports.WithLabelValues("failed"), reports.WithLabelValues("dropped")
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(reports)
	}
	return t, nil
}

// Observe makes the observer of a room of the hub's: doc.Config.Observe.
func (t *Tracker) Observe(d doc.Room) doc.Observer { return newRoom(t, d) }

// Run sweeps gone nodes' journals (at start, every Config.Sweep, and on
// NodeGone) until ctx ends or Close.
func (t *Tracker) Run(ctx context.Context) error {
	return t.loop.Run(ctx, func(ctx context.Context) error {
		t.sweepLoop(ctx)
		return nil
	})
}

// Close stops Run and the timers, makes every burst still settling a
// report and hands the reports over, once, at once: the node is stopping.
// What cannot be handed over stays in the journal, written by the hub's
// last flush, so the hub closes after the tracker, and the notification
// queue after both. Close is safe to call more than once.
func (t *Tracker) Close(ctx context.Context) error {
	t.closeOnce.Do(func() {
		t.background.Refuse()
		_, t.closeErr = t.loop.Stop(ctx)
		t.background.Close()
		t.mu.Lock()
		rooms := make([]*room, 0, len(t.owing))
		for r := range t.owing {
			rooms = append(rooms, r)
		}
		t.mu.Unlock()
		for _, r := range rooms {
			r.reportAll()
		}
	})
	return t.closeErr
}

// reportAll makes every burst of the room a report and hands the room's
// reports over, once.
func (r *room) reportAll() {
	r.mu.Lock()
	ids := make([]string, 0, len(r.bursts))
	for id := range r.bursts {
		ids = append(ids, id)
	}
	r.mu.Unlock()
	r.doc.Hold(func() {
		for _, id := range ids {
			r.takeHeld(id, 0)
		}
	})
	r.handOver(false)
}

// owes records whether a room owes anything (bursts or reports). The
// caller holds r.mu.
func (t *Tracker) owes(r *room, owes bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if owes {
		t.owing[r] = struct{}{}
	} else {
		delete(t.owing, r)
	}
}

// goAfter runs f on a goroutine of its own once d has passed, as the
// tracker's background work: not once the tracker is closing, and Close
// waits for it.
func (t *Tracker) goAfter(d time.Duration, f func()) { t.background.After(d, f) }
