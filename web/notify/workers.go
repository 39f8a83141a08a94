package notify

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"
	"github.com/riverqueue/river/riverdriver/riversqlite"
)

// The pipeline is three kinds of River jobs. Each one that changes the
// store completes itself in the same transaction (JobCompleteTx), so a job
// either has its whole effect once or none and is retried.
//
//	event  → puts one event (stored with its job by Post) into its key's
//	         open window, opening one if needed
//	close  → at the window's time: stores the notification, deletes the
//	         window, queues the push
//	push   → publishes the stored notification to every node; delivery
//	         is at least once, and clients drop an id they already have

// eventArgs names the event for people reading the queue; the event itself
// is in tandem_notify_events under the job's id.
type eventArgs struct {
	Recipient string `json:"recipient"`
	EventKind string `json:"kind"`
	Document  string `json:"document,omitempty"`
}

func (eventArgs) Kind() string { return "tandem_notify_event" }

type closeArgs struct {
	WindowID int64 `json:"window_id"`
}

func (closeArgs) Kind() string { return "tandem_notify_close" }

const closeQueue = "tandem_notify_close"

func (closeArgs) InsertOpts() river.InsertOpts { return river.InsertOpts{Queue: closeQueue} }

type pushArgs struct {
	NotificationID int64 `json:"notification_id"`
}

func (pushArgs) Kind() string { return "tandem_notify_push" }

// inTx runs fn in a transaction that also completes job.
func inTx[T river.JobArgs](ctx context.Context, s *Service, job *river.Job[T], fn func(tx *sql.Tx) error) error {
	tx, err := s.store.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return err
	}
	if s.store.dialect == postgres {
		_, err = river.JobCompleteTx[*riverdatabasesql.Driver](ctx, tx, job)
	} else {
		_, err = river.JobCompleteTx[*riversqlite.Driver](ctx, tx, job)
	}
	if err != nil {
		return fmt.Errorf("completing job: %w", err)
	}
	return tx.Commit()
}

type eventWorker struct {
	river.WorkerDefaults[eventArgs]
	s *Service
}

func (w *eventWorker) Work(ctx context.Context, job *river.Job[eventArgs]) error {
	var dueAt int64
	var opened bool
	err := inTx(ctx, w.s, job, func(tx *sql.Tx) (err error) {
		dueAt, opened, err = w.s.store.foldEvent(ctx, tx, job.ID, w.s.cfg.Window.Milliseconds())
		return err
	})
	if errors.Is(err, errLate) {
		// Rare: posted after its window's time but before the window
		// closed. Try again once it has.
		return river.JobSnooze(time.Second)
	}
	if err != nil {
		return err
	}
	if opened {
		w.s.cfg.Metrics.Windows.Inc()
		// This node closes the window on time; the sweep of any node
		// does it if this one is gone by then.
		time.AfterFunc(time.Until(time.UnixMilli(dueAt)), w.s.wake)
	}
	return nil
}

type closeWorker struct {
	river.WorkerDefaults[closeArgs]
	s *Service
}

// NextRetry retries a failed close soon: the window is due already.
func (w *closeWorker) NextRetry(*river.Job[closeArgs]) time.Time { return time.Now().Add(time.Second) }

func (w *closeWorker) Work(ctx context.Context, job *river.Job[closeArgs]) error {
	var n *Notification
	err := inTx(ctx, w.s, job, func(tx *sql.Tx) (err error) {
		if err := w.s.store.durable(ctx, tx); err != nil {
			return err
		}
		n, err = w.s.store.closeWindow(ctx, tx, job.Args.WindowID)
		if err != nil || n == nil {
			return err
		}
		// Queued in the transaction that stores the notification: nothing
		// is pushed that is not stored, and nothing stored goes unpushed.
		if _, err = w.s.river.InsertTx(ctx, tx, pushArgs{NotificationID: n.ID}, nil); err != nil {
			return err
		}
		if w.s.cfg.Stored != nil {
			return w.s.cfg.Stored(ctx, tx, n)
		}
		return nil
	})
	if err == nil && n != nil {
		w.s.cfg.Metrics.Stored.Inc()
		w.s.cfg.Metrics.Folded.Observe(float64(n.Events))
	}
	return err
}

type pushWorker struct {
	river.WorkerDefaults[pushArgs]
	s *Service
}

func (w *pushWorker) Work(ctx context.Context, job *river.Job[pushArgs]) error {
	n, err := w.s.store.get(ctx, job.Args.NotificationID)
	if err != nil {
		return fmt.Errorf("loading notification %d: %w", job.Args.NotificationID, err)
	}
	unread, err := w.s.store.unread(ctx, n.Recipient)
	if err != nil {
		return err
	}
	return w.s.publish(ctx, n.Recipient, &Push{Type: "notification", Notification: n, Unread: unread})
}
