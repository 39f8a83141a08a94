package doc

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/automerge/automerge-go"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tandemhq/tandem/doc/amcheck/amtest"
	"github.com/tandemhq/tandem/doc/guard"
	"github.com/tandemhq/tandem/doc/store"
	"github.com/tandemhq/tandem/internal/testenv"
)

// twoNodes starts two hubs on one store whose bus carries nothing between
// them: what one node learns of the other's changes comes from the store.
func twoNodes(t *testing.T) (h1, h2 *Hub) {
	t.Helper()
	shared := openStore(t, t.TempDir())
	h1 = newTestHub(t, sharedStore{shared}, Config{Cluster: &fakeCluster{}})
	h2 = newTestHub(t, sharedStore{shared}, Config{Cluster: &fakeCluster{}})
	return h1, h2
}

// A room whose last peer left stays in memory, but the bus no longer
// carries its document: a peer that comes back must still get every change
// another node stored meanwhile (the soak found such peers served an old
// copy for as long as the room stayed in memory). Each round: node 1's
// peer leaves, node 2's peer writes, a new peer on node 1 reads.
func TestARoomWithoutPeersCatchesUpFromTheStore(t *testing.T) {
	h1, h2 := twoNodes(t)
	writer := newClient("writer")
	writer.setText(t, "title", "v0")
	writer.sync(t, h2, false)
	for round := range 100 {
		reader := newClient(fmt.Sprint("reader-", round))
		reader.sync(t, h1, true)
		want := fmt.Sprint("v", round)
		if got := reader.get(t, "title"); got != want {
			t.Fatalf("round %d: a peer joining node 1 read %q, node 2 stored %q", round, got, want)
		}
		h1.Leave(reader.peer, testDoc)
		writer.setText(t, "title", fmt.Sprint("v", round+1))
		writer.sync(t, h2, false)
	}
}

// A room can come into memory without a peer ever joining it: a message
// the guard refuses loads it, and its sender leaves the document at once.
// The bus never carried the document for it, so a peer arriving later
// must still get what another node stored since the load (the soak found
// an acknowledged edit missing on a node where bad input had loaded the
// room: nothing had counted a gap, and the room served its copy from the
// load). Each round, on a document of its own: node 2's peer writes, bad
// input loads node 1's room, node 2's peer writes again, and a new peer on
// node 1 reads.
func TestARoomLoadedWithoutAPeerCatchesUpFromTheStore(t *testing.T) {
	h1, h2 := twoNodes(t)
	ctx := context.Background()
	for round := range 200 {
		id := fmt.Sprintf("2room%dLoadedByBadInput", round)
		writer := newClient("writer")
		writer.setText(t, "title", "before")
		if err := writer.syncLoop(h2, id, false); err != nil {
			t.Fatal(err)
		}
		mallory := newClient("mallory")
		err := h1.Sync(ctx, mallory.peer, SyncMessage{DocumentID: id, Data: reproMessage(t)})
		if !errors.Is(err, ErrRefused) {
			t.Fatalf("round %d: bad input: err = %v, want ErrRefused", round, err)
		}
		h1.Leave(mallory.peer, id) // as the transport does after a refusal
		writer.setText(t, "title", "after")
		if err := writer.syncLoop(h2, id, false); err != nil {
			t.Fatal(err)
		}
		reader := newClient("reader")
		if err := reader.syncLoop(h1, id, true); err != nil {
			t.Fatal(err)
		}
		if got := reader.get(t, "title"); got != "after" {
			t.Fatalf("round %d: a peer joining node 1 read %q, node 2 stored %q", round, got, "after")
		}
	}
}

