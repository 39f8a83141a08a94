package doc

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/automerge/automerge-go"

	"github.com/tandemhq/tandem/internal/testenv"
)

func TestCountMentions(t *testing.T) {
	cases := map[string]map[string]int{
		"hi @ana and @bo.":     {"ana": 1, "bo": 1},
		"@ana @ana":            {"ana": 2},
		"mail ana@example.com": {},
		"@@ana":                {},
		"(@cy-2), @d_e!":       {"cy-2": 1, "d_e": 1},
		"@ @. @- end@":         {},
		"@u-1234abcd\n":        {"u-1234abcd": 1},
		"x.@ana":               {},
		"@":                    {},
	}
	for text, want := range cases {
		if got := countMentions(text); !reflect.DeepEqual(got, want) {
			t.Errorf("countMentions(%q) = %v, want %v", text, got, want)
		}
	}
}

// typeText makes one change per call, splicing s into the text at pos.
func (c *client) splice(t testing.TB, pos int, del int, s string) {
	t.Helper()
	v, err := c.doc.Path("text").Get()
	if err != nil {
		t.Fatal(err)
	}
	if v.Kind() != automerge.KindText {
		if err := c.doc.RootMap().Set("text", automerge.NewText("")); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.doc.Path("text").Text().Splice(pos, del, s); err != nil {
		t.Fatal(err)
	}
	if _, err := c.doc.Commit("type"); err != nil {
		t.Fatal(err)
	}
}

func TestMentionsCountOncePerInsertionWhenTypingPauses(t *testing.T) {
	got := make(chan Mention, 10)
	h := newTestHub(t, openStore(t, t.TempDir()), Config{
		Mentions: func(m Mention) error { got <- m; return nil },
		// The pause comes when the test says so (settleBursts), never
		// because a busy machine held up a keystroke.
		MentionSettle: time.Hour,
	})
	ana := newClient("peer-ana")
	ana.splice(t, 0, 0, "Roadmap\n")
	ana.sync(t, h, false)
	// "@bo" typed one key at a time: "@b" is not a mention of "b".
	for i, ch := range "hi @bo and @cy " {
		ana.splice(t, 8+i, 0, string(ch))
		ana.sync(t, h, false)
	}
	settleBursts(t, h)
	m := <-got
	slices.Sort(m.Users)
	if m.DocumentID != testDoc || m.Peer.ID() != "peer-ana" || m.Title != "Roadmap" || !reflect.DeepEqual(m.Users, []string{"bo", "cy"}) {
		t.Fatalf("mention = %+v", m)
	}

	// Another peer syncing the same document inserts nothing. Ana deletes
	// the mention of bo (no report: nothing inserted), then bo types it
	// again: a new mention, his.
	bo := newClient("peer-bo")
	bo.sync(t, h, true)
	at := len("Roadmap\nhi ")
	ana.splice(t, at, 3, "")
	ana.sync(t, h, false)
	settleBursts(t, h)
	waitNoBursts(t, h)
	bo.sync(t, h, false)
	bo.splice(t, at, 0, "@bo")
	bo.sync(t, h, false)
	settleBursts(t, h)
	m = <-got
	if m.Peer.ID() != "peer-bo" || !reflect.DeepEqual(m.Users, []string{"bo"}) {
		t.Fatalf("second mention = %+v", m)
	}
	waitNoBursts(t, h)
	if len(got) != 0 {
		t.Fatalf("an extra report: %+v", <-got)
	}
}

// settleBursts ends every open burst of the test document's room as its
// settle timer would when it fires: the peer's typing has paused.
func settleBursts(t *testing.T, h *Hub) {
	t.Helper()
	h.mu.Lock()
	r := h.rooms[testDoc]
	h.mu.Unlock()
	type open struct {
		peer string
		gen  uint64
	}
	var bursts []open
	r.mu.Lock()
	for id, b := range r.mentions.bursts {
		bursts = append(bursts, open{id, b.gen})
	}
	r.mu.Unlock()
	for _, b := range bursts {
		r.mentions.fire(b.peer, b.gen)
	}
}

// waitNoBursts waits until every peer's burst of edits has been reported
// (or found to mention nobody).
func waitNoBursts(t *testing.T, h *Hub) {
	t.Helper()
	testenv.WaitFor(t, "every burst reported", func() bool {
		h.mu.Lock()
		r := h.rooms[testDoc]
		h.mu.Unlock()
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.mentions.bursts) == 0
	})
}

