package doc

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/automerge/automerge-go"

	"github.com/tandemhq/tandem/doc/amcheck"
	"github.com/tandemhq/tandem/doc/amcheck/amtest"
	"github.com/tandemhq/tandem/doc/amsync"
	"github.com/tandemhq/tandem/doc/store"
	"github.com/tandemhq/tandem/internal/cmalloc"
)

// Benchmarks of the typing path: one keystroke from a typist reaching
// readers that stand level, and the readers' acknowledgements, in an empty
// document and in one of a million characters. Run:
//
//	go test -run '^$' -bench Keystroke -benchtime 2000x ./doc/
//
// server-ns/op is the server's work per keystroke (receive, store write,
// fan-out to 40 readers), client-ns/op one reader's (receive and answer),
// ack-ns/op the server's work for one reader's acknowledgement (nearly all
// of it under the room's lock). With the mention tracker observing the
// room: doc/mention's BenchmarkKeystroke.

func BenchmarkKeystroke(b *testing.B) {
	for _, size := range []int{0, 1_000_000} {
		b.Run(fmt.Sprintf("chars=%d/mentions=false", size), func(b *testing.B) {
			benchKeystroke(b, size)
		})
	}
}

func benchKeystroke(b *testing.B, size int) {
	h := newTestHub(b, openStore(b, b.TempDir()), Config{})
	typist := newClient("typist")
	if err := typist.doc.RootMap().Set("text", automerge.NewText("")); err != nil {
		b.Fatal(err)
	}
	if size > 0 {
		if err := typist.doc.Path("text").Text().Insert(0, strings.Repeat("lorem ipsum ", size/12)); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := typist.doc.Commit("start"); err != nil {
		b.Fatal(err)
	}
	typist.level(b, h, false)
	const readers = 40
	var rs []*client
	for i := 0; i < readers; i++ {
		rs = append(rs, newClient(fmt.Sprint("reader", i)))
	}
	// One reader runs the real client side; the others are only members
	// the room sends to, level at first, acknowledging with the measured
	// reader's message.
	rs[0].level(b, h, true)
	heads := rs[0].doc.Heads()
	for _, c := range rs[1:] { // level members without a copy of their own
		if err := h.Sync(context.Background(), c.peer, SyncMessage{DocumentID: testDoc, Data: levelAt(heads)}); err != nil {
			b.Fatal(err)
		}
	}
	var serverNs, clientNs, ackNs int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		text := typist.doc.Path("text").Text()
		n := text.Len()
		if err := text.Insert(n/2, "x"); err != nil {
			b.Fatal(err)
		}
		if _, err := typist.doc.Commit("k"); err != nil {
			b.Fatal(err)
		}
		msg, _ := typist.state.GenerateMessage()
		start := nanotime()
		if err := h.Sync(context.Background(), typist.peer, SyncMessage{DocumentID: testDoc, Data: msg.Bytes()}); err != nil {
			b.Fatal(err)
		}
		if err := h.Flush(context.Background()); err != nil {
			b.Fatal(err)
		}
		serverNs += nanotime() - start
		for _, d := range typist.peer.takeSyncs() {
			typist.state.ReceiveMessage(d)
		}
		// The measured reader reads its message and acknowledges.
		start = nanotime()
		var ack []byte
		for _, d := range rs[0].peer.takeSyncs() {
			rs[0].state.ReceiveMessage(d)
			if m, ok := rs[0].state.GenerateMessage(); ok {
				ack = m.Bytes()
			}
		}
		clientNs += nanotime() - start
		start = nanotime()
		for _, c := range rs {
			c.peer.takeSyncs()
			if ack != nil {
				if err := h.Sync(context.Background(), c.peer, SyncMessage{DocumentID: testDoc, Data: ack}); err != nil {
					b.Fatal(err)
				}
			}
		}
		ackNs += nanotime() - start
	}
	b.StopTimer()
	b.ReportMetric(float64(serverNs)/float64(b.N), "server-ns/op")
	b.ReportMetric(float64(clientNs)/float64(b.N), "client-ns/op")
	b.ReportMetric(float64(ackNs)/float64(b.N)/readers, "ack-ns/op")
}