// Two peers of an empty room arrive at once: both get the stored changes
// in their first answers (the second waits for the first one's catch-up).
func TestPeersArrivingTogetherShareOneCatchUp(t *testing.T) {
	for round := range 50 {
		h1, h2 := twoNodes(t)
		first := newClient("first")
		first.sync(t, h1, true) // node 1 holds the (empty) room
		h1.Leave(first.peer, testDoc)
		writer := newClient("writer")
		writer.setText(t, "title", "stored by node 2")
		writer.sync(t, h2, false)

		readers := []*client{newClient("r1"), newClient("r2")}
		var wg sync.WaitGroup
		errs := make([]error, len(readers))
		for i, r := range readers {
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = r.syncLoop(h1, testDoc, true) }()
		}
		wg.Wait()
		for i, r := range readers {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			if got := r.get(t, "title"); got != "stored by node 2" {
				t.Fatalf("round %d: reader %d read %q", round, i, got)
			}
		}
	}
}

// While Redis is unreachable the bus carries nothing; once it is back the
// hub is told it missed messages, and a peer connected all along is sent
// what the other node stored meanwhile.
func TestAMissedBusCatchesUpFromTheStore(t *testing.T) {
	h1, h2 := twoNodes(t)
	a, b := newClient("a"), newClient("b")
	a.setText(t, "title", "before")
	a.sync(t, h1, false)
	b.sync(t, h2, true)
	b.setText(t, "title", "while Redis was down")
	b.sync(t, h2, false)
	a.sync(t, h1, false)
	if got := a.get(t, "title"); got != "before" {
		t.Fatalf("a read %q before the bus was back; the test's bus carries nothing", got)
	}
	h1.Missed()
	a.receiveUntil(t, h1, testDoc, "the change stored meanwhile", func() bool {
		return a.get(t, "title") == "while Redis was down"
	})
}

// gcPressure collects garbage in a loop until the test ends: what the
// collector frees too early under load, it frees here at once.
func gcPressure(t *testing.T) {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				runtime.GC()
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
}

// manyChanges returns a document of n changes and all of them saved.
func manyChanges(t *testing.T, n int) (*automerge.Doc, []byte) {
	t.Helper()
	d := automerge.New()
	for i := range n {
		if err := d.RootMap().Set("n", int64(i)); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Commit("edit"); err != nil {
			t.Fatal(err)
		}
	}
	cs, err := d.Changes()
	if err != nil {
		t.Fatal(err)
	}
	return d, automerge.SaveChanges(cs)
}

// Another node sends hundreds of changes at once (a heads exchange after
// Redis came back): they are applied and reach the local peer. Read with
// LoadChanges and applied with Doc.Apply they crashed the process
// (SIGSEGV in automerge-go; see loadChanges).
func TestManyRemoteChangesAtOnce(t *testing.T) {
	gcPressure(t)
	src, data := manyChanges(t, 600)
	h := newTestHub(t, openStore(t, t.TempDir()), Config{Cluster: &fakeCluster{}})
	a := newClient("a")
	a.sync(t, h, true)
	for range 5 {
		if err := h.applyRemoteChanges(testDoc, data); err != nil {
			t.Fatal(err)
		}
	}
	heads, _ := h.Heads(testDoc)
	if len(heads) != 1 || !bytes.Equal(heads[0], src.Heads()[0][:]) {
		t.Fatal("the hub's heads are not the sender's")
	}
	a.receiveUntil(t, h, testDoc, "the remote changes", func() bool {
		v, err := a.doc.RootMap().Get("n")
		return err == nil && v.Kind() == automerge.KindInt64 && v.Int64() == 599
	})
}

