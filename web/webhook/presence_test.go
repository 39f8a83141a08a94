package webhook

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tandemhq/tandem/awareness"
)

// nullHistory is a history store that keeps nothing.
type nullHistory struct{}

func (nullHistory) WriteHistory(context.Context, []awareness.HistoryInterval, []awareness.HistoryEnd) error {
	return nil
}
func (nullHistory) BeatHistory(context.Context, int64, string, time.Time) error { return nil }
func (nullHistory) CloseDeadRuns(context.Context, string, time.Time, int64) (int64, error) {
	return 0, nil
}
func (nullHistory) PruneHistory(context.Context, time.Time, int) (int64, error) { return 0, nil }

// recorder is one node's presence recorder, writing through its Tee.
type recorder struct {
	t   *testing.T
	h   *Hooks
	tee *Tee
	run int64
	seq int64
}

func (r *recorder) open(doc, user string, s awareness.Status, at time.Time) int64 {
	r.seq++
	r.write([]awareness.HistoryInterval{{Run: r.run, Seq: r.seq, Doc: doc, User: user, Name: "N-" + user, Status: s, From: at}}, nil)
	return r.seq
}

func (r *recorder) end(doc string, seq int64, at time.Time) {
	r.write(nil, []awareness.HistoryEnd{{Run: r.run, Seq: seq, Doc: doc, To: at}})
}

func (r *recorder) write(o []awareness.HistoryInterval, c []awareness.HistoryEnd) {
	if err := r.tee.WriteHistory(context.Background(), o, c); err != nil {
		r.t.Fatal(err)
	}
	r.h.drainPresence(context.Background())
}

func presenceOf(t *testing.T, qs ...*captured) (entered, left []*PresenceData, status []*UserStatusData) {
	for _, q := range qs {
		es := q.events(t)
		for _, e := range ofType(es, PresenceEntered) {
			entered = append(entered, e.Data.(*PresenceData))
		}
		for _, e := range ofType(es, PresenceLeft) {
			left = append(left, e.Data.(*PresenceData))
		}
		for _, e := range ofType(es, UserStatus) {
			status = append(status, e.Data.(*UserStatusData))
		}
	}
	return
}

// A user's tabs on two nodes over the real PostgreSQL: the first in is
// presence.entered, the last out presence.left, each told once; the
// user's status is the best of its tabs'.
func TestPresenceIsTheFirstTabInAndTheLastOutAcrossNodes(t *testing.T) {
	open, _ := postgresBackend.open(t)
	qa, qb := &captured{}, &captured{}
	ha := newHooks(t, open(), true, qa, Config{})
	hb := newHooks(t, open(), true, qb, Config{})
	a := &recorder{t: t, h: ha, tee: ha.Tee(nullHistory{}), run: 1}
	b := &recorder{t: t, h: hb, tee: hb.Tee(nullHistory{}), run: 2}
	t0 := time.UnixMilli(1_700_000_000_000)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

	sa := a.open("", "ana", awareness.StatusOnline, at(0))
	da := a.open("docA", "ana", awareness.StatusOnline, at(0))
	sb := b.open("", "ana", awareness.StatusAway, at(1))
	db := b.open("docA", "ana", awareness.StatusAway, at(1))
	entered, left, status := presenceOf(t, qa, qb)
	if len(entered) != 1 || entered[0].DocumentID != "docA" || entered[0].UserID != "ana" || entered[0].At != at(0).UnixMilli() {
		t.Fatalf("entered %+v, want ana into docA once, at 0 s", entered)
	}
	if len(left) != 0 || len(status) != 1 || status[0].Status != "online" {
		t.Fatalf("left %+v status %+v, want none and online once", left, status)
	}
	a.end("docA", da, at(5))
	a.end("", sa, at(5))
	entered, left, status = presenceOf(t, qa, qb)
	if len(entered) != 1 || len(left) != 0 {
		t.Fatalf("a tab left while another stays: entered %d left %d, want 1 and 0", len(entered), len(left))
	}
	if len(status) != 2 || status[1].Status != "away" || status[1].At != at(5).UnixMilli() {
		t.Fatalf("status %+v, want online then away at 5 s (the tab left is the online one)", status)
	}
	b.end("docA", db, at(9))
	b.end("", sb, at(9))
	entered, left, status = presenceOf(t, qa, qb)
	if len(left) != 1 || left[0].UserID != "ana" || left[0].At != at(9).UnixMilli() {
		t.Fatalf("left %+v, want ana out of docA once, at 9 s", left)
	}
	if len(status) != 3 || status[2].Status != "offline" {
		t.Fatalf("status %+v, want offline last", status)
	}
	if len(entered) != 1 {
		t.Fatalf("entered %d times, want 1", len(entered))
	}
	// A write handed twice (a write retried after it was stored) changes
	// nothing more.
	b.end("docA", db, at(9))
	if _, left, _ := presenceOf(t, qa, qb); len(left) != 1 {
		t.Fatalf("left told %d times after a repeated end, want 1", len(left))
	}
}

