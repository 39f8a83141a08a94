package doc

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/automerge/automerge-go"
)

// sharingPeer is a fakePeer that also takes shared messages, and keeps
// which SharedSync each was.
type sharingPeer struct {
	*fakePeer
	smu    sync.Mutex
	shared []*SharedSync
}

func (p *sharingPeer) SendSharedSync(id string, s *SharedSync) {
	p.smu.Lock()
	p.shared = append(p.shared, s)
	p.smu.Unlock()
	p.SendSync(id, s.Data)
}

// level runs c's sync loop until the room sees it level.
func (c *client) level(t testing.TB, h *Hub, request bool) {
	t.Helper()
	if err := c.syncLoop(h, testDoc, request); err != nil {
		t.Fatal(err)
	}
}

// writerAndReader returns a client that made the document (n = 0) and one
// that found it, both level with the hub.
func writerAndReader(t testing.TB, h *Hub) (a, b *client) {
	t.Helper()
	a, b = newClient("a"), newClient("b")
	a.setText(t, "n", "0")
	a.level(t, h, false)
	b.level(t, h, true)
	return a, b
}

func changesIn(t testing.TB, data []byte) int {
	t.Helper()
	sm, err := parseSyncMessage(data)
	if err != nil {
		t.Fatal(err)
	}
	return len(sm.changes)
}

// Members that stand at the same heads are sent one message, made once;
// their acknowledgements get no answer, and no second message follows.
func TestLevelMembersShareOneMessage(t *testing.T) {
	h := newTestHub(t, openStore(t, t.TempDir()), Config{})
	a := newClient("a")
	a.setText(t, "title", "v1")
	a.level(t, h, false)
	var readers []*client
	var peers []*sharingPeer
	for i := 0; i < 10; i++ {
		c := newClient(fmt.Sprint("r", i))
		sp := &sharingPeer{fakePeer: c.peer}
		c.peer = sp.fakePeer
		readers, peers = append(readers, c), append(peers, sp)
	}
	// The readers join through the sharing peer (each is sent the whole
	// document, shared too: counted apart).
	joined := make([]int, len(readers))
	for i, c := range readers {
		if err := c.syncLoopAs(h, peers[i], testDoc, true); err != nil {
			t.Fatal(err)
		}
		peers[i].smu.Lock()
		joined[i] = len(peers[i].shared)
		peers[i].smu.Unlock()
	}
	a.setText(t, "title", "v2")
	a.level(t, h, false)
	var first *SharedSync
	for i, p := range peers {
		p.smu.Lock()
		got := p.shared[joined[i]:]
		p.smu.Unlock()
		if len(got) != 1 {
			t.Fatalf("reader %d was sent %d shared messages, want 1", i, len(got))
		}
		if first == nil {
			first = got[0]
		} else if got[0] != first {
			t.Fatalf("reader %d got a message of its own", i)
		}
	}
	if n := changesIn(t, first.Data); n != 1 {
		t.Fatalf("the shared message carries %d changes, want 1", n)
	}
	for i, c := range readers {
		if err := c.syncLoopAs(h, peers[i], testDoc, false); err != nil {
			t.Fatal(err)
		}
		if got := c.get(t, "title"); got != "v2" {
			t.Fatalf("reader %d sees %q", i, got)
		}
		if n := len(c.peer.syncsSoFar()); n != 0 {
			t.Fatalf("reader %d was answered %d times after it acknowledged", i, n)
		}
	}
}

// A reader that has not answered the message that brought it a change is
// sent nothing more until it answers; its answer brings it everything new
// since, in one message.
func TestAReaderIsPacedByItsAnswers(t *testing.T) {
	h := newTestHub(t, openStore(t, t.TempDir()), Config{})
	a, b := writerAndReader(t, h)

	a.setText(t, "n", "1")
	a.level(t, h, false)
	got := b.peer.takeSyncs()
	if len(got) != 1 || changesIn(t, got[0]) != 1 {
		t.Fatalf("b got %d messages, want 1 with the change", len(got))
	}
	for i := 2; i <= 4; i++ {
		a.setText(t, "n", fmt.Sprint(i))
		a.level(t, h, false)
	}
	if n := len(b.peer.syncsSoFar()); n != 0 {
		t.Fatalf("b got %d messages before it answered the first", n)
	}
	if _, err := b.state.ReceiveMessage(got[0]); err != nil {
		t.Fatal(err)
	}
	m, ok := b.state.GenerateMessage()
	if !ok {
		t.Fatal("b has no answer")
	}
	if err := h.Sync(context.Background(), b.peer, SyncMessage{DocumentID: testDoc, Data: m.Bytes()}); err != nil {
		t.Fatal(err)
	}
	got = b.peer.takeSyncs()
	if len(got) != 1 || changesIn(t, got[0]) != 3 {
		t.Fatalf("b's answer brought %d messages, want one with the 3 changes", len(got))
	}
	for _, d := range got {
		if _, err := b.state.ReceiveMessage(d); err != nil {
			t.Fatal(err)
		}
	}
	b.level(t, h, false)
	if b.get(t, "n") != "4" {
		t.Fatalf("b sees %q", b.get(t, "n"))
	}
}

