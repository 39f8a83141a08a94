package redisbus

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tandemhq/tandem/internal/testenv"

	"github.com/redis/go-redis/v9"

	"github.com/tandemhq/tandem/awareness"
)

// holdings is a DocumentReplica that answers Holds from a table: true,
// false, or (absent) never.
type holdings struct {
	DocumentReplica // unused methods
	mu              sync.Mutex
	held            map[string]bool
}

func (h *holdings) Holds(id string, answer func(bool)) {
	h.mu.Lock()
	v, ok := h.held[id]
	h.mu.Unlock()
	if ok {
		answer(v)
	}
}

func (h *holdings) AnnounceHeads(string) {}
func (h *holdings) NodeGone(string)      {}

// startFindBus runs a bus on its own over Redis at addr, with docs as its
// document layer.
func startFindBus(t *testing.T, addr, id string, docs DocumentReplica, askTimeout time.Duration) (*Bus, func()) {
	t.Helper()
	return startFindBusOn(t, redis.NewClient(&redis.Options{Addr: addr}), id, docs, askTimeout)
}

// startFindBusOn is startFindBus on a client of its caller's, which it
// closes.
func startFindBusOn(t *testing.T, client redis.UniversalClient, id string, docs DocumentReplica, askTimeout time.Duration) (*Bus, func()) {
	t.Helper()
	logger := testenv.QuietLogger()
	bus, err := New(Config{Client: client, NodeID: id, NodeTTL: time.Second, AskTimeout: askTimeout, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	presence, err := awareness.New(awareness.Config{Logger: logger, Replicator: bus})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	bus.Attach(docs, presence)
	go func() { defer wg.Done(); bus.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			client.Close()
		})
	}
	t.Cleanup(stop)
	return bus, stop
}

func knows(b *Bus, nodes ...string) func() bool {
	return func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, n := range nodes {
			if _, ok := b.nodes[n]; !ok {
				return false
			}
		}
		return true
	}
}

// find asks and waits for the answer.
func find(t *testing.T, b *Bus, id string) (found bool, took time.Duration) {
	t.Helper()
	start := time.Now()
	ch := make(chan bool, 1)
	b.FindDocument(id, func(ok bool) { ch <- ok })
	select {
	case ok := <-ch:
		return ok, time.Since(start)
	case <-time.After(30 * time.Second):
		t.Fatalf("no answer for %s within 30 s", id)
		return false, 0
	}
}

func TestFindDocumentAcrossNodes(t *testing.T) {
	addr := testenv.StartRedis(t, 0).Addr()
	// The asker's timeout is far longer than any wait below: an answer
	// that comes back at all came from the other nodes.
	asker, _ := startFindBus(t, addr, "asker", &holdings{held: map[string]bool{}}, time.Minute)
	startFindBus(t, addr, "has-it", &holdings{held: map[string]bool{"created": true, "nowhere": false, "stuck": false}}, 0)
	_, stopSilent := startFindBus(t, addr, "silent", &holdings{held: map[string]bool{"created": false, "nowhere": false}}, 0)
	testenv.WaitFor(t, "the asker sees both nodes", knows(asker, "has-it", "silent"))

	for i := 0; i < 200; i++ {
		if found, _ := find(t, asker, "created"); !found {
			t.Fatalf("round %d: a document another node holds was not found", i)
		}
		if found, _ := find(t, asker, "nowhere"); found {
			t.Fatalf("round %d: a document no node holds was found", i)
		}
	}

	// A node that never answers ("silent" holds "stuck" back forever)
	// stops: its part of the question ends with it.
	done := make(chan bool, 1)
	asker.FindDocument("stuck", func(ok bool) { done <- ok })
	stopSilent()
	if <-done {
		t.Fatal("found after the only other node that might have it stopped")
	}
}

func TestFindDocumentTimesOut(t *testing.T) {
	addr := testenv.StartRedis(t, 0).Addr()
	const timeout = 200 * time.Millisecond
	asker, _ := startFindBus(t, addr, "asker", &holdings{held: map[string]bool{}}, timeout)
	startFindBus(t, addr, "mute", &holdings{held: map[string]bool{}}, 0) // answers nothing
	testenv.WaitFor(t, "the asker sees the mute node", knows(asker, "mute"))
	found, took := find(t, asker, "anything")
	if found || took < timeout {
		t.Fatalf("found %v after %v, want not found after the %v timeout", found, took, timeout)
	}
	// Alone, a node has nobody to ask.
	alone, _ := startFindBus(t, testenv.StartRedis(t, 0).Addr(), "alone", &holdings{}, time.Minute)
	if found, _ := find(t, alone, "anything"); found {
		t.Fatal("a node alone found a document")
	}
}

// On a Redis Cluster an ask goes to every master's nodes channel and each
// answer to every master's copy of the asker's inbox: found as on one
// Redis, whatever braces a node id holds (the shard's tag comes first).
func TestFindDocumentOnARedisCluster(t *testing.T) {
	c := testenv.StartRedisCluster(t, 3)
	client := func() redis.UniversalClient {
		opts, err := redis.ParseClusterURL(c.URL())
		if err != nil {
			t.Fatal(err)
		}
		return redis.NewClusterClient(opts)
	}
	asker, _ := startFindBusOn(t, client(), "asker{0}", &holdings{held: map[string]bool{}}, time.Minute)
	startFindBusOn(t, client(), "has-it{1}", &holdings{held: map[string]bool{"created": true, "nowhere": false}}, 0)
	testenv.WaitFor(t, "the asker sees the other node", knows(asker, "has-it{1}"))
	for i := 0; i < 20; i++ {
		if found, _ := find(t, asker, "created"); !found {
			t.Fatalf("round %d: a document another node holds was not found", i)
		}
		if found, _ := find(t, asker, "nowhere"); found {
			t.Fatalf("round %d: a document no node holds was found", i)
		}
	}
}
