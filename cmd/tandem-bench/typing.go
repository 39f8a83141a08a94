package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/automerge/automerge-go"

	"github.com/tandemhq/tandem/doc/amsync"
	"github.com/tandemhq/tandem/transport/wire"
)

// syncPeer is a peer that runs the automerge sync loop on its own copy.
type syncPeer struct {
	*peer
	doc string

	mu    sync.Mutex // guards d and state: the typist and the reader both use them
	d     *automerge.Doc
	state *automerge.SyncState

	// The sync frames its reader took that brought changes (the rest
	// bring heads, a filter or a request only).
	withChanges atomic.Int64
}

func (s *syncPeer) push() error {
	if m, ok := s.state.GenerateMessage(); ok {
		return s.send(&wire.Message{Type: wire.TypeSync, DocumentID: s.doc, Data: m.Bytes()})
	}
	return nil
}

// serve answers the server's sync messages; after each it calls seen
// with the peer's document, under the lock.
func (s *syncPeer) serve(seen func(*automerge.Doc)) {
	for {
		m, err := s.recv()
		if err != nil {
			return
		}
		if m.Type != wire.TypeSync {
			continue
		}
		if bringsChanges(m.Data) {
			s.withChanges.Add(1)
		}
		s.mu.Lock()
		if _, err := s.state.ReceiveMessage(m.Data); err == nil {
			seen(s.d)
			s.push()
		}
		s.mu.Unlock()
	}
}

// bringsChanges reports whether a sync message carries changes: read in
// Go, outside automerge, from the message's header.
func bringsChanges(data []byte) bool {
	m, err := amsync.Decode(data)
	return err == nil && len(m.Changes) > 0
}

// runTyping: T typists at C characters a second and R readers on one
// document. Each keystroke appends a character and stamps the typist's
// key with the time; readers measure how long stamps take to arrive.
// typingResult is what one typing run measured.
type typingResult struct {
	latencies []time.Duration // sorted
	elapsed   time.Duration
	late      time.Duration // with REST edits: from the load's end until the last was answered
	cpu       float64       // server CPU seconds, 0 without --server-pid
	// The clients' side, over the load and the drain: sync frames and
	// bytes they received, and this process's CPU (every client's
	// automerge receive and generate runs here).
	frames, bytes int64
	// Of frames, those the readers received, and of those the ones that
	// brought changes.
	readerFrames, readerChanges int64
	clientCPU                   float64
	typed                       int64      // changes the typists made
	stored                      storeCount // inserted into PostgreSQL meanwhile, with o.store
}

func runTyping(ctx context.Context, o options) error {
	if *restEditRate > 0 {
		return runRESTTyping(ctx, o)
	}
	r, err := measureTyping(ctx, o)
	if err != nil {
		return err
	}
	printTyping(r, o)
	return nil
}

func printTyping(r typingResult, o options) {
	fmt.Printf("arrivals at readers  %d (%.0f/s)\n", len(r.latencies), float64(len(r.latencies))/r.elapsed.Seconds())
	fmt.Printf("latency p50/p95/p99  %v / %v / %v\n", pct(r.latencies, 50), pct(r.latencies, 95), pct(r.latencies, 99))
	window := (r.elapsed + r.late + o.drain).Seconds()
	if len(o.serverPIDs) > 0 {
		fmt.Printf("server CPU           %.2f s (%.0f%% of a core)\n", r.cpu, 100*r.cpu/window)
	}
	fmt.Printf("clients received     %d frames, %.1f MB\n", r.frames, float64(r.bytes)/1e6)
	if o.readers > 0 {
		fmt.Printf("  readers received   %.1f frames each a second, %.1f bringing changes\n",
			float64(r.readerFrames)/float64(o.readers)/window, float64(r.readerChanges)/float64(o.readers)/window)
	}
	fmt.Printf("clients' CPU         %.2f s (%.0f%% of a core)\n", r.clientCPU, 100*r.clientCPU/window)
	fmt.Printf("a delivered keystroke %.3f frames, %.0f µs of the clients' CPU\n", r.framesPerArrival(), 1e6*r.cpuPerArrival())
	if o.store != nil {
		printStoreWrites(r.stored, r.typed)
	}
}

