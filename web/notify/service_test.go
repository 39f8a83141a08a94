package notify

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/tandemhq/tandem/internal/testenv"
)

// backend opens a fresh database for one test: an SQLite file, or a
// schema of its own in the test PostgreSQL so that tests running at the
// same time never share a queue.
type backend struct {
	name string
	open func(t *testing.T) (db func() *sql.DB, postgres bool)
}

var backends = []backend{
	{"sqlite", func(t *testing.T) (func() *sql.DB, bool) {
		dir := t.TempDir()
		return func() *sql.DB {
			db, err := OpenSQLite(dir)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			return db
		}, false
	}},
	{"postgres", func(t *testing.T) (func() *sql.DB, bool) {
		u := testenv.PostgresSchema(t)
		return func() *sql.DB {
			db, err := OpenPostgres(u)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			return db
		}, true
	}},
}

func startService(t *testing.T, db *sql.DB, postgres bool, window time.Duration) *Service {
	t.Helper()
	ctx := context.Background()
	s, err := New(ctx, Config{DB: db, Postgres: postgres, Window: window, SweepInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Close(ctx)
	})
	return s
}

// drained waits until the queue has no job left to run.
func drained(t *testing.T, s *Service) {
	t.Helper()
	var left *rivertype.JobRow // a job still queued at the last look
	defer func() {
		if left != nil {
			t.Logf("still queued: %s %s", left.Kind, left.State)
		}
	}()
	testenv.WaitWithin(t, "the queue to drain", 60*time.Second, func() bool {
		res, err := s.river.JobList(context.Background(), river.NewJobListParams().States(
			rivertype.JobStateAvailable, rivertype.JobStateRunning, rivertype.JobStateScheduled,
			rivertype.JobStateRetryable, rivertype.JobStatePending).First(1))
		if err != nil {
			t.Fatal(err)
		}
		left = nil
		if len(res.Jobs) > 0 {
			left = res.Jobs[0]
		}
		return left == nil
	})
}

func openWindows(t *testing.T, s *Service) int {
	var n int
	if err := s.store.db.QueryRow(`SELECT COUNT(*) FROM tandem_notify_windows`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func receive(t *testing.T, sub *Subscription, within time.Duration) Push {
	t.Helper()
	select {
	case d, ok := <-sub.C():
		if !ok {
			t.Fatal("subscription closed")
		}
		var p Push
		if err := json.Unmarshal(d.JSON, &p); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(&p, d.Push) {
			t.Fatalf("a push decoded as %+v arrived as %+v", p, *d.Push)
		}
		return p
	case <-time.After(within):
		t.Fatalf("no push within %v", within)
	}
	return Push{}
}

func mention(recipient, actor, name string, at int64) Event {
	return Event{Recipient: recipient, Kind: KindMention, Document: "docRoadmap", Title: "Roadmap", Actor: actor, ActorName: name, At: at}
}

func TestThousandEventsBecomeOneNotificationAndOnePush(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: waits out a 12 s window on each backend; the full suite runs it")
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			open, pg := b.open(t)
			// Long enough for a thousand posts, made one transaction each.
			const window = 12 * time.Second
			s := startService(t, open(), pg, window)
			ctx := context.Background()
			sub := s.Subscribe("ana")
			defer sub.Close()
			// Another user's events never reach Ana's subscription.
			if err := s.Post(ctx, mention("bo", "cy", "Cy", 0)); err != nil {
				t.Fatal(err)
			}
			begin := time.Now()
			names := []string{"Ana2", "Bo", "Cy", "Di", "Ed", "Fa", "Gu", "Ha", "Io", "Jo", "Ka", "Lu", "Mo"}
			// Posted by 16 clients at once, as a busy document's editors would.
			var wg sync.WaitGroup
			errs := make(chan error, 1000)
			for c := 0; c < 16; c++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := c; i < 1000; i += 16 {
						a := i % len(names)
						errs <- s.Post(ctx, mention("ana", fmt.Sprintf("u%d", a), names[a], 0))
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			if took := time.Since(begin); took > window {
				t.Fatalf("posting took %v, longer than the %v window: the test needs a longer window on this machine", took, window)
			}
			p := receive(t, sub, 60*time.Second)
			// Stored before pushed: the pushed notification is already listed.
			list, unread, _, err := s.List(ctx, "ana", ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if p.Type != "notification" || p.Notification == nil {
				t.Fatalf("push = %+v", p)
			}
			if len(list) != 1 || list[0].ID != p.Notification.ID || unread != 1 || p.Unread != 1 {
				t.Fatalf("stored %d notifications (unread %d), pushed %+v", len(list), unread, p.Notification)
			}
			n := list[0]
			// The first actor folded is named; the posts raced, so any may be first.
			if n.Events != 1000 || n.ActorCount != 13 || n.Text != n.Actors[0].Name+" and 12 others mentioned you in Roadmap" || n.Read {
				t.Fatalf("notification = %+v", n)
			}
			if n.FirstAt < begin.UnixMilli() || n.LastAt < n.FirstAt || n.LastAt-n.FirstAt > window.Milliseconds() {
				t.Errorf("first/last = %d/%d", n.FirstAt, n.LastAt)
			}
			// Everything done: no second push is on its way.
			drained(t, s)
			select {
			case d := <-sub.C():
				t.Fatalf("a second push: %s", d.JSON)
			default:
			}
			if w := openWindows(t, s); w != 0 {
				t.Errorf("%d windows still open", w)
			}
			if bo, _, _, _ := s.List(ctx, "bo", ListOptions{}); len(bo) != 1 || bo[0].Events != 1 {
				t.Errorf("bo's notifications: %+v", bo)
			}
		})
	}
}

func TestAWindowOutlivesItsWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: waits out a 10 s window on each backend; the full suite runs it")
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			open, pg := b.open(t)
			ctx := context.Background()
			first := startService(t, open(), pg, 10*time.Second)
			for i := 0; i < 50; i++ {
				if err := first.Post(ctx, mention("ana", "bo", "Bo", 0)); err != nil {
					t.Fatal(err)
				}
			}
			// Every event is folded into the open window (10 s, ample on a
			// busy machine); then this worker stops before the window closes.
			drained(t, first)
			if w := openWindows(t, first); w != 1 {
				t.Fatalf("%d open windows, want 1", w)
			}
			stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
			first.Close(stopCtx)
			cancel()

			second := startService(t, open(), pg, 10*time.Second)
			sub := second.Subscribe("ana")
			defer sub.Close()
			p := receive(t, sub, 60*time.Second)
			if p.Notification.Events != 50 || p.Notification.Text != "Bo mentioned you in Roadmap" {
				t.Fatalf("pushed %+v", p.Notification)
			}
			drained(t, second)
			list, _, _, _ := second.List(ctx, "ana", ListOptions{})
			if len(list) != 1 {
				t.Fatalf("%d notifications stored, want 1", len(list))
			}
			select {
			case d := <-sub.C():
				t.Fatalf("a second push: %s", d.JSON)
			default:
			}
		})
	}
}

