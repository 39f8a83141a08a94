package awareness

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"

	"github.com/tandemhq/tandem/internal/testenv"
)

// memoryHistory is a HistoryStore in memory, which can be made to fail.
type memoryHistory struct {
	mu     sync.Mutex
	rows   map[[2]int64]*HistoryInterval
	beats  map[int64]time.Time
	nodes  map[int64]string
	fail   bool
	writes int
	// block makes a write wait for its context's end, and notes when.
	block   bool
	blocked time.Time
	// refuse makes a write holding an interval of this user fail whole,
	// as data the store cannot hold.
	refuse string
	// upFor, when positive, is how many more writes succeed before the
	// store goes down (fail).
	upFor int
}

func newMemoryHistory() *memoryHistory {
	return &memoryHistory{rows: map[[2]int64]*HistoryInterval{}, beats: map[int64]time.Time{}, nodes: map[int64]string{}}
}

var errStoreDown = errors.New("store down")

func (m *memoryHistory) WriteHistory(ctx context.Context, opened []HistoryInterval, closed []HistoryEnd) error {
	m.mu.Lock()
	if m.block {
		m.mu.Unlock()
		<-ctx.Done()
		m.mu.Lock()
		m.blocked = time.Now()
		m.mu.Unlock()
		return ctx.Err()
	}
	defer m.mu.Unlock()
	if m.fail {
		return errStoreDown
	}
	for _, iv := range opened {
		if iv.User == m.refuse && m.refuse != "" {
			return fmt.Errorf("%w: user %q", ErrUnstorable, iv.User)
		}
	}
	m.writes++
	if m.upFor > 0 {
		if m.upFor--; m.upFor == 0 {
			m.fail = true
		}
	}
	for _, iv := range opened {
		iv := iv
		m.rows[[2]int64{iv.Run, iv.Seq}] = &iv
	}
	for _, e := range closed {
		if iv := m.rows[[2]int64{e.Run, e.Seq}]; iv != nil && iv.To.IsZero() {
			iv.To = e.To
		}
	}
	return nil
}

func (m *memoryHistory) BeatHistory(_ context.Context, run int64, node string, at time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail {
		return errStoreDown
	}
	m.beats[run], m.nodes[run] = at, node
	return nil
}

func (m *memoryHistory) CloseDeadRuns(_ context.Context, node string, staleBefore time.Time, keep int64) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var n int64
	for _, iv := range m.rows {
		beat, ok := m.beats[iv.Run]
		if !ok || iv.Run == keep || !iv.To.IsZero() || !beat.Before(staleBefore) || (node != "" && m.nodes[iv.Run] != node) {
			continue
		}
		iv.To = beat
		n++
	}
	return n, nil
}

func (m *memoryHistory) PruneHistory(_ context.Context, before time.Time, limit int) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var n int64
	for k, iv := range m.rows {
		if int(n) < limit && !iv.To.IsZero() && iv.To.Before(before) {
			delete(m.rows, k)
			n++
		}
	}
	return n, nil
}

// intervals lists the stored intervals of a document ("" for statuses).
func (m *memoryHistory) intervals(doc string) []HistoryInterval {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []HistoryInterval
	for _, iv := range m.rows {
		if iv.Doc == doc {
			out = append(out, *iv)
		}
	}
	return out
}

func newHistoryFixture(t *testing.T) (*fixture, *memoryHistory) {
	f := newFixture(t)
	store := newMemoryHistory()
	h := newHub(t, Config{
		Now: f.clock.Now, RelaySession: "relay", Logger: testenv.QuietLogger(),
		History: store, HistoryNode: "n1", HistoryRetention: 24 * time.Hour,
	})
	h.tellAtOnce = 1 << 30
	f.hub = h
	return f, store
}

// record is one pass of the recorder: read what changed, write it. The
// fake clock jumps where a real one would have let the recorder beat all
// along: the run counts as having beaten just now.
func (f *fixture) record() {
	f.hub.readHistory()
	if !f.hub.hist.lastBeat.IsZero() {
		f.hub.hist.lastBeat = f.clock.Now()
	}
	f.hub.hist.flush(context.Background(), f.clock.Now())
}