func TestMentionsFromOtherNodesAreNotReported(t *testing.T) {
	got := make(chan Mention, 10)
	h := newTestHub(t, openStore(t, t.TempDir()), Config{Mentions: func(m Mention) error { got <- m; return nil }, MentionSettle: time.Millisecond})
	local := newClient("local")
	local.splice(t, 0, 0, "x")
	local.sync(t, h, false)
	// A change from another node's peer arrives through the bus.
	remote := newClient("remote")
	remote.doc, _ = automerge.Load(local.doc.Save())
	remote.splice(t, 1, 0, " @ana ")
	if err := h.applyRemoteChanges(testDoc, remote.doc.Save()); err != nil {
		t.Fatal(err)
	}
	// Then a local edit elsewhere in the text: it inserted no mention.
	local.sync(t, h, false)
	local.splice(t, 0, 0, "y")
	local.sync(t, h, false)
	h.Leave(local.peer, testDoc) // reports a pending burst at once
	waitNoBursts(t, h)
	if len(got) != 0 {
		t.Fatalf("reported %+v", <-got)
	}
}

// Two peers edit in turn: each mention counts for the peer whose change
// inserted it, though the text is read only when the author changes.
func TestMentionsOfTwoAuthorsInTurn(t *testing.T) {
	got := make(chan Mention, 10)
	h := newTestHub(t, openStore(t, t.TempDir()), Config{Mentions: func(m Mention) error { got <- m; return nil }, MentionSettle: time.Hour})
	ana, bo := newClient("peer-ana"), newClient("peer-bo")
	ana.splice(t, 0, 0, "notes ")
	ana.sync(t, h, false)
	bo.sync(t, h, true)
	bo.splice(t, 6, 0, "@cy ")
	bo.sync(t, h, false)
	ana.sync(t, h, false)
	ana.splice(t, 0, 0, "@dee ")
	ana.sync(t, h, false)
	bo.sync(t, h, false)
	bo.splice(t, 0, 0, "x")
	bo.sync(t, h, false)
	h.Leave(ana.peer, testDoc) // reports at once
	h.Leave(bo.peer, testDoc)
	byPeer := map[string][]string{}
	for range 2 {
		m := <-got
		byPeer[m.Peer.ID()] = m.Users
	}
	if !reflect.DeepEqual(byPeer, map[string][]string{"peer-ana": {"dee"}, "peer-bo": {"cy"}}) {
		t.Fatalf("mentions by peer = %v", byPeer)
	}
}

// An author who never pauses still has their mentions reported, within
// maxMentionWait of the burst's first change, not only when they stop.
func TestMentionsOfAnAuthorWhoNeverPausesAreReported(t *testing.T) {
	old := maxMentionWait
	maxMentionWait = 300 * time.Millisecond
	t.Cleanup(func() { maxMentionWait = old })
	got := make(chan Mention, 10)
	h := newTestHub(t, openStore(t, t.TempDir()), Config{
		Mentions:      func(m Mention) error { got <- m; return nil },
		MentionSettle: time.Hour, // the pause never comes
	})
	ana := newClient("peer-ana")
	ana.splice(t, 0, 0, "Roadmap\nhi @bo ")
	ana.sync(t, h, false)
	deadline := time.After(10 * time.Second)
	for n := 0; ; n++ {
		select {
		case m := <-got:
			if !slices.Equal(m.Users, []string{"bo"}) {
				t.Fatalf("reported %v, want bo", m.Users)
			}
			return
		case <-deadline:
			t.Fatal("the mention waited for a pause that never came")
		default:
		}
		ana.splice(t, len("Roadmap\nhi @bo "), 0, "x") // typing on
		ana.sync(t, h, false)
	}
}

