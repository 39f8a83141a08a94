package notify

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"

	"github.com/tandemhq/tandem/internal/testenv"
)

// Config.Stored runs in the transaction that stores a notification: when
// it fails, the notification is not stored either, and the close is
// tried again; a notification is stored once, seen by Stored once it
// commits. Config.Jobs puts another component's queue on the same River
// client.
func TestStoredRunsInTheTransactionThatStoresTheNotification(t *testing.T) {
	open, pg := backends[0].open(t)
	db := open()
	var mu sync.Mutex
	var calls, stored []int64
	fail := true
	ranJobs := false
	ctx := context.Background()
	s, err := New(ctx, Config{
		DB: db, Postgres: pg, Window: 50 * time.Millisecond, SweepInterval: 50 * time.Millisecond,
		Jobs: func(w *river.Workers, queues map[string]river.QueueConfig) {
			ranJobs = queues[river.QueueDefault].MaxWorkers > 0 && w != nil
		},
		Stored: func(ctx context.Context, tx *sql.Tx, n *Notification) error {
			mu.Lock()
			defer mu.Unlock()
			calls = append(calls, n.ID)
			if fail {
				fail = false
				return errors.New("the other component's queue is down")
			}
			stored = append(stored, n.ID)
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !ranJobs || s.Queue() == nil {
		t.Fatal("Config.Jobs was not given the client's workers and queues")
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Close(ctx)
	})
	if err := s.Post(ctx, Event{Recipient: "ana", Kind: "reminder", Actor: "bo"}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the close tried again", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(stored) == 1
	})
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM tandem_notifications`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if n != 1 || len(calls) != 2 {
		t.Fatalf("%d notifications stored after %d calls of Stored, want 1 after 2 (one failed)", n, len(calls))
	}
}