// A user's presence in a document is an interval from the first presence
// message to the goodbye; going away ends it and opens an away one at
// that moment; the user's status is recorded beside it.
func TestHistoryRecordsPresenceAndStatus(t *testing.T) {
	f, store := newHistoryFixture(t)
	t0 := f.clock.Now()
	a := &fakePeer{id: "a"}
	f.update(a, ChannelUser, map[string]any{"id": "ana", "name": "Ana"})
	f.record()
	got := store.intervals(doc1)
	if len(got) != 1 || got[0].User != "ana" || got[0].Name != "Ana" || got[0].Status != StatusOnline || !got[0].From.Equal(t0) || !got[0].To.IsZero() {
		t.Fatalf("after joining: %+v, want one open online interval of ana from %v", got, t0)
	}
	f.clock.Advance(time.Minute)
	t1 := f.clock.Now()
	f.update(a, ChannelStatus, "away")
	f.record()
	got = store.intervals(doc1)
	if len(got) != 2 {
		t.Fatalf("after going away: %+v, want two intervals", got)
	}
	for _, iv := range got {
		switch iv.Status {
		case StatusOnline:
			if !iv.To.Equal(t1) {
				t.Errorf("online ends at %v, want %v", iv.To, t1)
			}
		case StatusAway:
			if !iv.From.Equal(t1) || !iv.To.IsZero() {
				t.Errorf("away is %v to %v, want open from %v", iv.From, iv.To, t1)
			}
		}
	}
	f.clock.Advance(time.Minute)
	t2 := f.clock.Now()
	f.hub.Leave(a)
	f.record()
	for _, iv := range append(store.intervals(doc1), store.intervals("")...) {
		if iv.To.IsZero() || iv.To.After(t2) {
			t.Errorf("after leaving, %+v is open or ends after %v", iv, t2)
		}
	}
	if st := store.intervals(""); len(st) != 2 {
		t.Errorf("status intervals %+v, want online then away", st)
	}
}

// Two tabs of one user make one interval: it ends when the last leaves.
func TestHistoryTabsOfOneUserAreOneInterval(t *testing.T) {
	f, store := newHistoryFixture(t)
	a, b := &fakePeer{id: "a"}, &fakePeer{id: "b"}
	f.update(a, ChannelUser, map[string]any{"id": "ana"})
	f.update(b, ChannelUser, map[string]any{"id": "ana"})
	f.record()
	f.clock.Advance(time.Second)
	f.hub.Leave(a)
	f.record()
	if got := store.intervals(doc1); len(got) != 1 || !got[0].To.IsZero() {
		t.Fatalf("one tab left: %+v, want one open interval", got)
	}
	f.clock.Advance(time.Second)
	f.hub.Leave(b)
	f.record()
	if got := store.intervals(doc1); len(got) != 1 || !got[0].To.Equal(f.clock.Now()) {
		t.Fatalf("both left: %+v, want one interval ended now", got)
	}
}

// What the store did not take is written with the next flush; an interval
// that ended meanwhile is written ended, once.
func TestHistoryWaitsForAFailingStore(t *testing.T) {
	f, store := newHistoryFixture(t)
	a := &fakePeer{id: "a"}
	store.fail = true
	f.update(a, ChannelUser, map[string]any{"id": "ana"})
	f.record()
	f.clock.Advance(time.Second)
	f.hub.Leave(a)
	f.record()
	if got := store.intervals(doc1); len(got) != 0 {
		t.Fatalf("a failing store holds %+v", got)
	}
	store.mu.Lock()
	store.fail = false
	store.mu.Unlock()
	f.record()
	got := store.intervals(doc1)
	if len(got) != 1 || !got[0].To.Equal(f.clock.Now()) {
		t.Fatalf("after the store came back: %+v, want one ended interval", got)
	}
}