// Mentions are read from the fields the configuration names, here a text
// and a title inside a nested map; the root "text" then mentions nobody.
func TestMentionsComeFromTheConfiguredFields(t *testing.T) {
	got := make(chan Mention, 10)
	h := newTestHub(t, openStore(t, t.TempDir()), Config{
		Mentions:      func(m Mention) error { got <- m; return nil },
		MentionSettle: 20 * time.Millisecond,
		MentionFields: MentionFields{Text: "page.body", Title: "page.heading"},
	})
	ana := newClient("peer-ana")
	page := automerge.NewMap()
	if err := ana.doc.RootMap().Set("page", page); err != nil {
		t.Fatal(err)
	}
	if err := ana.doc.Path("page").Map().Set("heading", "Plans"); err != nil {
		t.Fatal(err)
	}
	if err := ana.doc.Path("page").Map().Set("body", automerge.NewText("")); err != nil {
		t.Fatal(err)
	}
	if _, err := ana.doc.Commit("page"); err != nil {
		t.Fatal(err)
	}
	ana.sync(t, h, false)
	ana.splice(t, 0, 0, "@nobody in the root text")
	ana.sync(t, h, false)
	if err := ana.doc.Path("page", "body").Text().Splice(0, 0, "ask @cy"); err != nil {
		t.Fatal(err)
	}
	if _, err := ana.doc.Commit("type"); err != nil {
		t.Fatal(err)
	}
	ana.sync(t, h, false)
	m := <-got
	if m.Title != "Plans" || !reflect.DeepEqual(m.Users, []string{"cy"}) {
		t.Fatalf("mention = %+v, want cy in Plans", m)
	}
	waitNoBursts(t, h)
	if len(got) != 0 {
		t.Fatalf("an extra report: %+v", <-got)
	}
}

// Reading the text for mentions takes milliseconds in a large document;
// it happens when another author's change follows a peer's. It holds up
// the next change to the document, never the room: while it runs, a peer
// acknowledging what it was sent is answered. Repeated.
func TestMentionReadsDoNotHoldTheRoom(t *testing.T) {
	h := newTestHub(t, openStore(t, t.TempDir()), Config{
		Mentions:      func(Mention) error { return nil },
		MentionSettle: time.Hour, // bursts stay open: every round switches authors
	})
	a, b, c := newClient("a"), newClient("b"), newClient("c")
	a.splice(t, 0, 0, "notes for @ana\n")
	a.sync(t, h, false)
	b.sync(t, h, true)
	c.sync(t, h, true)
	r := roomOf(t, h, testDoc)
	reading, release := make(chan struct{}, 1), make(chan struct{})
	var hold atomic.Bool
	r.beforeMentionRead = func() {
		if hold.Load() {
			reading <- struct{}{}
			<-release
		}
	}
	for round := range 20 {
		a.splice(t, 0, 0, "a")
		a.sync(t, h, false) // a is the pending author; c is sent the change
		hold.Store(true)
		b.splice(t, 0, 0, "b")
		m, ok := b.state.GenerateMessage()
		if !ok {
			t.Fatal("b has nothing to send")
		}
		done := make(chan error, 1)
		go func() {
			done <- h.Sync(context.Background(), b.peer, SyncMessage{DocumentID: testDoc, Data: m.Bytes()})
		}()
		select {
		case <-reading: // b's change waits while a's mentions are read
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: the tracker never read the text for b's change", round)
		}
		hold.Store(false)
		acked := make(chan struct{})
		go func() { c.sync(t, h, false); close(acked) }()
		select {
		case <-acked:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: c's acknowledgement waited for the mention read", round)
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		release = make(chan struct{})
		b.sync(t, h, false)
		a.sync(t, h, false)
	}
	c.sync(t, h, false)
	if !sameHeads(c.doc.Heads(), a.doc.Heads()) || !sameHeads(b.doc.Heads(), a.doc.Heads()) {
		t.Fatal("the peers did not converge")
	}
}

// A read-only peer's changes are refused, and cost no read of the text,
// however often it sends them while another peer's edits are pending.
func TestReadOnlyChangesCostNoMentionRead(t *testing.T) {
	h := newTestHub(t, openStore(t, t.TempDir()), Config{
		Mentions:      func(Mention) error { return nil },
		MentionSettle: time.Hour,
	})
	a, viewer := newClient("a"), newClient("viewer")
	a.splice(t, 0, 0, "notes for @ana\n")
	a.sync(t, h, false)
	viewer.sync(t, h, true)
	a.splice(t, 0, 0, "x")
	a.sync(t, h, false) // a's edits are pending: another author's change would read the text
	var reads atomic.Int32
	roomOf(t, h, testDoc).beforeMentionRead = func() { reads.Add(1) }
	for i := range 20 {
		viewer.splice(t, 0, 0, fmt.Sprint(i))
		if refused := viewer.syncWith(t, h, SyncMessage{ReadOnly: true}); !refused {
			t.Fatal("a read-only peer's change was taken")
		}
	}
	if n := reads.Load(); n != 0 {
		t.Fatalf("a read-only peer's refused changes read the text %d times", n)
	}
}
