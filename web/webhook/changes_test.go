package webhook

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/tandemhq/tandem/web/notify"
)

type testPeer string

func (p testPeer) ID() string { return string(p) }

func head(b byte) [32]byte { return [32]byte{b} }

// changeAt notes a change of doc by user at the clock's d.
func changeAt(h *Hooks, c *clock, d time.Duration, doc, user string, heads ...[32]byte) {
	c.Set(d)
	h.noteChange(doc, user, testPeer(user), heads, false)
	h.flush(context.Background())
}

// graceOf is how long after a window is due h closes it: FlushEvery on
// PostgreSQL (closeDue), none on SQLite.
func graceOf(h *Hooks) time.Duration {
	if h.store.postgres {
		return h.cfg.FlushEvery
	}
	return 0
}

// sweepAt closes the windows due at the clock's d.
func sweepAt(h *Hooks, c *clock, d time.Duration) {
	c.Set(d)
	h.sweep(context.Background())
}

func TestChangesFoldUntilTheyPauseForTheDebounce(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			open, pg := b.open(t)
			c, q := newClock(), &captured{}
			h := newHooks(t, open(), pg, q, Config{Now: c.Now})
			s := time.Second
			changeAt(h, c, 0, "docA", "ana", head(1))
			changeAt(h, c, 1*s, "docA", "bo", head(2))
			changeAt(h, c, 2500*time.Millisecond, "docA", "ana", head(3))
			grace := graceOf(h)
			sweepAt(h, c, 4499*time.Millisecond+grace) // 1 ms before the pause ends
			if es := q.events(t); len(es) != 0 {
				t.Fatalf("an event before the changes paused for 2 s: %+v", es)
			}
			sweepAt(h, c, 4500*time.Millisecond+grace)
			es := ofType(q.events(t), DocumentChanged)
			if len(es) != 1 {
				t.Fatalf("%d document.changed once the changes paused, want 1", len(es))
			}
			got := es[0].Data.(*DocumentChangedData)
			want := &DocumentChangedData{DocumentID: "docA", Heads: []string{fmt.Sprintf("%x", head(3))}, Users: []string{"ana", "bo"},
				FirstChangeAt: c.Now().Add(-4500*time.Millisecond - grace).UnixMilli(), LastChangeAt: c.Now().Add(-2*s - grace).UnixMilli()}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("document.changed %+v, want %+v", got, want)
			}
			sweepAt(h, c, 20*s)
			if n := len(q.events(t)); n != 1 {
				t.Fatalf("%d events after another sweep, want still 1", n)
			}
		})
	}
}

func TestChangesThatNeverPauseAreToldAtTheMaximumWait(t *testing.T) {
	c, q := newClock(), &captured{}
	open, _ := sqliteBackend.open(t)
	h := newHooks(t, open(), false, q, Config{Now: c.Now})
	for i := range 10 { // a change every second from 0 to 9 s
		changeAt(h, c, time.Duration(i)*time.Second, "docA", "ana", head(byte(i)))
		sweepAt(h, c, time.Duration(i)*time.Second+999*time.Millisecond)
	}
	if n := len(q.events(t)); n != 0 {
		t.Fatalf("%d events before the maximum wait", n)
	}
	sweepAt(h, c, 10*time.Second)
	es := ofType(q.events(t), DocumentChanged)
	if len(es) != 1 {
		t.Fatalf("%d document.changed at the maximum wait, want 1", len(es))
	}
	// The typing goes on: the next change opens the next window.
	changeAt(h, c, 10*time.Second+500*time.Millisecond, "docA", "ana", head(11))
	sweepAt(h, c, 12*time.Second+499*time.Millisecond)
	if n := len(q.events(t)); n != 1 {
		t.Fatalf("%d events before the next window's pause, want 1", n)
	}
	sweepAt(h, c, 12*time.Second+500*time.Millisecond)
	if n := len(q.events(t)); n != 2 {
		t.Fatalf("%d events after the next window's pause, want 2", n)
	}
}

func TestADocumentIsCreatedOnceWhateverNodesSayIt(t *testing.T) {
	open, _ := sqliteBackend.open(t)
	db := open()
	c, q := newClock(), &captured{}
	a := newHooks(t, db, false, q, Config{Now: c.Now})
	b := newHooks(t, db, false, q, Config{Now: c.Now})
	a.noteChange("docN", "ana", testPeer("p1"), [][32]byte{head(1)}, true)
	b.noteChange("docN", "bo", testPeer("p2"), [][32]byte{head(1)}, true)
	a.flush(context.Background())
	b.flush(context.Background())
	es := ofType(q.events(t), DocumentCreated)
	if len(es) != 1 {
		t.Fatalf("%d document.created, want 1", len(es))
	}
	if d := es[0].Data.(*DocumentCreatedData); d.DocumentID != "docN" || !reflect.DeepEqual(d.Users, []string{"ana"}) {
		t.Fatalf("document.created %+v", d)
	}
}

