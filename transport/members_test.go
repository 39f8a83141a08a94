package transport

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/tandemhq/tandem/doc"
	"github.com/tandemhq/tandem/internal/smallmap"
)

// busLog is a Bus that counts what it is told per document.
type busLog struct {
	mu      sync.Mutex
	watched map[string]int
	joins   int
}

func (b *busLog) Join(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.watched[id]++
	b.joins++
}

func (b *busLog) Leave(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.watched[id]--
}

// docsLog is a Documents that counts leaves.
type docsLog struct {
	mu     sync.Mutex
	leaves map[string]int
}

func (d *docsLog) Sync(context.Context, doc.Peer, doc.SyncMessage) error { return nil }
func (d *docsLog) Ephemeral(context.Context, doc.Peer, string, doc.Ephemeral) error {
	return nil
}
func (d *docsLog) Leave(p doc.Peer, id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.leaves[p.ID()+" "+id]++
}

// The bus is told of a document once when its first connection here joins
// and once when its last one leaves, however joins and leaves interleave;
// the document layer hears each closed connection leave each of its
// documents once; a full document refuses one more.
func TestMembersTellTheBusOfFirstAndLast(t *testing.T) {
	bus := &busLog{watched: make(map[string]int)}
	docs := &docsLog{leaves: make(map[string]int)}
	cfg := Config{Documents: docs, Bus: bus, PeerID: "s", MaxPeersPerDocument: 1000}
	if err := cfg.setDefaults(); err != nil {
		t.Fatal(err)
	}
	m := newMembers(&cfg)
	for round := range 200 {
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := &conn{peerID: fmt.Sprint("p", i)}
				var joined smallmap.Map[string, struct{}]
				for _, id := range []string{"a", "b", fmt.Sprint("own-", i)} {
					if !m.join(c, id) {
						t.Errorf("round %d: %s refused", round, id)
					}
					joined.Set(id, struct{}{})
				}
				m.leave(c, &joined, "")
			}()
		}
		wg.Wait()
		bus.mu.Lock()
		for id, n := range bus.watched {
			if n != 0 {
				t.Fatalf("round %d: the bus watches %s %d times after every connection left", round, id, n)
			}
		}
		bus.mu.Unlock()
	}
	docs.mu.Lock()
	for k, n := range docs.leaves {
		if n != 200 {
			t.Fatalf("%s: %d leaves over 200 rounds", k, n)
		}
	}
	docs.mu.Unlock()

	cfg.MaxPeersPerDocument = 2
	first, second, third := &conn{peerID: "x"}, &conn{peerID: "y"}, &conn{peerID: "z"}
	if !m.join(first, "full") || !m.join(second, "full") {
		t.Fatal("a document under its limit refused a connection")
	}
	if m.join(third, "full") {
		t.Fatal("a full document took one more connection")
	}
	joinsBefore := bus.joins
	var full smallmap.Map[string, struct{}]
	full.Set("full", struct{}{})
	m.leave(first, &full, "")
	if !m.join(third, "full") {
		t.Fatal("a place that came free was refused")
	}
	if bus.joins != joinsBefore {
		t.Fatal("the bus was told again of a document it already watched")
	}
}
