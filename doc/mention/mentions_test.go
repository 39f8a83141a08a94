package mention

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/automerge/automerge-go"
	"github.com/fxamacker/cbor/v2"

	"github.com/tandemhq/tandem/doc"
	"github.com/tandemhq/tandem/doc/amsync"
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

func TestMentionsCountOncePerInsertionWhenTypingPauses(t *testing.T) {
	got := make(chan Report, 10)
	h, _ := newTestHub(t, openStore(t, t.TempDir()), Config{
		Report: func(m Report) error { got <- m; return nil },
		// The pause comes when the test says so (settleBursts), never
		// because a busy machine held up a keystroke.
		Settle: time.Hour,
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
func settleBursts(t *testing.T, h *doc.Hub) {
	t.Helper()
	r := roomOf(t, h, testDoc)
	type open struct {
		peer string
		gen  uint64
	}
	var bursts []open
	r.mu.Lock()
	for id, b := range r.bursts {
		bursts = append(bursts, open{id, b.gen})
	}
	r.mu.Unlock()
	for _, b := range bursts {
		r.fire(b.peer, b.gen)
	}
}

// waitNoBursts waits until every peer's burst of edits has been reported
// (or found to mention nobody).
func waitNoBursts(t *testing.T, h *doc.Hub) {
	t.Helper()
	r := roomOf(t, h, testDoc)
	testenv.WaitFor(t, "every burst reported", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.bursts) == 0
	})
}

func TestMentionsFromOtherNodesAreNotReported(t *testing.T) {
	got := make(chan Report, 10)
	h, _ := newTestHub(t, openStore(t, t.TempDir()), Config{Report: func(m Report) error { got <- m; return nil }, Settle: time.Millisecond})
	local := newClient("local")
	local.splice(t, 0, 0, "x")
	local.sync(t, h, false)
	// A change from another node's peer arrives through the bus.
	remote := newClient("remote")
	remote.doc, _ = automerge.Load(local.doc.Save())
	remote.splice(t, 1, 0, " @ana ")
	receiveChanges(t, h, remote.doc)
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

// anaThenBoMentioningCy starts a hub whose reports go to got, where ana
// wrote "notes " and bo, who has it, then inserted "@cy " and has not
// sent it.
func anaThenBoMentioningCy(t *testing.T) (chan Report, *doc.Hub, *client, *client) {
	got := make(chan Report, 10)
	h, _ := newTestHub(t, openStore(t, t.TempDir()), Config{Report: func(m Report) error { got <- m; return nil }, Settle: time.Hour})
	ana, bo := newClient("peer-ana"), newClient("peer-bo")
	ana.splice(t, 0, 0, "notes ")
	ana.sync(t, h, false)
	bo.sync(t, h, true)
	bo.splice(t, 6, 0, "@cy ")
	return got, h, ana, bo
}

// Two peers edit in turn: each mention counts for the peer whose change
// inserted it, though the text is read only when the author changes.
func TestMentionsOfTwoAuthorsInTurn(t *testing.T) {
	got, h, ana, bo := anaThenBoMentioningCy(t)
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
// maxWait of the burst's first change, not only when they stop.
func TestMentionsOfAnAuthorWhoNeverPausesAreReported(t *testing.T) {
	old := maxWait
	maxWait = 300 * time.Millisecond
	t.Cleanup(func() { maxWait = old })
	got := make(chan Report, 10)
	h, _ := newTestHub(t, openStore(t, t.TempDir()), Config{
		Report: func(m Report) error { got <- m; return nil },
		Settle: time.Hour, // the pause never comes
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
	got := make(chan Report, 10)
	h, _ := newTestHub(t, openStore(t, t.TempDir()), Config{
		Report: func(m Report) error { got <- m; return nil },
		Settle: 20 * time.Millisecond,
		Fields: Fields{Text: "page.body", Title: "page.heading"},
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

// receiveChanges has the hub take d's changes as another node's (stored
// already), as the bus brings them, and waits until its heads are d's.
func receiveChanges(t *testing.T, h *doc.Hub, d *automerge.Doc) {
	t.Helper()
	msg, err := cbor.Marshal(map[string]any{"k": "chg", "d": d.Save()}) // doc/cluster.go's chg
	if err != nil {
		t.Fatal(err)
	}
	if err := h.ReceiveRemote(testDoc, msg); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the hub to take the other node's changes", func() bool {
		heads, _ := h.Heads(testDoc)
		want := d.Heads()
		if len(heads) != len(want) {
			return false
		}
		for _, w := range want {
			if !slices.ContainsFunc(heads, func(h []byte) bool { return bytes.Equal(h, w[:]) }) {
				return false
			}
		}
		return true
	})
}

// A change that reaches the node before what it depends on waits for it
// (two tabs of one browser pass changes to each other first): once it
// applies, its mentions are its author's, not those of the peer whose
// change released it.
func TestAChangeThatWaitedKeepsItsAuthorsMentions(t *testing.T) {
	got, h, ana, bo := anaThenBoMentioningCy(t)
	// Ana has bo's change before the node does, and writes after it.
	if _, err := ana.doc.Merge(bo.doc); err != nil {
		t.Fatal(err)
	}
	before := ana.doc.Heads()
	ana.splice(t, 0, 0, "@dee ")
	cs, err := ana.doc.Changes(before...)
	if err != nil || len(cs) != 1 {
		t.Fatalf("ana's change: %d, %v", len(cs), err)
	}
	msg := amsync.Message{Heads: []amsync.Hash{amsync.Hash(cs[0].Hash())}, Changes: [][]byte{cs[0].Save()}}
	if err := h.Sync(context.Background(), ana.peer, doc.SyncMessage{DocumentID: testDoc, Data: msg.Encode()}); err != nil {
		t.Fatal(err)
	}
	bo.sync(t, h, false) // bo's change releases ana's
	if heads, _ := h.Heads(testDoc); len(heads) != 1 || !bytes.Equal(heads[0], ana.doc.Heads()[0][:]) {
		t.Fatal("ana's change was not applied")
	}
	h.Leave(ana.peer, testDoc) // reports at once
	h.Leave(bo.peer, testDoc)
	byPeer := map[string][]string{}
	timeout := time.After(10 * time.Second)
	for len(byPeer) < 2 {
		select {
		case m := <-got:
			byPeer[m.Peer.ID()] = append(byPeer[m.Peer.ID()], m.Users...)
		case <-timeout:
			t.Fatalf("reports within 10 s: %v", byPeer)
		}
	}
	if !reflect.DeepEqual(byPeer, map[string][]string{"peer-ana": {"dee"}, "peer-bo": {"cy"}}) {
		t.Fatalf("mentions by peer = %v", byPeer)
	}
}

// A message whose changes release other peers' that waited for them,
// alternating authors, has the text read before each author's run only
// up to maxRunsCounted runs: a crafted one cannot have it read once a
// change.
func TestAlternatingAuthorsInOneMessageAreCountedBoundedly(t *testing.T) {
	h, _ := newTestHub(t, openStore(t, t.TempDir()), Config{Report: func(Report) error { return nil }, Settle: time.Hour})
	x, y := newClient("peer-x"), newClient("peer-y")
	y.splice(t, 0, 0, "start ")
	y.sync(t, h, false)
	x.sync(t, h, true)
	base := y.doc.Heads()
	// y's i+1-th change follows x's i-th, which follows y's i-th.
	const n = 20 // 2n runs, well past maxRunsCounted
	for i := range n {
		y.splice(t, 0, 0, "y")
		if _, err := x.doc.Merge(y.doc); err != nil {
			t.Fatal(err)
		}
		x.splice(t, 0, 0, fmt.Sprintf("@u%d ", i))
		if _, err := y.doc.Merge(x.doc); err != nil {
			t.Fatal(err)
		}
	}
	send := func(c *client) {
		cs, err := c.doc.Changes(base...)
		if err != nil {
			t.Fatal(err)
		}
		var own [][]byte
		for _, ch := range cs {
			if ch.ActorID() == c.doc.ActorID() {
				own = append(own, ch.Save())
			}
		}
		if len(own) != n {
			t.Fatalf("%s has %d changes of its own, want %d", c.peer.id, len(own), n)
		}
		msg := amsync.Message{Heads: []amsync.Hash{amsync.Hash(c.doc.Heads()[0])}, Changes: own}
		if err := h.Sync(context.Background(), c.peer, doc.SyncMessage{DocumentID: testDoc, Data: msg.Encode()}); err != nil {
			t.Fatal(err)
		}
	}
	r := roomOf(t, h, testDoc)
	send(x) // every change of x's waits for one of y's
	before := r.reads
	send(y) // and y's release them: 2n runs
	if heads, _ := h.Heads(testDoc); len(heads) != 1 || !bytes.Equal(heads[0], y.doc.Heads()[0][:]) {
		t.Fatal("the changes of both did not apply")
	}
	if reads := r.reads - before; reads > maxRunsCounted {
		t.Fatalf("one message read the text %d times", reads)
	}
}