// An interval open for nearly MaxHistorySpan is ended and continued at
// the same moment: stored intervals stay short enough for the index.
func TestHistoryRollsLongIntervals(t *testing.T) {
	f, store := newHistoryFixture(t)
	a := &fakePeer{id: "a"}
	f.update(a, ChannelUser, map[string]any{"id": "ana"})
	f.record()
	for range 3 {
		f.clock.Advance(MaxHistorySpan / 2)
		f.hub.Touch(a)
		f.hub.hist.roll(f.clock.Now())
		f.record()
	}
	got := store.intervals(doc1)
	if len(got) != 2 {
		t.Fatalf("after 1.5 spans: %d intervals %+v, want 2", len(got), got)
	}
	var ended, open HistoryInterval
	for _, iv := range got {
		if iv.To.IsZero() {
			open = iv
		} else {
			ended = iv
		}
		if !iv.To.IsZero() && iv.To.Sub(iv.From) > MaxHistorySpan {
			t.Errorf("%+v is longer than MaxHistorySpan", iv)
		}
	}
	if !ended.To.Equal(open.From) {
		t.Errorf("the continuation begins at %v, the first ends at %v: want them to touch", open.From, ended.To)
	}
}

// A clean stop ends every open interval; a node the cluster saw go has
// its runs' intervals ended at their last beat.
func TestHistoryStopAndNodeGone(t *testing.T) {
	f, store := newHistoryFixture(t)
	// A dead run of another node, beaten a minute ago.
	store.beats[7], store.nodes[7] = f.clock.Now().Add(-time.Minute), "n2"
	store.rows[[2]int64{7, 1}] = &HistoryInterval{Run: 7, Seq: 1, Doc: doc1, User: "bo", Status: StatusOnline, From: f.clock.Now().Add(-time.Hour / 2)}
	a := &fakePeer{id: "a"}
	f.update(a, ChannelUser, map[string]any{"id": "ana"})
	f.hub.NodeGone("n2")
	gone := f.hub.readHistory()
	if len(gone) != 1 || gone[0] != "n2" {
		t.Fatalf("nodes gone %v, want [n2]", gone)
	}
	f.hub.hist.closeDead(context.Background(), "n2", f.clock.Now().Add(-2*historyBeat))
	if iv := store.rows[[2]int64{7, 1}]; !iv.To.Equal(store.beats[7]) {
		t.Errorf("the dead node's interval ends at %v, want its last beat %v", iv.To, store.beats[7])
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.hub.runHistory(ctx); close(done) }()
	cancel()
	<-done
	for _, iv := range store.intervals(doc1) {
		if iv.To.IsZero() {
			t.Errorf("%+v is open after a clean stop", iv)
		}
	}
}

// A run that dies as soon as a write is stored (a SIGKILL before its
// next store call) has beaten since every interval in it began: ended at
// that beat by another node, each lasts from its start to the beat, and
// none is left ending where it began (which readers show as no presence).
func TestHistoryARunKilledRightAfterAWriteHasBeatenPastWhatItWrote(t *testing.T) {
	f, store := newHistoryFixture(t)
	ctx := context.Background()
	a := &fakePeer{id: "a"}
	f.update(a, ChannelUser, map[string]any{"id": "ana"})
	f.hub.readHistory()
	f.hub.hist.flush(ctx, f.clock.Now()) // the run's first beat, then Ana
	f.clock.Advance(time.Second)
	b := &fakePeer{id: "b"}
	f.update(b, ChannelUser, map[string]any{"id": "bo"})
	from := f.clock.Now()
	f.clock.Advance(100 * time.Millisecond) // the recorder reads on its next tick
	store.mu.Lock()
	store.upFor = 1 // the next write is stored, then the run is gone
	store.mu.Unlock()
	f.hub.readHistory()
	f.hub.hist.flush(ctx, f.clock.Now())

	// The next run on this store ends the dead one's intervals.
	store.mu.Lock()
	store.fail = false
	store.mu.Unlock()
	if _, err := store.CloseDeadRuns(ctx, "", f.clock.Now().Add(time.Minute), 0); err != nil {
		t.Fatal(err)
	}
	var bo []HistoryInterval
	for _, iv := range store.intervals(doc1) {
		if iv.User == "bo" {
			bo = append(bo, iv)
		}
	}
	if len(bo) != 1 || !bo[0].From.Equal(from) || !bo[0].To.After(from) {
		t.Fatalf("Bo's intervals %+v: want one from %v, ended after it began", bo, from)
	}
}