// Two nodes over the real PostgreSQL note changes of one document within
// one window, and sweep at the same time, over and over: each window is
// one event.
func TestADocumentEditedOnTwoNodesInOneWindowIsOneEvent(t *testing.T) {
	open, _ := postgresBackend.open(t)
	c := newClock()
	qa, qb := &captured{}, &captured{}
	a := newHooks(t, open(), true, qa, Config{Now: c.Now})
	b := newHooks(t, open(), true, qb, Config{Now: c.Now})
	const windows = 20
	for i := range windows {
		base := time.Duration(i) * time.Minute
		c.Set(base)
		doc := "docShared"
		a.noteChange(doc, "ana", testPeer("pa"), [][32]byte{head(byte(2 * i))}, false)
		b.noteChange(doc, "bo", testPeer("pb"), [][32]byte{head(byte(2*i + 1))}, false)
		var wg sync.WaitGroup
		for _, h := range []*Hooks{a, b} {
			wg.Go(func() { h.flush(context.Background()) })
		}
		wg.Wait()
		c.Set(base + 3*time.Second)
		for _, h := range []*Hooks{a, b, a, b} {
			wg.Go(func() { h.sweep(context.Background()) })
		}
		wg.Wait()
	}
	all := append(ofType(qa.events(t), DocumentChanged), ofType(qb.events(t), DocumentChanged)...)
	if len(all) != windows {
		t.Fatalf("%d document.changed for %d windows edited on two nodes, want one each", len(all), windows)
	}
	for _, e := range all {
		if u := e.Data.(*DocumentChangedData).Users; !reflect.DeepEqual(u, []string{"ana", "bo"}) {
			t.Fatalf("a window's users %v, want both nodes' [ana bo]", u)
		}
	}
}

// What one node holds of changes not yet written is bounded in
// documents; past the bound a change is dropped and counted.
func TestPendingChangesAreBoundedInDocuments(t *testing.T) {
	open, _ := sqliteBackend.open(t)
	c, q := newClock(), &captured{}
	h := newHooks(t, open(), false, q, Config{Now: c.Now, MaxPendingDocuments: 3})
	for i := range 5 {
		for range 100 {
			h.noteChange(fmt.Sprintf("doc%d", i), "ana", testPeer("p"), [][32]byte{head(1)}, false)
		}
	}
	if n := len(h.pending); n != 3 {
		t.Fatalf("%d documents pending, want the bound 3", n)
	}
	if got := testutil.ToFloat64(h.m.dropped.WithLabelValues("pending")); got != 200 {
		t.Fatalf("dropped{pending} = %v, want the 200 changes of the two documents past the bound", got)
	}
	for range 200 {
		h.noteChange("doc0", fmt.Sprintf("user%d", len(h.pending["doc0"].users)), testPeer("p"), [][32]byte{head(1)}, false)
	}
	if c := h.pending["doc0"]; len(c.users) != MaxUsers || !c.usersTruncated {
		t.Fatalf("a document pending holds %d users (truncated %v), want MaxUsers and truncated", len(c.users), c.usersTruncated)
	}
	many := make([][32]byte, 1000)
	h.noteChange("doc0", "ana", testPeer("p"), many, false)
	if n := len(h.pending["doc0"].heads); n != MaxHeads+1 {
		t.Fatalf("a document pending holds %d heads, want MaxHeads+1 (the mark of more)", n)
	}
}

// What one node holds of pending changes is bounded in bytes too: long
// user ids and many heads are charged, and past the bound a change is
// dropped, counted, and the charge never passes it.
func TestPendingChangesAreBoundedInBytes(t *testing.T) {
	open, _ := sqliteBackend.open(t)
	c, q := newClock(), &captured{}
	const budget = 64 << 10
	h := newHooks(t, open(), false, q, Config{Now: c.Now, MaxPendingBytes: budget})
	long := strings.Repeat("x", 10_000)
	many := make([][32]byte, 1000)
	for i := range 500 {
		h.noteChange(fmt.Sprintf("doc%d", i%50), fmt.Sprintf("%s%d", long, i), testPeer("p"), many, false)
		if h.pendingBytes > budget {
			t.Fatalf("pending charged %d bytes, over the bound %d", h.pendingBytes, budget)
		}
	}
	if got := testutil.ToFloat64(h.m.dropped.WithLabelValues("pending")); got == 0 {
		t.Fatal("nothing dropped at the bound")
	}
	sum := 0
	for id, d := range h.pending {
		want := docCost + len(id) + headCost*len(d.heads)
		for u := range d.users {
			if len(u) > MaxUserID {
				t.Fatalf("a user id of %d bytes held, over MaxUserID", len(u))
			}
			want += userCost + len(u)
		}
		if d.cost != want {
			t.Fatalf("%s charged %d, holds %d", id, d.cost, want)
		}
		sum += d.cost
	}
	if sum != h.pendingBytes {
		t.Fatalf("entries charged %d in all, the total says %d", sum, h.pendingBytes)
	}
	h.flush(context.Background())
	if h.pendingBytes != 0 || len(h.pending) != 0 {
		t.Fatalf("%d bytes, %d documents pending after a flush", h.pendingBytes, len(h.pending))
	}
}

