package mention

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tandemhq/tandem/doc"
	"github.com/tandemhq/tandem/doc/store"
	"github.com/tandemhq/tandem/internal/testenv"
)

// crashCopy returns a new store holding what from holds for the test
// document, journals included: the disk of a node killed at this moment.
func crashCopy(t *testing.T, from store.Store) *store.Bolt {
	t.Helper()
	st, err := from.Load(context.Background(), testDoc)
	if err != nil {
		t.Fatal(err)
	}
	to := openStore(t, t.TempDir())
	w := store.Write{DocumentID: testDoc, Snapshot: st.Snapshot, Chunks: st.Chunks, Journals: st.Journals}
	if err := to.Write(context.Background(), []store.Write{w}); err != nil {
		t.Fatal(err)
	}
	return to
}

func storedJournals(t *testing.T, s store.Store) int {
	t.Helper()
	js, err := s.Journals(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return len(js)
}

func waitNoJournals(t *testing.T, s store.Store) {
	t.Helper()
	testenv.WaitFor(t, "the journals to be deleted", func() bool { return storedJournals(t, s) == 0 })
}

func authors(documentID string, p doc.Peer) (string, string) {
	switch p.ID() {
	case "peer-ana":
		return "ana", "Ana"
	case "peer-cy":
		return "cy", "Cy"
	}
	return "", ""
}

// typeTwoBursts leaves a hub owing two reports: ana's mention of bo,
// counted when cy began to type, and cy's mention of dee, not counted
// yet (its changes are pending).
func typeTwoBursts(t *testing.T, h *doc.Hub) {
	t.Helper()
	ana, cy := newClient("peer-ana"), newClient("peer-cy")
	ana.splice(t, 0, 0, "Roadmap\n")
	ana.sync(t, h, false)
	for i, ch := range "hi @bo " {
		ana.splice(t, 8+i, 0, string(ch))
		ana.sync(t, h, false)
	}
	cy.sync(t, h, true)
	for i, ch := range "@dee " {
		cy.splice(t, 8+i, 0, string(ch))
		cy.sync(t, h, false)
	}
	if err := h.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func sortedReports(t *testing.T, got chan Report, n int) map[string]Report {
	t.Helper()
	out := map[string]Report{}
	for range n {
		select {
		case m := <-got:
			if _, dup := out[m.Actor]; dup {
				t.Fatalf("%s's mentions reported twice", m.Actor)
			}
			out[m.Actor] = m
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d reports arrived: %v", len(out), n, out)
		}
	}
	return out
}

// A node killed while its peers' edits have not settled leaves its
// mention journal with the changes; the next node to start on that store
// reports what it owed, once, for the right authors, and deletes it.
func TestMentionsOfAKilledNodeAreReportedByTheNext(t *testing.T) {
	var killed atomic.Bool
	aStore := openStore(t, t.TempDir())
	a, _ := newTestHub(t, aStore, Config{
		NodeID: "node-a", Author: authors, Settle: time.Hour,
		Report: func(m Report) error {
			if !killed.Load() {
				t.Errorf("node a reported %+v before it was killed", m)
			}
			return nil
		},
	})
	typeTwoBursts(t, a)
	disk := crashCopy(t, aStore)
	killed.Store(true) // what node a does from here on is not on this disk
	js, _ := disk.Journals(context.Background())
	if len(js) != 1 || js[0].Node != "node-a" {
		t.Fatalf("the killed node's disk holds journals %+v, want node-a's", js)
	}

	got := make(chan Report, 10)
	newTestHub(t, disk, Config{
		NodeID: "node-b", Author: authors,
		Report: func(m Report) error { got <- m; return nil },
	})
	reports := sortedReports(t, got, 2)
	if m := reports["ana"]; !slices.Equal(m.Users, []string{"bo"}) || m.ActorName != "Ana" || m.PeerID != "peer-ana" || m.Title != "Roadmap" || m.Key == "" {
		t.Fatalf("ana's report = %+v", m)
	}
	if m := reports["cy"]; !slices.Equal(m.Users, []string{"dee"}) || m.Key == "" || m.Key == reports["ana"].Key {
		t.Fatalf("cy's report = %+v", m)
	}
	waitNoJournals(t, disk)
	select {
	case m := <-got:
		t.Fatalf("an extra report: %+v", m)
	default:
	}
}

// A journal whose node is alive is its node's to report; once the node is
// gone, a node that has the document loaded already takes it over.
func TestAJournalIsTakenOverOnlyOnceItsNodeIsGone(t *testing.T) {
	aStore := openStore(t, t.TempDir())
	a, _ := newTestHub(t, aStore, Config{
		NodeID: "node-a", Author: authors, Settle: time.Hour,
		Report: func(Report) error { return nil },
	})
	typeTwoBursts(t, a)
	disk := crashCopy(t, aStore)

	var aAlive atomic.Bool
	aAlive.Store(true)
	got := make(chan Report, 10)
	b, trB := newTestHub(t, disk, Config{
		NodeID: "node-b", Author: authors,
		Report:    func(m Report) error { got <- m; return nil },
		NodeAlive: func(_ context.Context, node string) (bool, error) { return node == "node-a" && aAlive.Load(), nil },
	})
	reader := newClient("reader")
	reader.sync(t, b, true) // the room is loaded, with node a's journal left alone
	if err := trB.SweepJournals(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Fatalf("a live node's journal was taken over: %+v", <-got)
	}

	aAlive.Store(false)
	trB.NodeGone("node-a")
	reports := sortedReports(t, got, 2)
	if !slices.Equal(reports["ana"].Users, []string{"bo"}) || !slices.Equal(reports["cy"].Users, []string{"dee"}) {
		t.Fatalf("reports = %+v", reports)
	}
	waitNoJournals(t, disk)
}

// A report the notification queue cannot take stays in the journal and is
// offered again, with the same key, until it is taken.
func TestAFailedReportIsOfferedAgainWithItsKey(t *testing.T) {
	var calls atomic.Int32
	offered := make(chan Report, 10)
	s := openStore(t, t.TempDir())
	h, _ := newTestHub(t, s, Config{
		Author: authors, Settle: time.Millisecond,
		Report: func(m Report) error {
			offered <- m
			if calls.Add(1) < 3 {
				return errors.New("queue away")
			}
			return nil
		},
	})
	ana := newClient("peer-ana")
	ana.splice(t, 0, 0, "hi @bo ")
	ana.sync(t, h, false)
	first := <-offered
	// While the queue is away, the report is in the stored journal.
	testenv.WaitFor(t, "the failed report in the stored journal", func() bool { return storedJournals(t, s) == 1 })
	for range 2 {
		select {
		case m := <-offered:
			if m.Key != first.Key || !slices.Equal(m.Users, first.Users) {
				t.Fatalf("offered again as %+v, first as %+v", m, first)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("the failed report was not offered again")
		}
	}
	waitNoJournals(t, s)
}

// refusedError is an error of the notifications that says offering the
// same report again would fail again, as notify.ErrBadEvent does.
type refusedError struct{}

func (refusedError) Error() string   { return "bad notification event: title must be at most 256 bytes" }
func (refusedError) Permanent() bool { return true }

// A report the notifications refuse for good (as they refused a title of
// 80 emoji) is offered once, dropped and counted, and leaves the journal;
// a later report of the document is handed over at once, and the room
// then leaves memory. Before, the refused report was offered for ever,
// every later one waited behind it, and the room stayed.
func TestAReportRefusedForGoodIsDroppedAndHoldsUpNoOther(t *testing.T) {
	s := openStore(t, t.TempDir())
	var refused atomic.Int32
	got := make(chan Report, 10)
	h, tr := newTestHub(t, s, Config{
		Author: authors, Settle: time.Hour,
		Report: func(m Report) error {
			if m.Actor == "ana" {
				refused.Add(1)
				return fmt.Errorf("queue 1 mentions in %s: %w", m.DocumentID, refusedError{})
			}
			got <- m
			return nil
		},
	}, doc.Config{EvictAfter: time.Millisecond})
	ana, cy := newClient("peer-ana"), newClient("peer-cy")
	ana.splice(t, 0, 0, "Roadmap\nhi @bo ")
	ana.sync(t, h, false)
	settleBursts(t, h)
	waitNoBursts(t, h)
	cy.sync(t, h, true)
	cy.splice(t, 0, 0, "@dee ")
	cy.sync(t, h, false)
	settleBursts(t, h)
	select {
	case m := <-got:
		if m.Actor != "cy" || !slices.Equal(m.Users, []string{"dee"}) {
			t.Fatalf("reported %+v, want cy's mention of dee", m)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("cy's report waited behind ana's, which the notifications refuse for good")
	}
	waitNoJournals(t, s)
	if n := refused.Load(); n != 1 {
		t.Fatalf("the refused report was offered %d times, want once", n)
	}
	if n := testutil.ToFloat64(tr.dropped); n != 1 {
		t.Fatalf("dropped reports = %v, want 1", n)
	}
	h.Leave(ana.peer, testDoc)
	h.Leave(cy.peer, testDoc)
	testenv.WaitFor(t, "the room to leave memory", func() bool { return h.Stats().Rooms == 0 })
}

// A report that fails for now (the notification queue is away for it)
// waits and is offered again with its key; meanwhile another author's
// report is handed over at once, not behind it. Once both are taken, the
// journal is deleted and the room leaves memory.
func TestAReportThatFailsForNowHoldsUpNoOther(t *testing.T) {
	s := openStore(t, t.TempDir())
	var away atomic.Bool
	away.Store(true)
	failed := make(chan Report, 10)
	got := make(chan Report, 10)
	h, _ := newTestHub(t, s, Config{
		Author: authors, Settle: time.Hour,
		Report: func(m Report) error {
			if m.Actor == "ana" && away.Load() {
				failed <- m
				return errors.New("queue away")
			}
			got <- m
			return nil
		},
	}, doc.Config{EvictAfter: time.Millisecond})
	ana, cy := newClient("peer-ana"), newClient("peer-cy")
	ana.splice(t, 0, 0, "Roadmap\nhi @bo ")
	ana.sync(t, h, false)
	settleBursts(t, h)
	first := <-failed
	waitNoBursts(t, h)
	cy.sync(t, h, true)
	cy.splice(t, 0, 0, "@dee ")
	cy.sync(t, h, false)
	settleBursts(t, h)
	select {
	case m := <-got:
		if m.Actor != "cy" {
			t.Fatalf("reported %+v, want cy's report", m)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("cy's report waited behind ana's, which fails for now")
	}
	away.Store(false)
	select {
	case m := <-got:
		if m.Actor != "ana" || m.Key != first.Key || !slices.Equal(m.Users, []string{"bo"}) {
			t.Fatalf("offered again as %+v, first as %+v", m, first)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("ana's report was not offered again")
	}
	waitNoJournals(t, s)
	h.Leave(ana.peer, testDoc)
	h.Leave(cy.peer, testDoc)
	testenv.WaitFor(t, "the room to leave memory", func() bool { return h.Stats().Rooms == 0 })
}
