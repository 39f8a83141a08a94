package awareness

import (
	"fmt"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"

	"github.com/tandemhq/tandem/internal/testenv"
)

// nopPeer drops what it is sent: the benchmarks measure the hub alone.
type nopPeer struct{ id string }

func (p nopPeer) ID() string            { return p.id }
func (p nopPeer) PresenceReady(f *Feed) { f.Take(p) }

// nopFlusher is a nopPeer that takes in PresenceFlush, as a connection
// does (Flusher).
type nopFlusher struct {
	id   string
	told *Feed
}

func (p *nopFlusher) ID() string            { return p.id }
func (p *nopFlusher) PresenceReady(f *Feed) { p.told = f }
func (p *nopFlusher) PresenceFlush() {
	if f := p.told; f != nil {
		p.told = nil
		f.Take(p)
	}
}

// BenchmarkMerge measures the CRDT's register write and state merge.
func BenchmarkMerge(b *testing.B) {
	b.Run("set", func(b *testing.B) {
		b.ReportAllocs()
		s := State{}
		v := []byte{0x18, 0x2a}
		for i := 0; i < b.N; i++ {
			s.Set("peer", "cursor", Register{Clock: Clock{Count: uint64(i + 1), Session: "s"}, Value: v})
		}
	})
	b.Run("merge-100-peers", func(b *testing.B) {
		b.ReportAllocs()
		other := State{}
		for p := 0; p < 100; p++ {
			for _, ch := range []string{"user", "cursor", "selection", "status"} {
				other.Set(fmt.Sprint("p", p), ch, Register{Clock: Clock{Count: 1, Session: "s"}, Value: []byte{1}})
			}
		}
		s := State{}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			s.Merge(other)
		}
	})
}

// BenchmarkBroadcast measures one cursor update from a peer reaching the
// other members of a document: parse, merge, coalesce, encode once, send;
// flushers=N, to members that take once all are told (Flusher), as
// connections do.
func BenchmarkBroadcast(b *testing.B) {
	for _, kind := range []string{"members", "flushers"} {
		for _, members := range []int{1, 100, 1000} {
			benchmarkBroadcast(b, kind, members)
		}
	}
}

func benchmarkBroadcast(b *testing.B, kind string, members int) {
	b.Run(fmt.Sprintf("%s=%d", kind, members), func(b *testing.B) {
		b.ReportAllocs()
		clock := &fakeClock{now: time.Unix(0, 0)}
		// A TTL longer than the run: members stay while the clock ticks.
		h := newHub(b, Config{Now: clock.Now, TTL: 1000 * time.Hour, Logger: testenv.QuietLogger()})
		for i := 0; i < members; i++ {
			var p Peer = nopPeer{fmt.Sprint("m", i)}
			if kind == "flushers" {
				p = &nopFlusher{id: fmt.Sprint("m", i)}
			}
			h.Join(p, doc1)
		}
		sender := nopPeer{"sender"}
		payloads := make([][]byte, 64)
		for i := range payloads {
			payloads[i], _ = cbor.Marshal(map[string]any{"__presence": map[string]any{
				"type": "update", "channel": "cursor", "value": fmt.Sprint(i, "@actor"),
			}})
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			// One update per tick, so each is forwarded (leading edge).
			h.Receive(sender, doc1, Message{SenderID: "sender", SessionID: "s", Count: uint64(i + 1), Data: payloads[i%64]})
			clock.Advance(50 * time.Millisecond)
			h.Tick()
		}
	})
}