func TestListPagesReadsAndOwnership(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			open, pg := b.open(t)
			ctx := context.Background()
			s := startService(t, open(), pg, 50*time.Millisecond)
			sub := s.Subscribe("ana")
			defer sub.Close()
			// Five documents: five windows, five notifications.
			for i := 0; i < 5; i++ {
				e := mention("ana", "bo", "Bo", 0)
				e.Document = fmt.Sprintf("doc%d", i)
				e.Title = ""
				if err := s.Post(ctx, e); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Post(ctx, mention("bo", "ana", "Ana", 0)); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 5; i++ {
				receive(t, sub, 60*time.Second)
			}
			drained(t, s)
			page1, unread, next, err := s.List(ctx, "ana", ListOptions{Limit: 3})
			if err != nil || len(page1) != 3 || unread != 5 || next == 0 {
				t.Fatalf("page 1: %d items, unread %d, next %d, %v", len(page1), unread, next, err)
			}
			if !(page1[0].ID > page1[1].ID && page1[1].ID > page1[2].ID) {
				t.Error("not newest first")
			}
			if page1[0].Text != "Bo mentioned you in "+page1[0].Document {
				t.Errorf("text without a title: %q", page1[0].Text)
			}
			page2, _, next2, _ := s.List(ctx, "ana", ListOptions{Limit: 3, Before: next})
			if len(page2) != 2 || next2 != 0 || page2[0].ID >= page1[2].ID {
				t.Fatalf("page 2: %d items, next %d", len(page2), next2)
			}
			bos, _, _, _ := s.List(ctx, "bo", ListOptions{})
			// Ana marks one of hers and Bo's read: only hers changes.
			unread, err = s.MarkRead(ctx, "ana", []int64{page1[0].ID, bos[0].ID})
			if err != nil || unread != 4 {
				t.Fatalf("unread after marking one = %d, %v", unread, err)
			}
			if p := receive(t, sub, 10*time.Second); p.Type != "read" || p.Unread != 4 {
				t.Errorf("read push = %+v", p)
			}
			if bos, bu, _, _ := s.List(ctx, "bo", ListOptions{}); bos[0].Read || bu != 1 {
				t.Error("Ana marked Bo's notification read")
			}
			unreadOnly, _, _, _ := s.List(ctx, "ana", ListOptions{UnreadOnly: true})
			if len(unreadOnly) != 4 {
				t.Errorf("unread filter: %d", len(unreadOnly))
			}
			if unread, _ := s.MarkRead(ctx, "ana", nil); unread != 0 {
				t.Errorf("unread after marking all = %d", unread)
			}
			after, _, _, _ := s.List(ctx, "ana", ListOptions{After: page2[0].ID})
			if len(after) != 3 || after[0].ID > after[1].ID {
				t.Errorf("catch-up after %d: %d items", page2[0].ID, len(after))
			}
		})
	}
}