// Changes from another node that wait for a dependency are kept up to
// guard.MaxStoredWaiting; what comes past that is let go and counted, the room
// goes on, and once the dependency comes the kept ones are applied; sent
// again, the rest are too.
func TestRemoteChangesWaitingForADependencyAreBounded(t *testing.T) {
	all := amtest.Typing(guard.MaxStoredWaiting + 100)
	h := newTestHub(t, openStore(t, t.TempDir()), Config{Cluster: &fakeCluster{}})
	a := newClient("a")
	a.sync(t, h, true) // the room is in memory
	if err := h.applyRemoteChanges(testDoc, bytes.Join(all[1:], nil)); err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(h.remoteDropped); n != float64(len(all)-1-guard.MaxStoredWaiting) {
		t.Fatalf("%v changes let go, want %d", n, len(all)-1-guard.MaxStoredWaiting)
	}
	// The dependency comes with a change that waits for another: the
	// changes that leave the queue make room for it.
	orphan, _ := amtest.Encode(amtest.Change{Actors: [][]byte{amtest.ActorC}, Seq: 1, StartOp: 1,
		Deps: [][32]byte{sha256.Sum256([]byte("never sent"))}})
	dropped := testutil.ToFloat64(h.remoteDropped)
	if err := h.applyRemoteChanges(testDoc, slices.Concat(all[0], orphan)); err != nil {
		t.Fatal(err)
	}
	r := roomOf(t, h, testDoc)
	r.mu.Lock()
	_, waiting := r.guard.Waiting()
	held := r.log.Len()
	r.mu.Unlock()
	if held != 1+guard.MaxStoredWaiting || waiting != 1 {
		t.Fatalf("the log holds %d changes and %d wait; want %d and the one lacking its dependency", held, waiting, 1+guard.MaxStoredWaiting)
	}
	if n := testutil.ToFloat64(h.remoteDropped); n != dropped {
		t.Fatalf("%v more changes let go with room in the queue", n-dropped)
	}
	if err := h.applyRemoteChanges(testDoc, bytes.Join(all, nil)); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	held = r.log.Len()
	r.mu.Unlock()
	if held != len(all) {
		t.Fatalf("sent again, the log holds %d of %d changes", held, len(all))
	}
}

// countingStore counts how many times the chunks written carried each
// change (a compaction's snapshot, which rewrites the log by design, is
// not counted).
type countingStore struct {
	store.Store
	mu      sync.Mutex
	written map[[32]byte]int
}

func (s *countingStore) Write(ctx context.Context, batch []store.Write) error {
	s.mu.Lock()
	for _, w := range batch {
		for _, chunk := range w.Chunks {
			cs, err := readChanges(nil, chunk)
			if err != nil {
				panic(err)
			}
			for _, c := range cs {
				s.written[c.Hash]++
			}
		}
	}
	s.mu.Unlock()
	return s.Store.Write(ctx, batch)
}

func (s *countingStore) Close() error { return nil }

// Each change is written once in a cluster, by the node of the peer that
// made it: not again by the nodes that hear of it over the bus, answer a
// heads exchange with it, or read it from the store in a catch-up. Two
// nodes share one store and a bus; a peer on each types in turn.
func TestEachChangeIsWrittenOnceInACluster(t *testing.T) {
	store := &countingStore{Store: openStore(t, t.TempDir()), written: map[[32]byte]int{}}
	h1, h2, _, _ := linkedHubsOn(t, store, store, Config{CompactAfter: 1 << 20})

	a, b := newClient("a"), newClient("b")
	a.setText(t, "title", "start")
	a.sync(t, h1, false)
	b.sync(t, h2, true)
	for round := range 100 {
		writer, on := a, h1
		if round%2 == 1 {
			writer, on = b, h2
		}
		writer.setText(t, "title", fmt.Sprint("v", round))
		writer.sync(t, on, false)
		testenv.WaitFor(t, "both nodes at the same heads", func() bool { return sameHubHeads(h1, h2) })
		switch round % 10 {
		case 3:
			h1.AnnounceHeads(testDoc) // node 2 answers with what node 1 lacks: nothing
			h2.AnnounceHeads(testDoc)
		case 7:
			h1.Missed() // node 1 reads the store again
		}
		a.sync(t, h1, false)
		b.sync(t, h2, false)
	}
	for _, h := range []*Hub{h1, h2} {
		if err := h.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	r := roomOf(t, h1, testDoc)
	r.mu.Lock()
	n := r.log.Len()
	hashes := make([][32]byte, n)
	for i := range n {
		hashes[i] = r.log.HashAt(int32(i))
	}
	r.mu.Unlock()
	store.mu.Lock()
	defer store.mu.Unlock()
	for i, hash := range hashes {
		if got := store.written[hash]; got != 1 {
			t.Errorf("change %d of %d was written %d times", i, n, got)
		}
	}
}
