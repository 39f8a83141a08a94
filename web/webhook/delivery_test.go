package webhook

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tandemhq/tandem/internal/testenv"
	"github.com/tandemhq/tandem/web/notify"
)

func TestBackoffDoublesUpToItsMaximum(t *testing.T) {
	for _, c := range []struct {
		attempt int
		want    time.Duration
	}{{1, 5 * time.Second}, {2, 10 * time.Second}, {3, 20 * time.Second}, {10, 2560 * time.Second}, {11, time.Hour}, {500, time.Hour}} {
		if got := backoff(c.attempt, 5*time.Second, time.Hour); got != c.want {
			t.Errorf("backoff(%d) = %v, want %v", c.attempt, got, c.want)
		}
	}
	// The defaults retry for more than a day before RetryFor gives up.
	var total time.Duration
	n := 0
	for total < 25*time.Hour {
		n++
		total += backoff(n, 5*time.Second, time.Hour)
	}
	if n < 30 {
		t.Fatalf("a day of retries in %d attempts", n)
	}
}

// receiver is an endpoint that checks each delivery's signature and keeps
// the events by id.
type receiver struct {
	t      testing.TB
	key    []byte
	mu     sync.Mutex
	down   bool           // answers 503 while true
	got    map[string]int // deliveries accepted, by webhook-id
	turned map[string]int // deliveries turned away while down, by webhook-id
	bodies map[string]string
	calls  atomic.Int64
}

func newReceiver(t testing.TB) (*receiver, *httptest.Server) {
	key, _ := parseSecret(testSecret)
	r := &receiver{t: t, key: key, got: map[string]int{}, turned: map[string]int{}, bodies: map[string]string{}}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return r, srv
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.calls.Add(1)
	body, _ := io.ReadAll(req.Body)
	id, ts := req.Header.Get("webhook-id"), req.Header.Get("webhook-timestamp")
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || sign(r.key, id, sec, body) != req.Header.Get("webhook-signature") {
		r.t.Errorf("a delivery with a bad signature: id %q ts %q", id, ts)
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.down {
		r.turned[id]++
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	r.got[id]++
	r.bodies[id] = string(body)
	w.WriteHeader(http.StatusNoContent)
}

func (r *receiver) setDown(down bool) {
	r.mu.Lock()
	r.down = down
	r.mu.Unlock()
}

// turnedAway is how many events were turned away at least once.
func (r *receiver) turnedAway() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.turned)
}