// A node that dies leaves its intervals open; when its run is found dead
// its users leave, as of its last beat.
func TestADeadRunsUsersLeaveAtItsLastBeat(t *testing.T) {
	open, _ := sqliteBackend.open(t)
	q := &captured{}
	h := newHooks(t, open(), false, q, Config{})
	dead := &recorder{t: t, h: h, tee: h.Tee(nullHistory{}), run: 7}
	t0 := time.UnixMilli(1_700_000_000_000)
	ctx := context.Background()
	if err := dead.tee.BeatHistory(ctx, 7, "n1", t0); err != nil {
		t.Fatal(err)
	}
	dead.open("docA", "bo", awareness.StatusOnline, t0)
	dead.open("", "bo", awareness.StatusOnline, t0)
	if err := dead.tee.BeatHistory(ctx, 7, "n1", t0.Add(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	// Another node's recorder, run 8, finds run 7 stale.
	if _, err := dead.tee.CloseDeadRuns(ctx, "", t0.Add(time.Minute), 8); err != nil {
		t.Fatal(err)
	}
	h.drainPresence(ctx)
	_, left, status := presenceOf(t, q)
	if len(left) != 1 || left[0].At != t0.Add(2*time.Second).UnixMilli() {
		t.Fatalf("left %+v, want bo's one, at the run's last beat", left)
	}
	if len(status) != 2 || status[1].Status != "offline" {
		t.Fatalf("status %+v, want online then offline", status)
	}
}

// The hand-off from the recorder never waits: past its bound a batch is
// dropped and counted.
func TestThePresenceHandoffIsBoundedAndNeverWaits(t *testing.T) {
	open, _ := sqliteBackend.open(t)
	h := newHooks(t, open(), false, &captured{}, Config{MaxHandoff: 10})
	tee := h.Tee(nullHistory{})
	batch := make([]awareness.HistoryInterval, 4)
	for i := range batch {
		batch[i] = awareness.HistoryInterval{Run: 1, Seq: int64(i + 1), Doc: "d", User: "u", Status: awareness.StatusOnline}
	}
	for range 5 { // 20 intervals, nobody applying them
		if err := tee.WriteHistory(context.Background(), batch, nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := h.handoff.Load(); n != 8 {
		t.Fatalf("%d intervals handed off, want 8 (two batches of 4 under the bound of 10)", n)
	}
	if got := testutil.ToFloat64(h.m.dropped.WithLabelValues("presence")); got != 3 {
		t.Fatalf("dropped{presence} = %v, want 3 batches", got)
	}
	h.drainPresence(context.Background())
	if n := h.handoff.Load(); n != 0 {
		t.Fatalf("%d intervals still counted once applied", n)
	}
}

// A node that stops ends all its users at once: one batch of thousands
// of intervals is applied in a few statements, and each user is told.
func TestAThousandUsersComeAndGoInOneBatchEach(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			open, pg := b.open(t)
			q := &captured{}
			h := newHooks(t, open(), pg, q, Config{})
			r := &recorder{t: t, h: h, tee: h.Tee(nullHistory{}), run: 3}
			const users = 1200
			t0 := time.UnixMilli(1_700_000_000_000)
			var opened []awareness.HistoryInterval
			for i := range users {
				u := fmt.Sprintf("user%d", i)
				opened = append(opened,
					awareness.HistoryInterval{Run: 3, Seq: int64(2*i + 1), Doc: "docA", User: u, Status: awareness.StatusOnline, From: t0},
					awareness.HistoryInterval{Run: 3, Seq: int64(2*i + 2), User: u, Status: awareness.StatusOnline, From: t0})
			}
			r.write(opened, nil)
			var closed []awareness.HistoryEnd
			for _, iv := range opened {
				closed = append(closed, awareness.HistoryEnd{Run: 3, Seq: iv.Seq, Doc: iv.Doc, To: t0.Add(time.Minute)})
			}
			r.write(nil, closed)
			entered, left, status := presenceOf(t, q)
			if len(entered) != users || len(left) != users || len(status) != 2*users {
				t.Fatalf("%d entered, %d left, %d statuses for %d users, want %d, %d and %d", len(entered), len(left), len(status), users, users, users, 2*users)
			}
		})
	}
}