func nanotime() int64 { return time.Now().UnixNano() }

// hashesAt converts automerge-go's heads.
func hashesAt(heads []automerge.ChangeHash) []amsync.Hash {
	hs := make([]amsync.Hash, len(heads))
	for i := range heads {
		hs[i] = amsync.Hash(heads[i])
	}
	return hs
}

// levelAt is the message of a peer level with the document at heads.
func levelAt(heads []automerge.ChangeHash) []byte {
	hs := make([]amsync.Hash, len(heads))
	for i := range heads {
		hs[i] = amsync.Hash(heads[i])
	}
	m := amsync.Message{Heads: hs, Have: []amsync.Have{{LastSync: hs}}}
	return m.Encode()
}

// BenchmarkDocumentMemory is what a room holds per typed change once a
// document of 20,000 changes has been typed into it through the hub: the
// Go heap (the log, the guard's ledger, the members' sync states) and the
// C heap, after a collection, per change. With the text the mention
// tracker keeps besides: doc/mention's BenchmarkDocumentMemory.
func BenchmarkDocumentMemory(b *testing.B) {
	const n = 20_000
	all := amtest.Typing(n)
	b.Run("mentions=false", func(b *testing.B) {
		for range b.N {
			cfg := Config{}
			var ms0, ms1 runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&ms0)
			c0, _, _ := cmalloc.Stats()
			h := newTestHub(b, openStore(b, b.TempDir()), cfg)
			p, q := &fakePeer{id: "typist"}, &fakePeer{id: "reader"}
			for i, c := range all {
				if err := sendChanges(h, testDoc, p, c); err != nil {
					b.Fatal(err)
				}
				if i%1000 == 0 {
					h.Flush(context.Background())
					p.takeSyncs()
				}
			}
			if err := h.Sync(context.Background(), q, SyncMessage{DocumentID: testDoc, Data: (&amsync.Message{Have: []amsync.Have{{}}}).Encode(), Request: true}); err != nil {
				b.Fatal(err)
			}
			h.Flush(context.Background())
			p.takeSyncs()
			q.takeSyncs()
			runtime.GC()
			runtime.ReadMemStats(&ms1)
			c1, _, _ := cmalloc.Stats()
			b.ReportMetric(float64(int64(ms1.HeapAlloc)-int64(ms0.HeapAlloc))/n, "go-B/change")
			b.ReportMetric(float64(int64(c1)-int64(c0))/n, "c-B/change")
			h.Close(context.Background())
		}
	})
}

// BenchmarkPaste is the hub's work for one change that pastes a megabyte
// of text: admitted, stored and sent to a reader. With the mention
// tracker reading the text once the paste settles: doc/mention's
// BenchmarkPaste.
func BenchmarkPaste(b *testing.B) {
	d := automerge.New()
	if err := d.RootMap().Set("text", automerge.NewText("")); err != nil {
		b.Fatal(err)
	}
	d.Commit("text")
	if err := d.Path("text").Text().Insert(0, strings.Repeat("lorem ipsum ", (1<<20)/12)); err != nil {
		b.Fatal(err)
	}
	d.Commit("paste")
	cs, err := d.Changes()
	if err != nil {
		b.Fatal(err)
	}
	msg := messageWithChanges(d.Heads(), cs)
	b.Run("mentions=false", func(b *testing.B) {
		for range b.N {
			h := newTestHub(b, openStore(b, b.TempDir()), Config{})
			p, q := &fakePeer{id: "writer"}, &fakePeer{id: "reader"}
			start := time.Now()
			if err := h.Sync(context.Background(), p, SyncMessage{DocumentID: testDoc, Data: msg}); err != nil {
				b.Fatal(err)
			}
			admitted := time.Since(start)
			if err := h.Flush(context.Background()); err != nil {
				b.Fatal(err)
			}
			if err := h.Sync(context.Background(), q, SyncMessage{DocumentID: testDoc, Data: (&amsync.Message{Have: []amsync.Have{{}}}).Encode(), Request: true}); err != nil {
				b.Fatal(err)
			}
			served := time.Since(start)
			b.ReportMetric(admitted.Seconds(), "admit-s")
			b.ReportMetric(served.Seconds(), "served-s")
			b.ReportMetric(time.Since(start).Seconds(), "all-s")
			h.Close(context.Background())
		}
	})
}