func (r *receiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

// queueStatuses decides n user.status events, as presence would.
func queueStatuses(t testing.TB, h *Hooks, n int) {
	t.Helper()
	for i := range n {
		err := h.decide(context.Background(), func(tx *sql.Tx) ([]message, error) {
			m, err := newMessage(UserStatus, time.Now(), UserStatusData{UserID: "u" + strconv.Itoa(i), Status: "online"})
			if err != nil {
				return nil, err
			}
			return h.enqueue(context.Background(), tx, []message{m})
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// An endpoint that is down for a while, then answers, gets every event,
// each with the same id on every attempt.
func TestAnEndpointDownForAWhileGetsEveryEventWhenItComesBack(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			open, pg := b.open(t)
			r, srv := newReceiver(t)
			r.setDown(true)
			n := startNode(t, open(), pg, Config{Endpoints: []string{srv.URL}, MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
			queueStatuses(t, n.Hooks, 10)
			testenv.WaitFor(t, "every event turned away while the endpoint is down", func() bool { return r.turnedAway() == 10 })
			if r.count() != 0 {
				t.Fatal("an event accepted while the endpoint was down")
			}
			r.setDown(false)
			testenv.WaitWithin(t, "every event once the endpoint is back", 30*time.Second, func() bool { return r.count() == 10 })
			ep := n.eps[0].key
			if got := testutil.ToFloat64(n.m.retries.WithLabelValues(ep)); got < 10 {
				t.Fatalf("retries{endpoint} = %v, want at least one per event", got)
			}
			// The receiver counts an event before its answer reaches the
			// node, so the node's count may follow a moment later.
			testenv.WaitFor(t, "deliveries{ok} = 10", func() bool {
				return testutil.ToFloat64(n.m.deliveries.WithLabelValues(ep, "ok")) == 10
			})
			if got := r.count(); got != 10 {
				t.Fatalf("%d events received, want 10", got)
			}
		})
	}
}

// A delivery failing past RetryFor is given up, counted.
func TestADeliveryIsGivenUpAfterRetryFor(t *testing.T) {
	open, pg := sqliteBackend.open(t)
	r, srv := newReceiver(t)
	r.setDown(true)
	n := startNode(t, open(), pg, Config{Endpoints: []string{srv.URL}, RetryFor: time.Nanosecond})
	queueStatuses(t, n.Hooks, 1)
	ep := n.eps[0].key
	testenv.WaitFor(t, "the delivery given up", func() bool {
		return testutil.ToFloat64(n.m.deliveries.WithLabelValues(ep, "expired")) == 1
	})
	if c := r.calls.Load(); c != 1 {
		t.Fatalf("%d attempts, want the one before it was given up", c)
	}
}

// An endpoint that hangs holds at most Concurrency of this node's
// deliveries, and the other endpoint gets every event meanwhile.
func TestAHangingEndpointHoldsUpNoOther(t *testing.T) {
	open, pg := sqliteBackend.open(t)
	fast, fastSrv := newReceiver(t)
	release := make(chan struct{})
	var inFlight, most atomic.Int64
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		select {
		case <-release:
		case <-req.Context().Done():
		}
	}))
	t.Cleanup(slow.Close)
	n := startNode(t, open(), pg, Config{Endpoints: []string{slow.URL, fastSrv.URL}, Concurrency: 2, Timeout: time.Minute})
	t.Cleanup(func() { close(release) }) // before the node stops
	queueStatuses(t, n.Hooks, 20)
	testenv.WaitFor(t, "the other endpoint to get every event", func() bool { return fast.count() == 20 })
	testenv.WaitFor(t, "the hanging endpoint to hold its share", func() bool { return inFlight.Load() == 2 })
	if m := most.Load(); m != 2 {
		t.Fatalf("%d deliveries at once to one endpoint, want Concurrency (2)", m)
	}
}

// An endpoint's backlog is bounded: past MaxBacklog deliveries waiting,
// a new event is not queued for it (counted), and still is for the
// others.
func TestAnEndpointsBacklogIsBounded(t *testing.T) {
	open, pg := sqliteBackend.open(t)
	r, srv := newReceiver(t)
	r.setDown(true)
	other, otherSrv := newReceiver(t)
	n := startNode(t, open(), pg, Config{
		Endpoints: []string{srv.URL, otherSrv.URL}, MaxBacklog: 3, BacklogEvery: time.Hour, MinBackoff: time.Hour,
	})
	for i := range 8 { // one at a time: the other endpoint's backlog stays short
		queueStatuses(t, n.Hooks, 1)
		testenv.WaitFor(t, "the other endpoint to get the event", func() bool { return other.count() == i+1 })
	}
	if got := testutil.ToFloat64(n.m.dropped.WithLabelValues("backlog")); got != 5 {
		t.Fatalf("dropped{backlog} = %v, want the 5 past the bound", got)
	}
	// River marks the last delivery done a moment after the endpoint
	// answered.
	testenv.WaitFor(t, "the queue depths counted", func() bool {
		n.countBacklog(context.Background())
		return testutil.ToFloat64(n.m.backlog.WithLabelValues(n.eps[1].key)) == 0
	})
	if got := testutil.ToFloat64(n.m.backlog.WithLabelValues(n.eps[0].key)); got != 3 {
		t.Fatalf("queue depth of the endpoint down = %v, want the bound 3", got)
	}
}

// A stored notification is notification.created, sent once.
func TestAStoredNotificationIsSent(t *testing.T) {
	open, pg := sqliteBackend.open(t)
	r, srv := newReceiver(t)
	n := startNode(t, open(), pg, Config{Endpoints: []string{srv.URL}})
	err := n.notes.Post(context.Background(), notify.Event{Recipient: "ana", Kind: "comment.reply", Actor: "bo", Document: "docA"})
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "notification.created", func() bool { return r.count() == 1 })
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, body := range r.bodies {
		e := decode(t, body)
		if e.Type != NotificationCreated {
			t.Fatalf("event %s, want notification.created", e.Type)
		}
		n := (*e.Data.(*map[string]any))["notification"].(map[string]any)
		if n["recipient"] != "ana" || n["kind"] != "comment.reply" {
			t.Fatalf("notification %v", n)
		}
	}
}

func TestNewRefusesWhatItCannotSend(t *testing.T) {
	open, _ := sqliteBackend.open(t)
	db := open()
	for name, cfg := range map[string]Config{
		"no endpoint":     {Secret: testSecret, DB: db},
		"not http":        {Endpoints: []string{"ftp://x/"}, Secret: testSecret, DB: db},
		"bad secret":      {Endpoints: []string{"http://x/"}, Secret: "secret", DB: db},
		"unknown event":   {Endpoints: []string{"http://x/"}, Secret: testSecret, DB: db, Events: []string{"document.deleted"}},
		"wait < debounce": {Endpoints: []string{"http://x/"}, Secret: testSecret, DB: db, Debounce: time.Minute, MaxWait: time.Second},
	} {
		if _, err := New(context.Background(), cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: New = %v, want ErrConfig", name, err)
		}
	}
}

// An endpoint that never answers costs a delivery its Timeout, then the
// attempt fails and is retried.
func TestAnEndpointThatNeverAnswersTimesOut(t *testing.T) {
	open, pg := sqliteBackend.open(t)
	var calls atomic.Int64
	release := make(chan struct{})
	never := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		calls.Add(1)
		io.Copy(io.Discard, req.Body) // then the server notices the client hang up
		select {
		case <-req.Context().Done(): // the client gave up
		case <-release:
		}
	}))
	t.Cleanup(never.Close)
	t.Cleanup(func() { close(release) })
	n := startNode(t, open(), pg, Config{Endpoints: []string{never.URL}, Timeout: 200 * time.Millisecond, MinBackoff: 50 * time.Millisecond})
	queueStatuses(t, n.Hooks, 1)
	ep := n.eps[0].key
	testenv.WaitFor(t, "two attempts timed out", func() bool {
		return testutil.ToFloat64(n.m.deliveries.WithLabelValues(ep, "failed")) >= 2
	})
	if c := calls.Load(); c < 2 {
		t.Fatalf("%d requests for two failed attempts", c)
	}
}