// A reader that never answers is sent what is new once its answer is
// overdue (amsync.AnswerWait): a client that had the change already may
// not answer at all.
func TestAnOverdueAnswerDoesNotStopTheReader(t *testing.T) {
	h := newTestHub(t, openStore(t, t.TempDir()), Config{})
	a, b := writerAndReader(t, h)
	a.setText(t, "n", "1")
	a.level(t, h, false)
	if n := len(b.peer.takeSyncs()); n != 1 {
		t.Fatalf("b got %d messages, want 1", n)
	}
	a.setText(t, "n", "2")
	a.level(t, h, false)
	b.peer.waitUntil(t, "the held change", func() bool { return len(b.peer.syncsSoFar()) > 0 })
	if got := b.peer.takeSyncs(); len(got) != 1 || changesIn(t, got[0]) != 1 {
		t.Fatalf("b got %d messages, want one with the second change", len(got))
	}
}

// Typists and readers exchange messages in random order (each peer's own
// messages in order, as on a socket) with changes made at random moments:
// every round ends with every peer at the room's heads and the same
// content. The room serves level peers without automerge, so this pins
// that path against overtaken acknowledgements, concurrent changes and
// peers that fall behind.
func TestRandomInterleavingsConverge(t *testing.T) {
	rounds := 200
	if testing.Short() {
		rounds = 20 // the first 20 seeds
	}
	for round := 0; round < rounds; round++ {
		rng := rand.New(rand.NewPCG(uint64(round), 7))
		h := newTestHub(t, openStore(t, t.TempDir()), Config{})
		var peers []*client
		for i := 0; i < 5; i++ {
			peers = append(peers, newClient(fmt.Sprint("p", i)))
		}
		peers[0].setText(t, "title", "start")
		for i, c := range peers {
			c.level(t, h, i > 0)
		}
		edits := 0
		for steps := 0; steps < 300; steps++ {
			c := peers[rng.IntN(len(peers))]
			if c.peer.id < "p2" && edits < 40 && rng.IntN(3) == 0 { // p0 and p1 type
				c.setText(t, fmt.Sprint("k", edits%7), fmt.Sprint(round, "-", edits))
				edits++
			}
			// Read one waiting message, if any, then say what automerge says.
			if msgs := c.peer.syncsSoFar(); len(msgs) > 0 {
				c.peer.mu.Lock()
				c.peer.syncs = c.peer.syncs[1:]
				c.peer.mu.Unlock()
				if _, err := c.state.ReceiveMessage(msgs[0]); err != nil {
					t.Fatal(err)
				}
			}
			if m, ok := c.state.GenerateMessage(); ok {
				if err := h.Sync(context.Background(), c.peer, SyncMessage{DocumentID: testDoc, Data: m.Bytes()}); err != nil {
					t.Fatal(err)
				}
				if rng.IntN(2) == 0 {
					h.Flush(context.Background())
				}
			}
		}
		// Level every peer, again until no peer has anything waiting: a
		// typist leveled late still brings changes the others lack.
		for pass := 0; ; pass++ {
			// What the room made waits for the store: a write the flusher
			// started for a change of the random phase releases it.
			if err := h.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			for _, c := range peers {
				c.level(t, h, false)
			}
			waiting := 0
			for _, c := range peers {
				waiting += len(c.peer.syncsSoFar())
			}
			if waiting == 0 {
				break
			}
			if pass == 10 {
				t.Fatalf("round %d: peers still have messages after 10 passes", round)
			}
		}
		heads := roomOf(t, h, testDoc).docHeads()
		for _, c := range peers { // the same heads: the same changes, the same content
			if !sameHeads(c.doc.Heads(), heads) {
				t.Fatalf("round %d: %s at %v, the room at %v", round, c.peer.id, c.doc.Heads(), heads)
			}
		}
		h.Close(context.Background())
	}
}

