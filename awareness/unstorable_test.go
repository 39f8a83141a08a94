package awareness

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tandemhq/tandem/internal/testenv"
)

// A history interval the store cannot hold is dropped, counted, and the
// intervals written with it are stored: it once stayed first in every
// batch, and no one's history was stored after it.
func TestHistoryTheStoreCannotHoldKeepsNoOneElseOut(t *testing.T) {
	f, store := newHistoryFixture(t)
	store.refuse = "bad"
	a := &fakePeer{id: "a"}
	f.update(&fakePeer{id: "b"}, ChannelUser, map[string]any{"id": "bad"})
	f.update(a, ChannelUser, map[string]any{"id": "ana"})
	f.record()
	for _, doc := range []string{doc1, ""} {
		got := store.intervals(doc)
		if len(got) != 1 || got[0].User != "ana" {
			t.Fatalf("%q: stored %+v, want ana's interval alone", doc, got)
		}
	}
	if n := testutil.ToFloat64(f.hub.metrics.storeRefused.WithLabelValues("history")); n != 2 {
		t.Errorf("refused by the store: %v, want 2 (bad's presence and status)", n)
	}
	if n := len(f.hub.hist.opened) + len(f.hub.hist.closed); n != 0 {
		t.Fatalf("%d rows still wait for the store", n)
	}
	f.clock.Advance(time.Second)
	f.hub.Leave(a)
	f.record()
	if got := store.intervals(doc1); len(got) != 1 || !got[0].To.Equal(f.clock.Now()) {
		t.Fatalf("after ana left: %+v, want her interval ended now", got)
	}
}

// A store that goes down while a batch is written row by row keeps the
// rows it did not take for the next flush: only refused data is dropped.
func TestHistoryRowByRowStopsAtAFailingStore(t *testing.T) {
	f, store := newHistoryFixture(t)
	store.refuse = "bad"
	for _, u := range []string{"bad", "ana", "cy"} {
		f.update(&fakePeer{id: u + "-tab"}, ChannelUser, map[string]any{"id": u})
	}
	f.hub.readHistory()
	f.hub.hist.lastBeat = f.clock.Now()
	store.upFor = 1 // one row, then down
	f.hub.hist.flush(context.Background(), f.clock.Now())
	if n := len(f.hub.hist.opened); n < 3 {
		t.Fatalf("%d intervals wait after the store went down, want the 3 or more it did not take", n)
	}
	store.mu.Lock()
	store.fail = false
	store.mu.Unlock()
	f.record()
	for _, doc := range []string{doc1, ""} {
		users := map[string]int{}
		for _, iv := range store.intervals(doc) {
			users[iv.User]++
		}
		if len(users) != 2 || users["ana"] != 1 || users["cy"] != 1 {
			t.Errorf("%q: stored the intervals of %v, want ana's and cy's once", doc, users)
		}
	}
	if n := testutil.ToFloat64(f.hub.metrics.storeRefused.WithLabelValues("history")); n != 2 {
		t.Errorf("refused by the store: %v, want 2", n)
	}
	if n := len(f.hub.hist.opened); n != 0 {
		t.Fatalf("%d intervals still wait", n)
	}
}

// refusingLastSeen is a LastSeenBatcher that cannot hold one user id, as
// PostgreSQL cannot hold a NUL: a batch holding it fails whole.
type refusingLastSeen struct {
	testenv.MemoryLastSeen
	refuse string
}

func (s *refusingLastSeen) SaveLastSeen(ctx context.Context, u string, at time.Time) error {
	if u == s.refuse {
		return fmt.Errorf("%w: user %q", ErrUnstorable, u)
	}
	return s.MemoryLastSeen.SaveLastSeen(ctx, u, at)
}

func (s *refusingLastSeen) SaveLastSeenBatch(ctx context.Context, at map[string]time.Time) error {
	if _, ok := at[s.refuse]; ok {
		return fmt.Errorf("%w: user %q", ErrUnstorable, s.refuse)
	}
	for u, t := range at {
		s.MemoryLastSeen.SaveLastSeen(ctx, u, t)
	}
	return nil
}

// A last-seen time the store cannot hold is dropped and counted; the
// users who leave after it have theirs stored. It once went back into
// every batch, and no one's last-seen was stored again.
func TestALastSeenTheStoreCannotHoldKeepsNoOneElseOut(t *testing.T) {
	store := &refusingLastSeen{refuse: "bad"}
	h := newHub(t, Config{LastSeen: store, Logger: testenv.QuietLogger()})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { h.Run(ctx); close(ran) }()
	t.Cleanup(func() { cancel(); <-ran })
	testenv.WaitFor(t, "the last-seen writer", func() bool {
		h.seen.mu.Lock()
		defer h.seen.mu.Unlock()
		return h.seen.running
	})
	bad, ana := &fakePeer{id: "bad"}, &fakePeer{id: "ana"} // each its own user
	h.Join(bad, doc1)
	h.Join(ana, doc1)
	h.Leave(bad)
	h.Leave(ana)
	testenv.WaitFor(t, "ana's last-seen stored", func() bool { return store.Has("ana") })
	testenv.WaitFor(t, "bad's last-seen counted as refused", func() bool {
		return testutil.ToFloat64(h.metrics.storeRefused.WithLabelValues("last_seen")) == 1
	})
	if store.Has("bad") {
		t.Fatal("the store holds what it refused")
	}
}
