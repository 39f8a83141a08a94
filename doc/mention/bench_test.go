package mention

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/automerge/automerge-go"

	"github.com/tandemhq/tandem/doc"
	"github.com/tandemhq/tandem/doc/amcheck"
	"github.com/tandemhq/tandem/doc/amcheck/amtest"
	"github.com/tandemhq/tandem/doc/amsync"
	"github.com/tandemhq/tandem/doc/store"
	"github.com/tandemhq/tandem/internal/cmalloc"
)

// Package doc's benchmarks of a room with the tracker observing it: each
// has its counterpart without in doc's bench_test.go, of the same name.
// Run, for example:
//
//	go test -run '^$' -bench Keystroke -benchtime 300x ./doc/mention/

// BenchmarkMentionCount is what reading a document's mentions costs: the
// text read out of the room's content (content.go) and scanned, by text
// size. A room pays it when another author's change follows a peer's,
// when another node's change arrives, and when a burst settles; a
// keystroke of a peer typing alone pays nothing.
func BenchmarkMentionCount(b *testing.B) {
	for _, size := range []int{10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("text=%d", size), func(b *testing.B) {
			d := automerge.New()
			if err := d.RootMap().Set("text", automerge.NewText("")); err != nil {
				b.Fatal(err)
			}
			line := "a line of text that mentions @ana now and then, like most notes do\n"
			var text []byte
			for len(text) < size {
				text = append(text, line...)
			}
			if err := d.Path("text").Text().Set(string(text[:size])); err != nil {
				b.Fatal(err)
			}
			d.Commit("text")
			var f Fields
			f.setDefaults()
			c := newContent(f)
			c.take(slices.Values(readChanges(b, d.Save())))
			b.ResetTimer()
			for range b.N {
				if len(countMentions(c.text())) != 1 {
					b.Fatal("no mention counted")
				}
			}
		})
	}
}

// quiet is a tracker's configuration whose bursts never settle and whose
// reports go nowhere.
func quiet() Config {
	return Config{Report: func(Report) error { return nil }, Settle: time.Hour}
}

// readAll has r read its text, as a burst that settles does: the copy of
// it is made. It returns the mentions counted.
func readAll(r *room) (n int) {
	r.doc.Hold(func() { n = len(countMentions(r.text.mentionText())) })
	return n
}

// headsOf returns the hub's heads of the test document.
func headsOf(b *testing.B, h *doc.Hub) []amsync.Hash {
	hs, ok := h.Heads(testDoc)
	if !ok {
		b.Fatal("the hub has no heads of the document")
	}
	out := make([]amsync.Hash, len(hs))
	for i := range hs {
		out[i] = amsync.Hash(hs[i])
	}
	return out
}

// levelAt is the message of a peer level with the document at heads.
func levelAt(hs []amsync.Hash) []byte {
	m := amsync.Message{Heads: hs, Have: []amsync.Have{{LastSync: hs}}}
	return m.Encode()
}

// request is the message of a peer that has nothing of the document.
func request() []byte { return (&amsync.Message{Have: []amsync.Have{{}}}).Encode() }

// BenchmarkKeystroke is one keystroke from a typist reaching 40 readers
// that stand level, and the readers' acknowledgements, in an empty
// document and in one of a million characters, with the tracker on:
// server-ns/op is the server's work per keystroke (receive, store write,
// fan-out), client-ns/op one reader's, ack-ns/op the server's work for
// one reader's acknowledgement.
func BenchmarkKeystroke(b *testing.B) {
	for _, size := range []int{0, 1_000_000} {
		b.Run(fmt.Sprintf("chars=%d/mentions=true", size), func(b *testing.B) {
			h, _ := newTestHub(b, openStore(b, b.TempDir()), quiet())
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
			typist.sync(b, h, false)
			const readers = 40
			// One reader runs the real client side; the others are only
			// members the room sends to, level at first, acknowledging
			// with the measured reader's message.
			first := newClient("reader0")
			first.sync(b, h, true)
			rs := []*fakePeer{first.peer}
			for i := 1; i < readers; i++ {
				p := &fakePeer{id: fmt.Sprint("reader", i)}
				if err := h.Sync(context.Background(), p, doc.SyncMessage{DocumentID: testDoc, Data: levelAt(headsOf(b, h))}); err != nil {
					b.Fatal(err)
				}
				rs = append(rs, p)
			}
			var serverNs, clientNs, ackNs time.Duration
			b.ResetTimer()
			for range b.N {
				text := typist.doc.Path("text").Text()
				if err := text.Insert(text.Len()/2, "x"); err != nil {
					b.Fatal(err)
				}
				if _, err := typist.doc.Commit("k"); err != nil {
					b.Fatal(err)
				}
				msg, _ := typist.state.GenerateMessage()
				start := time.Now()
				if err := h.Sync(context.Background(), typist.peer, doc.SyncMessage{DocumentID: testDoc, Data: msg.Bytes()}); err != nil {
					b.Fatal(err)
				}
				if err := h.Flush(context.Background()); err != nil {
					b.Fatal(err)
				}
				serverNs += time.Since(start)
				for _, d := range typist.peer.takeSyncs() {
					typist.state.ReceiveMessage(d)
				}
				start = time.Now()
				var ack []byte
				for _, d := range first.peer.takeSyncs() {
					first.state.ReceiveMessage(d)
					if m, ok := first.state.GenerateMessage(); ok {
						ack = m.Bytes()
					}
				}
				clientNs += time.Since(start)
				start = time.Now()
				for _, p := range rs {
					p.takeSyncs()
					if ack != nil {
						if err := h.Sync(context.Background(), p, doc.SyncMessage{DocumentID: testDoc, Data: ack}); err != nil {
							b.Fatal(err)
						}
					}
				}
				ackNs += time.Since(start)
			}
			b.StopTimer()
			b.ReportMetric(float64(serverNs.Nanoseconds())/float64(b.N), "server-ns/op")
			b.ReportMetric(float64(clientNs.Nanoseconds())/float64(b.N), "client-ns/op")
			b.ReportMetric(float64(ackNs.Nanoseconds())/float64(b.N)/readers, "ack-ns/op")
		})
	}
}