// Two peers typing at once: each change reaches the room from heads that
// lack the other's latest change. Each typist's message is answered once,
// with the other's change; acknowledgements get no answer.
func TestConcurrentTypistsGetOneAnswerEach(t *testing.T) {
	h := newTestHub(t, openStore(t, t.TempDir()), Config{})
	a, b := newClient("a"), newClient("b")
	a.setText(t, "a", "0")
	a.level(t, h, false)
	b.level(t, h, true)
	send := func(c *client) {
		t.Helper()
		m, ok := c.state.GenerateMessage()
		if !ok {
			t.Fatalf("%s has nothing to send", c.peer.id)
		}
		if err := h.Sync(context.Background(), c.peer, SyncMessage{DocumentID: testDoc, Data: m.Bytes()}); err != nil {
			t.Fatal(err)
		}
		if err := h.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= 20; i++ {
		a.setText(t, "a", fmt.Sprint(i))
		send(a) // a's change; b is sent it, unread
		b.setText(t, "b", fmt.Sprint(i))
		send(b) // b's change, from heads without a's
		got := b.peer.takeSyncs()
		if len(got) > 2 {
			t.Fatalf("round %d: b got %d messages, want at most the change and the answer", i, len(got))
		}
		for _, d := range got {
			if _, err := b.state.ReceiveMessage(d); err != nil {
				t.Fatal(err)
			}
		}
		for _, d := range a.peer.takeSyncs() {
			if _, err := a.state.ReceiveMessage(d); err != nil {
				t.Fatal(err)
			}
		}
		a.level(t, h, false)
		b.level(t, h, false)
	}
	heads := roomOf(t, h, testDoc).docHeads()
	for _, c := range []*client{a, b} {
		if !sameHeads(c.doc.Heads(), heads) || c.get(t, "a") != "20" || c.get(t, "b") != "20" {
			t.Fatalf("%s did not converge", c.peer.id)
		}
	}
}

// With Config.SyncSpacing a reader gets a quiet document's change at once
// and, once it has answered, the changes that follow within the spacing
// of that message together at its end.
func TestChangesWithinTheSpacingGoTogether(t *testing.T) {
	const spacing = 200 * time.Millisecond
	h := newTestHub(t, openStore(t, t.TempDir()), Config{SyncSpacing: spacing})
	a := newClient("a")
	a.setText(t, "n", "0")
	a.level(t, h, false)
	// b holds the document already, so the room has never sent it
	// changes: its next change comes after a quiet spell.
	b := newClient("b")
	d, err := automerge.Load(a.doc.Save())
	if err != nil {
		t.Fatal(err)
	}
	b.doc, b.state = d, automerge.NewSyncState(d)
	b.level(t, h, true)
	start := time.Now()
	a.setText(t, "n", "1")
	a.level(t, h, false)
	got := b.peer.takeSyncs()
	if len(got) != 1 || changesIn(t, got[0]) != 1 {
		t.Fatalf("a quiet document's change: b got %d messages, want 1 at once", len(got))
	}
	if _, err := b.state.ReceiveMessage(got[0]); err != nil {
		t.Fatal(err)
	}
	m, ok := b.state.GenerateMessage() // b answers at once
	if !ok {
		t.Fatal("b had no answer")
	}
	if err := h.Sync(context.Background(), b.peer, SyncMessage{DocumentID: testDoc, Data: m.Bytes()}); err != nil {
		t.Fatal(err)
	}
	for i := 2; i <= 4; i++ {
		a.setText(t, "n", fmt.Sprint(i))
		a.level(t, h, false)
	}
	if time.Since(start) < spacing {
		if n := len(b.peer.syncsSoFar()); n != 0 {
			t.Fatalf("b got %d messages within the spacing", n)
		}
	}
	b.peer.waitUntil(t, "the spaced message", func() bool { return len(b.peer.syncsSoFar()) > 0 })
	got = b.peer.takeSyncs()
	if len(got) != 1 || changesIn(t, got[0]) != 3 {
		t.Fatalf("after the spacing b got %d messages, want one with the 3 changes", len(got))
	}
	if took := time.Since(start); took < spacing {
		t.Fatalf("the spaced message came %v after the first change was made, within the %v spacing", took, spacing)
	}
}

// holders returns clients that hold a's document already, level with
// the room: the room has never sent them changes, so the next change
// comes after a quiet spell.
func holders(t *testing.T, h *Hub, a *client, ids ...string) []*client {
	t.Helper()
	var cs []*client
	for _, id := range ids {
		x := newClient(id)
		d, err := automerge.Load(a.doc.Save())
		if err != nil {
			t.Fatal(err)
		}
		x.doc, x.state = d, automerge.NewSyncState(d)
		x.level(t, h, true)
		cs = append(cs, x)
	}
	return cs
}

// With Config.SyncGather, changes from two writers that come together
// reach a reader in one message, the gather after the first; each writer
// is answered at once.
func TestChangesThatComeTogetherGoTogether(t *testing.T) {
	const gather = 300 * time.Millisecond
	h := newTestHub(t, openStore(t, t.TempDir()), Config{SyncSpacing: 100 * time.Millisecond, SyncGather: gather})
	began := time.Now()
	a := newClient("a")
	a.setText(t, "n", "0")
	a.level(t, h, false)
	hs := holders(t, h, a, "b", "c")
	b, c := hs[0], hs[1]
	start := time.Now()
	c.setText(t, "c", "1") // a wrote last: two writers
	c.level(t, h, false)
	a.setText(t, "a", "1")
	a.level(t, h, false) // answered at once, with c's change
	wrote := time.Since(start)
	if a.get(t, "c") != "1" {
		t.Fatal("the second writer was not answered at once with the first's change")
	}
	b.peer.waitUntil(t, "the gathered message", func() bool { return len(b.peer.syncsSoFar()) > 0 })
	came := time.Since(start)
	got := b.peer.takeSyncs()
	if came < gather {
		t.Fatalf("the reader got the changes %v after the first, within the %v gather", came, gather)
	}
	// Both writes came within the gather, and a second after a's first
	// (unless the machine stalled the test that long): one message
	// brings both.
	if n := 0; wrote < gather && time.Since(began) < gatherWriters {
		for _, d := range got {
			n += changesIn(t, d)
		}
		if len(got) != 1 || n != 2 {
			t.Fatalf("the reader got %d messages with %d changes, want one with both", len(got), n)
		}
	}
}

// A document with one writer gathers nothing: each of its changes goes to
// a reader at once, whatever Config.SyncGather says.
func TestALoneWritersChangeGoesAtOnce(t *testing.T) {
	h := newTestHub(t, openStore(t, t.TempDir()), Config{SyncSpacing: 100 * time.Millisecond, SyncGather: time.Hour})
	a := newClient("a")
	a.setText(t, "n", "0")
	a.level(t, h, false)
	b := holders(t, h, a, "b")[0]
	a.setText(t, "n", "1")
	a.level(t, h, false)
	if got := b.peer.takeSyncs(); len(got) != 1 || changesIn(t, got[0]) != 1 {
		t.Fatalf("a lone writer's change: the reader got %d messages, want 1 at once", len(got))
	}
}

// Readers' messages gather while another peer wrote within ten seconds
// of the change, whichever of them wrote last, and not for a lone writer.
func TestGatherFollowsTheWriters(t *testing.T) {
	var r room
	t0 := time.Unix(100, 0)
	steps := []struct {
		peer   string
		at     time.Duration
		gather bool
	}{
		{"a", 0, false},
		{"a", 100 * time.Millisecond, false}, // one writer
		{"b", 200 * time.Millisecond, true},
		{"b", 300 * time.Millisecond, true}, // a wrote 200 ms ago
		{"a", 400 * time.Millisecond, true},
		{"a", 10250 * time.Millisecond, true},  // b wrote 9.95 s ago
		{"a", 10500 * time.Millisecond, false}, // b quiet for over ten seconds
		{"", 10600 * time.Millisecond, true},   // another node's writer
	}
	for i, s := range steps {
		r.tookFrom(s.peer, t0.Add(s.at))
		if r.gather != s.gather {
			t.Fatalf("step %d (%q at %v): gather %v, want %v", i, s.peer, s.at, r.gather, s.gather)
		}
	}
}
