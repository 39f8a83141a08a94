package webhook

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/tandemhq/tandem/internal/testenv"
)

// A node that still takes a window for open after a sweep closed it (the
// sweep's forget came before the flush's learn) writes the next change to
// a new window, which is told in its turn.
func TestAWindowKnownAfterItClosedOpensAgain(t *testing.T) {
	open, _ := sqliteBackend.open(t)
	c, q := newClock(), &captured{}
	h := newHooks(t, open(), false, q, Config{Now: c.Now})
	changeAt(h, c, 0, "docA", "ana", head(1))
	stale := h.known("docA")
	if stale == nil {
		t.Fatal("a window this node opened is not known")
	}
	sweepAt(h, c, 3*time.Second)
	if h.known("docA") != nil {
		t.Fatal("a window the sweep closed is still known")
	}
	h.windows["docA"] = stale // as a learn that came after the sweep's forget
	changeAt(h, c, 5*time.Second, "docA", "bo", head(2))
	sweepAt(h, c, 8*time.Second)
	es := ofType(q.events(t), DocumentChanged)
	if len(es) != 2 {
		t.Fatalf("%d document.changed, want one per window", len(es))
	}
	got := es[1].Data.(*DocumentChangedData)
	want := &DocumentChangedData{DocumentID: "docA", Heads: []string{fmt.Sprintf("%x", head(2))}, Users: []string{"bo"},
		FirstChangeAt: c.Now().Add(-3 * time.Second).UnixMilli(), LastChangeAt: c.Now().Add(-3 * time.Second).UnixMilli()}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("the second window %+v, want %+v", got, want)
	}
}

// A flush does not learn a window that a sweep closed while it wrote.
func TestAFlushDoesNotLearnAWindowClosedMeanwhile(t *testing.T) {
	open, _ := sqliteBackend.open(t)
	c, q := newClock(), &captured{}
	h := newHooks(t, open(), false, q, Config{Now: c.Now})
	h.startLearning()
	h.forget("docA")
	h.learn(map[string]*knownWindow{"docA": {opened: 1, last: 1}, "docB": {opened: 1, last: 1}})
	if h.known("docA") != nil || h.known("docB") == nil {
		t.Fatalf("known after the flush: docA %v, docB %v; want docB alone", h.known("docA"), h.known("docB"))
	}
}

// The users and heads a known window is moved on with are the ones the
// read path would write: every user, the heads noted last.
func TestAKnownWindowKeepsItsUsersAndTheHeadsNotedLast(t *testing.T) {
	open, _ := sqliteBackend.open(t)
	c, q := newClock(), &captured{}
	h := newHooks(t, open(), false, q, Config{Now: c.Now})
	changeAt(h, c, 0, "docA", "bo", head(1))
	changeAt(h, c, time.Second, "docA", "ana", head(2))
	changeAt(h, c, 1500*time.Millisecond, "docA", "bo", head(3))
	sweepAt(h, c, 4*time.Second)
	es := ofType(q.events(t), DocumentChanged)
	if len(es) != 1 {
		t.Fatalf("%d document.changed, want 1", len(es))
	}
	if d := es[0].Data.(*DocumentChangedData); !reflect.DeepEqual(d.Users, []string{"ana", "bo"}) || !reflect.DeepEqual(d.Heads, []string{fmt.Sprintf("%x", head(3))}) {
		t.Fatalf("users %v heads %v, want [ana bo] and the last heads", d.Users, d.Heads)
	}
}

// Changes that fill half the pending bound are written at once, not at
// the next FlushEvery, so that a node with many documents edited does not
// drop their changes between flushes.
func TestPendingHalfFullIsWrittenBeforeItsTime(t *testing.T) {
	open, pg := sqliteBackend.open(t)
	n := startNode(t, open(), pg, Config{Endpoints: []string{"http://127.0.0.1:1/hook"}, FlushEvery: time.Hour, MaxPendingDocuments: 4})
	n.Hooks.noteChange("docA", "ana", testPeer("ana"), [][32]byte{head(1)}, false)
	n.Hooks.noteChange("docB", "ana", testPeer("ana"), [][32]byte{head(2)}, false)
	testenv.WaitFor(t, "both windows written", func() bool {
		var c int
		n.Hooks.store.db.QueryRow(`SELECT COUNT(*) FROM tandem_webhook_windows`).Scan(&c)
		return c == 2
	})
}