// The largest document.changed a node can be made to send: MaxUsers
// users of MaxUserID bytes, MaxHeads heads.
func TestADocumentChangedIsBoundedWhateverItsEditors(t *testing.T) {
	open, _ := sqliteBackend.open(t)
	c, q := newClock(), &captured{}
	h := newHooks(t, open(), false, q, Config{Now: c.Now})
	long := strings.Repeat("é", 10_000) // cut at a character's start
	many := make([][32]byte, 1000)
	for i := range many {
		many[i] = [32]byte{byte(i), byte(i >> 8)}
	}
	for i := range 300 {
		h.noteChange("docBig", fmt.Sprintf("%d%s", i, long), testPeer("p"), many, false)
	}
	h.flush(context.Background())
	sweepAt(h, c, time.Minute)
	q.mu.Lock()
	body := q.jobs[0].Body
	q.mu.Unlock()
	const bound = MaxUsers*(MaxUserID+3) + MaxHeads*67 + 512
	if len(body) > bound {
		t.Fatalf("a document.changed of %d bytes, over %d", len(body), bound)
	}
	d := decode(t, body).Data.(*DocumentChangedData)
	if len(d.Users) != MaxUsers || !d.UsersTruncated || len(d.Heads) != MaxHeads || !d.HeadsTruncated {
		t.Fatalf("%d users (truncated %v), %d heads (truncated %v)", len(d.Users), d.UsersTruncated, len(d.Heads), d.HeadsTruncated)
	}
	for _, u := range d.Users {
		if !utf8.ValidString(u) || len(u) > MaxUserID {
			t.Fatalf("a user id of %d bytes, valid UTF-8 %v", len(u), utf8.ValidString(u))
		}
	}
}

// Edits on two nodes at once: the window names the heads noted last,
// which the node that received the other's change saw merged, whatever
// order the nodes write in.
func TestAWindowEditedOnTwoNodesNamesTheHeadsNotedLast(t *testing.T) {
	open, _ := sqliteBackend.open(t)
	db := open()
	c, q := newClock(), &captured{}
	a := newHooks(t, db, false, q, Config{Now: c.Now})
	b := newHooks(t, db, false, q, Config{Now: c.Now})
	a.noteChange("docA", "ana", testPeer("pa"), [][32]byte{head(1)}, false)
	c.Set(100 * time.Millisecond)
	b.noteChange("docA", "bo", testPeer("pb"), [][32]byte{head(2)}, false)
	c.Set(200 * time.Millisecond)
	a.noteHeads("docA", [][32]byte{head(1), head(2)}) // bo's change reaches a
	a.flush(context.Background())
	b.flush(context.Background()) // b's heads, noted earlier, written last
	sweepAt(a, c, 5*time.Second)
	es := ofType(q.events(t), DocumentChanged)
	if len(es) != 1 {
		t.Fatalf("%d document.changed, want 1", len(es))
	}
	d := es[0].Data.(*DocumentChangedData)
	want := []string{fmt.Sprintf("%x", head(1)), fmt.Sprintf("%x", head(2))}
	slices.Sort(want)
	if !reflect.DeepEqual(d.Users, []string{"ana", "bo"}) || !reflect.DeepEqual(d.Heads, want) {
		t.Fatalf("users %v heads %v, want [ana bo] and both heads", d.Users, d.Heads)
	}
	if d.LastChangeAt != c.Now().Add(-4900*time.Millisecond).UnixMilli() {
		t.Fatalf("last change at %d, want bo's (100 ms); heads alone are no change", d.LastChangeAt)
	}
	// Heads alone open no window.
	b.noteHeads("docB", [][32]byte{head(3)})
	b.flush(context.Background())
	sweepAt(b, c, time.Minute)
	if n := len(ofType(q.events(t), DocumentChanged)); n != 1 {
		t.Fatalf("%d document.changed after heads alone, want still 1", n)
	}
}