func TestBadEventsAreRefused(t *testing.T) {
	good := mention("ana", "bo", "Bo", 0)
	cases := map[string]func(e *Event){
		"no recipient":  func(e *Event) { e.Recipient = "" },
		"bad kind":      func(e *Event) { e.Kind = "Mention!" },
		"no actor":      func(e *Event) { e.Actor = "" },
		"long title":    func(e *Event) { e.Title = string(make([]byte, MaxTextLen+1)) },
		"bad payload":   func(e *Event) { e.Payload = json.RawMessage(`{"a":`) },
		"huge payload":  func(e *Event) { e.Payload = json.RawMessage(`"` + string(make([]byte, MaxPayloadLen)) + `"`) },
		"invalid utf-8": func(e *Event) { e.ActorName = "\xff" },
		// PostgreSQL stores U+0000 in no text column and in no JSON.
		"U+0000 in a title":     func(e *Event) { e.Title = "Road\x00map" },
		"U+0000 in a recipient": func(e *Event) { e.Recipient = "ana\x00" },
		"U+0000 in a document":  func(e *Event) { e.Document = "\x00" },
	}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range cases {
		e := good
		mutate(&e)
		if err := e.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// An event whose job has not run when its window closes (a Post that
// committed late) is folded by the close itself, and its job then finds it
// done instead of opening a window of its own.
func TestCloseTakesEventsWhoseJobsHaveNotRun(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			open, pg := b.open(t)
			s := &store{db: open(), dialect: sqlite}
			if pg {
				s.dialect = postgres
			}
			ctx := context.Background()
			if err := s.migrate(ctx); err != nil {
				t.Fatal(err)
			}
			inTx := func(fn func(tx *sql.Tx) error) {
				t.Helper()
				tx, err := s.db.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := fn(tx); err != nil {
					tx.Rollback()
					t.Fatal(err)
				}
				if err := tx.Commit(); err != nil {
					t.Fatal(err)
				}
			}
			a, late := mention("ana", "bo", "Bo", 0), mention("ana", "cy", "Cy", 0)
			a.At, late.At = 1000, 1500
			var windowID int64
			inTx(func(tx *sql.Tx) error { return s.addEvent(ctx, tx, 1, &a) })
			inTx(func(tx *sql.Tx) error {
				due, opened, err := s.foldEvent(ctx, tx, 1, 60_000)
				if err == nil && (!opened || due != 61_000) {
					t.Errorf("first event: due %d, opened %v", due, opened)
				}
				return err
			})
			inTx(func(tx *sql.Tx) error { return s.addEvent(ctx, tx, 2, &late) })
			if err := s.db.QueryRow(`SELECT id FROM tandem_notify_windows`).Scan(&windowID); err != nil {
				t.Fatal(err)
			}
			var n *Notification
			inTx(func(tx *sql.Tx) (err error) { n, err = s.closeWindow(ctx, tx, windowID); return err })
			if n == nil || n.Events != 2 || n.ActorCount != 2 || n.Text != "Bo and 1 other mentioned you in Roadmap" {
				t.Fatalf("notification = %+v", n)
			}
			inTx(func(tx *sql.Tx) error {
				_, opened, err := s.foldEvent(ctx, tx, 2, 60_000)
				if opened {
					t.Error("the late event's job opened a window for an event already notified")
				}
				return err
			})
			var windows, events int
			s.db.QueryRow(`SELECT COUNT(*) FROM tandem_notify_windows`).Scan(&windows)
			s.db.QueryRow(`SELECT COUNT(*) FROM tandem_notify_events`).Scan(&events)
			if windows != 0 || events != 0 {
				t.Errorf("left %d windows, %d events", windows, events)
			}
		})
	}
}

func TestResyncEndsTheUsersStreamsOnly(t *testing.T) {
	open, pg := backends[0].open(t)
	s := startService(t, open(), pg, time.Second)
	ana1, ana2, bo := s.Subscribe("ana"), s.Subscribe("ana"), s.Subscribe("bo")
	defer bo.Close()
	s.Resync("ana")
	for _, sub := range []*Subscription{ana1, ana2} {
		if _, open := <-sub.C(); open {
			t.Fatal("ana's subscription is still open")
		}
	}
	select {
	case <-bo.C():
		t.Fatal("bo's subscription ended")
	default:
	}
}