// BenchmarkColdLoad is a room's load of a document of 100,000 typed
// changes from the store: read, parsed, taken into the log and the
// guard's index.
func BenchmarkColdLoad(b *testing.B) {
	const n = 100_000
	all := amtest.Typing(n)
	var snapshot []byte
	for _, c := range all {
		snapshot = append(snapshot, c...)
	}
	s := openStore(b, b.TempDir())
	if err := s.Write(context.Background(), []store.Write{{DocumentID: testDoc, Snapshot: snapshot}}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		h := newTestHub(b, s, Config{})
		start := time.Now()
		r := roomOf(b, h, testDoc)
		b.ReportMetric(time.Since(start).Seconds(), "load-s")
		if r.log.Len() != n+1 {
			b.Fatalf("loaded %d changes", r.log.Len())
		}
		h.Close(context.Background())
	}
}

// BenchmarkTypingIntoHistory is the hub's work for one keystroke of two
// typists taking turns, with 20 readers that acknowledge every message,
// into a document of a short and of a long typed history: what the node
// does per keystroke should not grow with the document.
func BenchmarkTypingIntoHistory(b *testing.B) {
	for _, n := range []int{100, 20_000, 100_000} {
		b.Run(fmt.Sprintf("history=%d", n), func(b *testing.B) {
			all := amtest.Typing(n + b.N + 1)
			var history []byte
			for _, c := range all[:n+1] {
				history = append(history, c...)
			}
			s := openStore(b, b.TempDir())
			if err := s.Write(context.Background(), []store.Write{{DocumentID: testDoc, Snapshot: history}}); err != nil {
				b.Fatal(err)
			}
			h := newTestHub(b, s, Config{})
			typists := []*fakePeer{{id: "typist-a"}, {id: "typist-b"}}
			var readers []*fakePeer
			r := roomOf(b, h, testDoc)
			for i := range 20 {
				p := &fakePeer{id: fmt.Sprint("reader", i)}
				readers = append(readers, p)
				if err := h.Sync(context.Background(), p, SyncMessage{DocumentID: testDoc, Data: levelAt(r.docHeads())}); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for i := range b.N {
				// As a client sends its change: its new heads, what it had.
				before := hashesAt(r.docHeads())
				c, err := amcheck.ParseSyncChange(all[n+1+i], amcheck.Limits{})
				if err != nil {
					b.Fatal(err)
				}
				m := amsync.Message{Heads: []amsync.Hash{c.Hash}, Have: []amsync.Have{{LastSync: before}}, Changes: [][]byte{all[n+1+i]}}
				err = h.Sync(context.Background(), typists[i%2], SyncMessage{DocumentID: testDoc, Data: m.Encode()})
				if errors.Is(err, ErrStoreBehind) {
					// The loop outran the disk (maxUnstored): a client comes
					// back later; here, once the store has caught up.
					if err = h.Flush(context.Background()); err == nil {
						err = h.Sync(context.Background(), typists[i%2], SyncMessage{DocumentID: testDoc, Data: m.Encode()})
					}
				}
				if err != nil {
					b.Fatal(err)
				}
				ack := levelAt(r.docHeads())
				for _, p := range readers {
					if len(p.takeSyncs()) > 0 {
						if err := h.Sync(context.Background(), p, SyncMessage{DocumentID: testDoc, Data: ack}); err != nil {
							b.Fatal(err)
						}
					}
				}
				for _, p := range typists {
					p.takeSyncs()
				}
			}
		})
	}
}