// BenchmarkFlushThousandOpenWindows is a node's flush while 1,000
// documents are edited at once: every one has a window open, which each
// flush moves on.
func BenchmarkFlushThousandOpenWindows(b *testing.B) {
	db, err := notify.OpenSQLite(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	c := newClock()
	h := newHooks(b, db, false, &captured{}, Config{Now: c.Now})
	docs := make([]string, 1000)
	for i := range docs {
		docs[i] = fmt.Sprintf("doc%04d", i)
	}
	note := func(i int) {
		c.Set(time.Duration(i) * time.Millisecond)
		for j, d := range docs {
			h.noteChange(d, "ana", testPeer("ana"), [][32]byte{head(byte(i + j))}, false)
		}
		h.flush(context.Background())
	}
	note(0)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		note(i + 1)
	}
}

func TestAWindowStaysOpenWhileTheNodeHoldsALaterChangeUnwritten(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			open, pg := b.open(t)
			c, q := newClock(), &captured{}
			h := newHooks(t, open(), pg, q, Config{Now: c.Now})
			ms := time.Millisecond
			changeAt(h, c, 0, "docA", "ana", head(1)) // written: due at 2 s
			c.Set(1500 * ms)                          // noted, not yet written (a flush that lags)
			h.noteChange("docA", "bo", testPeer("bo"), [][32]byte{head(2)}, false)
			sweepAt(h, c, 2500*ms)
			if es := q.events(t); len(es) != 0 {
				t.Fatalf("the window closed while a change made 1 s before was held: %+v", es)
			}
			h.flush(context.Background())
			grace := graceOf(h)
			sweepAt(h, c, 3499*ms+grace)
			if es := q.events(t); len(es) != 0 {
				t.Fatalf("closed before the held change had paused 2 s: %+v", es)
			}
			sweepAt(h, c, 3500*ms+grace)
			es := ofType(q.events(t), DocumentChanged)
			if len(es) != 1 {
				t.Fatalf("%d document.changed, want 1 for both changes", len(es))
			}
			got := es[0].Data.(*DocumentChangedData)
			if !slices.Equal(got.Users, []string{"ana", "bo"}) || got.LastChangeAt-got.FirstChangeAt != 1500 {
				t.Fatalf("document.changed %+v, want ana and bo from 0 to 1.5 s", got)
			}
		})
	}
}

func TestAHeldChangeDoesNotKeepAWindowPastTheMaximumWait(t *testing.T) {
	open, _ := sqliteBackend.open(t)
	c, q := newClock(), &captured{}
	h := newHooks(t, open(), false, q, Config{Now: c.Now})
	for i := range 10 { // a change every second, each written
		changeAt(h, c, time.Duration(i)*time.Second, "docA", "ana", head(byte(i)))
	}
	c.Set(9900 * time.Millisecond)
	h.noteChange("docA", "ana", testPeer("ana"), [][32]byte{head(10)}, false)
	sweepAt(h, c, 10*time.Second)
	if n := len(ofType(q.events(t), DocumentChanged)); n != 1 {
		t.Fatalf("%d document.changed at the maximum wait with a change held, want 1", n)
	}
}

// In a cluster the node that sweeps a window is often not the node that
// holds a change for it, and heldLast keeps a window open only at the
// sweep of the node that holds the change: a change made within the
// debounce on node a, written at a's next flush, still joins the window
// node b opened, whatever the FlushEvery.
func TestAChangeHeldOnAnotherNodeJoinsItsWindow(t *testing.T) {
	for _, every := range []time.Duration{250 * time.Millisecond, 0} {
		t.Run(fmt.Sprint("FlushEvery ", every), func(t *testing.T) {
			open, _ := postgresBackend.open(t)
			c := newClock()
			qa, qb := &captured{}, &captured{}
			a := newHooks(t, open(), true, qa, Config{Now: c.Now, FlushEvery: every})
			b := newHooks(t, open(), true, qb, Config{Now: c.Now, FlushEvery: every})
			ms := time.Millisecond
			changeAt(b, c, 0, "docA", "bo", head(1)) // b's window: due at 2 s
			c.Set(1500 * ms)                         // a's change, 1.5 s into the debounce
			a.noteChange("docA", "ana", testPeer("ana"), [][32]byte{head(2)}, false)
			flushAt := 1500*ms + a.cfg.FlushEvery // a writes it at its next flush
			for d := 250 * ms; d <= 6*time.Second; d += 250 * ms {
				if d >= flushAt && d-250*ms < flushAt {
					c.Set(flushAt)
					a.flush(context.Background())
				}
				sweepAt(b, c, d)
				sweepAt(a, c, d)
			}
			all := append(ofType(qa.events(t), DocumentChanged), ofType(qb.events(t), DocumentChanged)...)
			if len(all) != 1 {
				t.Fatalf("%d document.changed for changes 1.5 s apart with a 2 s debounce (FlushEvery %v), want 1", len(all), a.cfg.FlushEvery)
			}
			if u := all[0].Data.(*DocumentChangedData).Users; !slices.Equal(u, []string{"ana", "bo"}) {
				t.Fatalf("the window's users %v, want [ana bo]", u)
			}
		})
	}
}