// Nodes that start together on a fresh PostgreSQL migrate one at a time:
// each gets a working service, none a duplicate-key error from a table
// another is creating.
func TestNodesStartingTogetherMigrateOneAtATime(t *testing.T) {
	pg := backends[1]
	for round := range 5 {
		open, _ := pg.open(t)
		dbs := []*sql.DB{open(), open(), open()}
		errs := make(chan error, len(dbs))
		for _, db := range dbs {
			go func() {
				s, err := New(context.Background(), Config{DB: db, Postgres: true, Metrics: NewMetrics(nil)})
				if err == nil {
					s.Close(context.Background())
				}
				errs <- err
			}()
		}
		for range dbs {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		for _, db := range dbs {
			db.Close()
		}
	}
}

// Kinds are the applications' to name: the metric keeps a series for the
// first few and counts the rest together.
func TestEventKindLabelsAreBounded(t *testing.T) {
	m := NewMetrics(nil)
	for i := range 100 {
		m.event(fmt.Sprint("kind-", i)).Inc()
	}
	m.event(KindMention).Inc()
	if n := testutil.CollectAndCount(m.Events); n != maxKindLabels+2 {
		t.Fatalf("%d series, want %d", n, maxKindLabels+2)
	}
	if n := testutil.ToFloat64(m.Events.WithLabelValues("other")); n != 100-maxKindLabels {
		t.Fatalf("other = %v", n)
	}
}

// An event posted again with its key (a mention report offered twice) is
// queued once; the same key in a later batch or a batch of its own drops
// only the repeat.
func TestAKeyedEventIsQueuedOnce(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			open, pg := b.open(t)
			s := startService(t, open(), pg, 100*time.Millisecond)
			ctx := context.Background()
			keyed := func(recipient, key string) Event {
				e := mention(recipient, "ana", "Ana", 0)
				e.Key = key
				return e
			}
			if err := s.PostMany(ctx, []Event{keyed("bo", "r1:bo"), keyed("cy", "r1:cy")}); err != nil {
				t.Fatal(err)
			}
			if err := s.PostMany(ctx, []Event{keyed("bo", "r1:bo"), keyed("bo", "r2:bo")}); err != nil {
				t.Fatal(err)
			}
			if err := s.Post(ctx, keyed("cy", "r1:cy")); err != nil {
				t.Fatal(err)
			}
			drained(t, s)
			waitFor := func(user string, want int) {
				t.Helper()
				events := 0 // at the last look
				defer func() {
					if events < want {
						t.Logf("%s has %d events, want %d", user, events, want)
					}
				}()
				testenv.WaitWithin(t, fmt.Sprintf("%s's %d events, no window open", user, want), 30*time.Second, func() bool {
					page, _, _, err := s.List(ctx, user, ListOptions{})
					if err != nil {
						t.Fatal(err)
					}
					events = 0
					for _, n := range page {
						events += n.Events
					}
					if events > want {
						t.Fatalf("%s has %d events, want %d", user, events, want)
					}
					return events == want && openWindows(t, s) == 0
				})
			}
			waitFor("bo", 2)
			waitFor("cy", 1)
			if n := testutil.ToFloat64(s.cfg.Metrics.Events.WithLabelValues("repeated")); n != 2 {
				t.Fatalf("repeated = %v, want 2", n)
			}
		})
	}
}

// A push that reaches a node is decoded once for every stream of its user
// there (they share it), goes on as the JSON it came as, and one that
// cannot be decoded reaches no stream and ends none.
func TestAPushIsDecodedOnceForEveryStream(t *testing.T) {
	open, pg := backends[0].open(t)
	s := startService(t, open(), pg, time.Second)
	tab1, tab2 := s.Subscribe("ana"), s.Subscribe("ana")
	defer tab1.Close()
	defer tab2.Close()
	s.Deliver("ana", []byte("{not json"))
	raw := []byte(`{"type":"notification","notification":{"id":7,"recipient":"ana","kind":"mention","text":"x"},"unread":1}`)
	s.Deliver("ana", raw)
	d1, d2 := <-tab1.C(), <-tab2.C()
	if d1.Push != d2.Push {
		t.Fatal("each stream got a push decoded on its own")
	}
	if d1.Push.Notification == nil || d1.Push.Notification.ID != 7 || d1.Push.Unread != 1 {
		t.Fatalf("decoded as %+v", *d1.Push)
	}
	if string(d1.JSON) != string(raw) {
		t.Fatalf("the JSON went on as %s", d1.JSON)
	}
}