// A run whose beats failed for so long that another node may have ended
// its intervals at its last beat continues them from that beat: the
// history shows no gap, and no interval stays ended while its user is
// still here.
func TestHistoryResumesAfterBeatsFailed(t *testing.T) {
	f, store := newHistoryFixture(t)
	a := &fakePeer{id: "a"}
	f.update(a, ChannelUser, map[string]any{"id": "ana"})
	f.record()
	lastBeat := f.clock.Now()
	store.mu.Lock()
	store.fail = true
	store.mu.Unlock()
	f.clock.Advance(time.Minute)
	f.hub.Touch(a)
	f.hub.hist.beat(context.Background(), f.clock.Now())
	// Another node takes the run for dead.
	if n, _ := store.CloseDeadRuns(context.Background(), "", f.clock.Now().Add(-historyStale), 0); n != 2 {
		t.Fatalf("the other node ended %d intervals, want 2", n)
	}
	store.mu.Lock()
	store.fail = false
	store.mu.Unlock()
	f.hub.hist.beat(context.Background(), f.clock.Now())
	f.hub.hist.flush(context.Background(), f.clock.Now())
	got := store.intervals(doc1)
	if len(got) != 2 {
		t.Fatalf("after the beats came back: %+v, want the ended interval and its continuation", got)
	}
	var ended, open HistoryInterval
	for _, iv := range got {
		if iv.To.IsZero() {
			open = iv
		} else {
			ended = iv
		}
	}
	if !ended.To.Equal(lastBeat) || !open.From.Equal(lastBeat) {
		t.Errorf("ended at %v, continued from %v: want both at the last beat %v", ended.To, open.From, lastBeat)
	}
}

// A peer silent past its TTL ends its user's intervals when the sweep
// removes it, at that moment.
func TestHistoryEndsWhenAPeerExpires(t *testing.T) {
	f, store := newHistoryFixture(t)
	a := &fakePeer{id: "a"}
	f.update(a, ChannelUser, map[string]any{"id": "ana"})
	f.record()
	f.clock.Advance(f.hub.cfg.TTL + time.Second)
	f.hub.Tick() // the sweep: a is silent past its TTL
	expired := f.clock.Now()
	f.record()
	for _, iv := range append(store.intervals(doc1), store.intervals("")...) {
		if !iv.To.Equal(expired) {
			t.Errorf("%+v: want it ended when the peer expired, %v", iv, expired)
		}
	}
}

// Intervals that ended longer ago than the retention are deleted.
func TestHistoryPrunesPastTheRetention(t *testing.T) {
	f, store := newHistoryFixture(t)
	a := &fakePeer{id: "a"}
	f.update(a, ChannelUser, map[string]any{"id": "ana"})
	f.record()
	f.hub.Leave(a)
	f.record()
	f.clock.Advance(f.hub.hist.retention - time.Minute)
	f.hub.hist.prune(context.Background(), f.clock.Now())
	if got := store.intervals(doc1); len(got) != 1 {
		t.Fatalf("within the retention: %d intervals, want 1", len(got))
	}
	f.clock.Advance(2 * time.Minute)
	f.hub.hist.prune(context.Background(), f.clock.Now())
	if got := store.intervals(doc1); len(got) != 0 {
		t.Fatalf("past the retention: %+v, want none", got)
	}
}

// The last write of a stopping hub ends before the deadline Close was
// given: the node closes the store after it.
func TestHistoryLastWriteKeepsCloseDeadline(t *testing.T) {
	store := newMemoryHistory()
	h := newHub(t, Config{Logger: testenv.QuietLogger(), History: store, HistoryNode: "n1"})
	go h.Run(context.Background())
	a := &fakePeer{id: "a"}
	data, _ := cbor.Marshal(map[string]any{"__presence": presenceMessage{Type: TypeUpdate, Channel: ChannelUser, Value: enc(map[string]any{"id": "ana"})}})
	if ok, err := h.Receive(a, doc1, Message{SenderID: "a", SessionID: "s", Count: 1, Data: data}); !ok || err != nil {
		t.Fatal(ok, err)
	}
	testenv.WaitFor(t, "the recorder's first beat", func() bool {
		store.mu.Lock()
		defer store.mu.Unlock()
		return len(store.beats) > 0
	})
	store.mu.Lock()
	store.block = true
	store.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	deadline, _ := ctx.Deadline()
	h.Close(ctx)
	store.mu.Lock()
	defer store.mu.Unlock()
	if store.blocked.IsZero() || store.blocked.After(deadline) {
		t.Fatalf("the last write ended at %v, the deadline was %v", store.blocked, deadline)
	}
}