// BenchmarkDocumentMemory is what a room holds per typed change once a
// document of 20,000 changes has been typed into it through the hub, with
// the text the tracker keeps: the Go heap and the C heap, after a
// collection, per change.
func BenchmarkDocumentMemory(b *testing.B) {
	const n = 20_000
	all := amtest.Typing(n)
	b.Run("mentions=true", func(b *testing.B) {
		for range b.N {
			var ms0, ms1 runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&ms0)
			c0, _, _ := cmalloc.Stats()
			h, tr := newTestHub(b, openStore(b, b.TempDir()), quiet())
			p, q := &fakePeer{id: "typist"}, &fakePeer{id: "reader"}
			for i, c := range all {
				m := amsync.Message{Changes: [][]byte{c}}
				if err := h.Sync(context.Background(), p, doc.SyncMessage{DocumentID: testDoc, Data: m.Encode()}); err != nil {
					b.Fatal(err)
				}
				if i%1000 == 0 {
					h.Flush(context.Background())
					p.takeSyncs()
				}
			}
			if err := h.Sync(context.Background(), q, doc.SyncMessage{DocumentID: testDoc, Data: request(), Request: true}); err != nil {
				b.Fatal(err)
			}
			h.Flush(context.Background())
			p.takeSyncs()
			q.takeSyncs()
			readAll(roomOf(b, h, testDoc))
			runtime.GC()
			runtime.ReadMemStats(&ms1)
			c1, _, _ := cmalloc.Stats()
			b.ReportMetric(float64(int64(ms1.HeapAlloc)-int64(ms0.HeapAlloc))/n, "go-B/change")
			b.ReportMetric(float64(int64(c1)-int64(c0))/n, "c-B/change")
			tr.Close(context.Background())
			h.Close(context.Background())
		}
	})
}

// BenchmarkPaste is the hub's work for one change that pastes a megabyte
// of text: admitted, stored and sent to a reader, then the text read by
// the tracker, as once the paste settles.
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
	m := amsync.Message{}
	for _, h := range d.Heads() {
		m.Heads = append(m.Heads, amsync.Hash(h))
	}
	for _, c := range cs {
		m.Changes = append(m.Changes, c.Save())
	}
	msg := m.Encode()
	b.Run("mentions=true", func(b *testing.B) {
		for range b.N {
			h, tr := newTestHub(b, openStore(b, b.TempDir()), quiet())
			p, q := &fakePeer{id: "writer"}, &fakePeer{id: "reader"}
			start := time.Now()
			if err := h.Sync(context.Background(), p, doc.SyncMessage{DocumentID: testDoc, Data: msg}); err != nil {
				b.Fatal(err)
			}
			admitted := time.Since(start)
			if err := h.Flush(context.Background()); err != nil {
				b.Fatal(err)
			}
			if err := h.Sync(context.Background(), q, doc.SyncMessage{DocumentID: testDoc, Data: request(), Request: true}); err != nil {
				b.Fatal(err)
			}
			served := time.Since(start)
			readAll(roomOf(b, h, testDoc))
			b.ReportMetric(admitted.Seconds(), "admit-s")
			b.ReportMetric(served.Seconds(), "served-s")
			b.ReportMetric(time.Since(start).Seconds(), "all-s")
			tr.Close(context.Background())
			h.Close(context.Background())
		}
	})
}

// BenchmarkTypingIntoHistory is the hub's work for one keystroke of two
// typists taking turns (so that each keystroke ends the other's pending
// changes for the tracker), with 20 readers that acknowledge every
// message, into a document of a short and of a long typed history.
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
			h, _ := newTestHub(b, s, quiet())
			typists := []*fakePeer{{id: "typist-a"}, {id: "typist-b"}}
			var readers []*fakePeer
			roomOf(b, h, testDoc)
			for i := range 20 {
				p := &fakePeer{id: fmt.Sprint("reader", i)}
				readers = append(readers, p)
				if err := h.Sync(context.Background(), p, doc.SyncMessage{DocumentID: testDoc, Data: levelAt(headsOf(b, h))}); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for i := range b.N {
				// As a client sends its change: its new heads, what it had.
				before := headsOf(b, h)
				c, err := amcheck.ParseSyncChange(all[n+1+i], amcheck.Limits{})
				if err != nil {
					b.Fatal(err)
				}
				m := amsync.Message{Heads: []amsync.Hash{c.Hash}, Have: []amsync.Have{{LastSync: before}}, Changes: [][]byte{all[n+1+i]}}
				err = h.Sync(context.Background(), typists[i%2], doc.SyncMessage{DocumentID: testDoc, Data: m.Encode()})
				if errors.Is(err, doc.ErrStoreBehind) {
					// The loop outran the disk: a client comes back later;
					// here, once the store has caught up.
					if err = h.Flush(context.Background()); err == nil {
						err = h.Sync(context.Background(), typists[i%2], doc.SyncMessage{DocumentID: testDoc, Data: m.Encode()})
					}
				}
				if err != nil {
					b.Fatal(err)
				}
				ack := levelAt(headsOf(b, h))
				for _, p := range readers {
					if len(p.takeSyncs()) > 0 {
						if err := h.Sync(context.Background(), p, doc.SyncMessage{DocumentID: testDoc, Data: ack}); err != nil {
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