// framesPerArrival and cpuPerArrival are the frames the clients
// received and the CPU they used for each keystroke delivered to a
// reader: what a delivery costs, whatever the delivery.
func (r typingResult) framesPerArrival() float64 {
	return float64(r.frames) / float64(max(len(r.latencies), 1))
}

func (r typingResult) cpuPerArrival() float64 { return r.clientCPU / float64(max(len(r.latencies), 1)) }

func measureTyping(ctx context.Context, o options) (typingResult, error) {
	if *restEditRate > 0 {
		return typingResult{}, errRESTOneNode
	}
	return measureTypingWith(ctx, o, nil)
}

// measureTypingWith is measureTyping with REST edits (restedits.go), if
// withREST is not nil: it returns the edits into the run's document,
// which are sent while the typists type and which the readers look for.
func measureTypingWith(ctx context.Context, o options, withREST func(doc string) (*restEdits, error)) (typingResult, error) {
	fmt.Printf("typing: %d typists at %.0f chars/s, %d readers, one document of %d changes before, %v\n", o.typists, o.rate, o.readers, o.history, o.duration)
	doc := newDocID()
	var rest *restEdits
	if withREST != nil {
		var err error
		if rest, err = withREST(doc); err != nil {
			return typingResult{}, err
		}
	}
	var peers []*syncPeer
	for i := 0; i < o.typists+o.readers; i++ {
		p, err := dialPeer(o.urls[i%len(o.urls)])
		if err != nil {
			return typingResult{}, err
		}
		defer p.ws.Close()
		d := automerge.New()
		peers = append(peers, &syncPeer{peer: p, doc: doc, d: d, state: automerge.NewSyncState(d)})
	}
	first := peers[0]
	first.d.RootMap().Set("text", automerge.NewText(""))
	first.d.Commit("create")
	text := first.d.Path("text").Text()
	for range o.history { // a long history, typed one character a change
		text.Append("h")
		first.d.Commit("history")
	}
	if err := first.push(); err != nil {
		return typingResult{}, err
	}

	// Each keystroke stamps the typist's key with its time, which
	// replaces the one before: a message that brings a reader several
	// keystrokes of a typist shows only the last. So every stamp is kept
	// here too, and a reader counts each keystroke up to the one it sees,
	// the earlier ones with their own (longer) wait: a server that sends
	// fewer, larger messages is not flattered by the waits it hides.
	var mu sync.Mutex // guards latencies and stampsOf
	var latencies []time.Duration
	stampsOf := make(map[string][]int64, o.typists) // each typist's stamps, by its key
	lastStamp := make([]map[string]int64, len(peers))
	var wg sync.WaitGroup
	for i, p := range peers {
		lastStamp[i] = map[string]int64{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.serve(func(d *automerge.Doc) {
				if i < o.typists {
					return // typists only write
				}
				now := time.Now().UnixNano()
				values, _ := d.RootMap().Values() // one call for every key
				for k, v := range values {
					if v.Kind() != automerge.KindInt64 || v.Int64() <= lastStamp[i][k] {
						continue
					}
					last := lastStamp[i][k]
					lastStamp[i][k] = v.Int64()
					mu.Lock()
					stamps := stampsOf[k]
					for j, _ := slices.BinarySearch(stamps, last+1); j < len(stamps) && stamps[j] <= v.Int64(); j++ {
						latencies = append(latencies, time.Duration(now-stamps[j]))
					}
					mu.Unlock()
				}
				if rest != nil {
					rest.read(i-o.typists, d)
				}
			})
		}()
		if i > 0 {
			p.mu.Lock()
			p.send(&wire.Message{Type: wire.TypeRequest, DocumentID: doc, Data: mustFirst(p.state)})
			p.mu.Unlock()
		}
	}
	// Typing starts once the typists have the document and, with a
	// history, once every peer has it.
	deadline := time.Now().Add(10*time.Second + time.Duration(o.history)*time.Millisecond)
	for i := range peers {
		if o.history == 0 && i >= o.typists {
			break // without a history, readers get the document as the typing starts
		}
		for {
			peers[i].mu.Lock()
			ready := peers[i].hasText() && peers[i].d.Path("text").Text().Len() >= o.history
			peers[i].mu.Unlock()
			if ready {
				break
			}
			if time.Now().After(deadline) {
				return typingResult{}, fmt.Errorf("peer %d never got the document", i)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	cpu0, _ := cpuSeconds(o.serverPIDs)
	self := []int{os.Getpid()}
	client0, _ := cpuSeconds(self)
	var frames0, bytes0, readerFrames0, readerChanges0 int64
	for i, p := range peers {
		frames0 += p.framesIn.Load()
		bytes0 += p.bytesIn.Load()
		if i >= o.typists {
			readerFrames0 += p.framesIn.Load()
			readerChanges0 += p.withChanges.Load()
		}
	}
	var stored0 storeCount
	if o.store != nil {
		var err error
		if stored0, err = o.store.read(ctx); err != nil {
			return typingResult{}, err
		}
	}
	var typed atomic.Int64
	start := time.Now()
	loadCtx, stop := context.WithTimeout(ctx, o.duration)
	defer stop()
	var typists sync.WaitGroup
	if rest != nil {
		typists.Add(1)
		go func() {
			defer typists.Done()
			rest.send(loadCtx)
		}()
	}
	for i := 0; i < o.typists; i++ {
		p := peers[i]
		typists.Add(1)
		go func() {
			defer typists.Done()
			interval := time.Duration(float64(time.Second) / o.rate)
			key := fmt.Sprint("t-", i)
			t := time.NewTimer(time.Duration(rand.Int64N(int64(interval))))
			defer t.Stop()
			for {
				select {
				case <-loadCtx.Done():
					return
				case <-t.C:
				}
				p.mu.Lock()
				p.d.Path("text").Text().Append("x")
				stamp := time.Now().UnixNano()
				mu.Lock()
				stampsOf[key] = append(stampsOf[key], stamp)
				mu.Unlock()
				p.d.RootMap().Set(key, stamp)
				p.d.Commit("type")
				typed.Add(1)
				p.push()
				p.mu.Unlock()
				t.Reset(interval)
			}
		}()
	}
	typists.Wait()
	elapsed := time.Since(start)
	var late time.Duration
	if rest != nil { // the drain starts once the last edit is answered
		rest.inflight.Wait()
		late = time.Since(start) - elapsed
	}
	select {
	case <-time.After(o.drain):
	case <-ctx.Done():
	}
	cpu1, _ := cpuSeconds(o.serverPIDs)
	client1, _ := cpuSeconds(self)
	r := typingResult{elapsed: elapsed, late: late, cpu: cpu1 - cpu0, clientCPU: client1 - client0, typed: typed.Load()}
	if o.store != nil {
		stored1, err := o.store.read(ctx)
		if err != nil {
			return typingResult{}, err
		}
		r.stored = stored1.minus(stored0)
	}
	for i, p := range peers {
		r.frames += p.framesIn.Load()
		r.bytes += p.bytesIn.Load()
		if i >= o.typists {
			r.readerFrames += p.framesIn.Load()
			r.readerChanges += p.withChanges.Load()
		}
	}
	r.frames -= frames0
	r.bytes -= bytes0
	r.readerFrames -= readerFrames0
	r.readerChanges -= readerChanges0
	for _, p := range peers {
		p.ws.Close()
	}
	wg.Wait()
	slices.Sort(latencies)
	r.latencies = latencies
	return r, nil
}

// hasText reports whether the peer has the document's text. The caller
// holds s.mu.
func (s *syncPeer) hasText() bool {
	_, err := s.d.Path("text").Text().Get()
	return err == nil
}

func mustFirst(s *automerge.SyncState) []byte {
	m, _ := s.GenerateMessage()
	return m.Bytes()
}
