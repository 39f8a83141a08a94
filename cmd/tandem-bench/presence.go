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

	"github.com/fxamacker/cbor/v2"

	"github.com/tandemhq/tandem/transport/wire"
)

// cursor is the value a bench peer moves: its sequence number and the
// send time, so a receiver measures end-to-end latency on one clock.
type cursor struct {
	Seq  uint64 `cbor:"s"`
	Sent int64  `cbor:"t"`
}

type update struct {
	Type    string          `cbor:"type"`
	Channel string          `cbor:"channel,omitempty"`
	Value   cbor.RawMessage `cbor:"value,omitempty"`
}

// receiver keeps what one peer got: latencies, and the last cursor seen
// from each other peer.
type receiver struct {
	mu        sync.Mutex
	latencies []time.Duration
	steady    []time.Duration // of cursors sent within the steady window
	start     []time.Duration // of cursors sent before it
	end       []time.Duration // of cursors sent after it
	// last holds, for every peer any presence came from, the last
	// cursor seq it sent (0 if none), written in place.
	last map[string]*uint64
	// The steady window, in Unix nanoseconds: the load without its
	// first and last steadyTrim, when every peer starts moving at once
	// and when all stop together (each last value waits for its period).
	from, to int64
}

// steadyTrim is what the steady figures leave out at each end of the load.
const steadyTrim = 2 * time.Second

// presenceResult is what a presence run measured.
type presenceResult struct {
	offered, delivered int64
	sendTime           time.Duration
	latencies          []time.Duration // sorted
	steady             []time.Duration // sorted: sent within the steady window
	start, end         []time.Duration // sorted: sent before it, after it
	missingFinal       int
	pairs              int
	cpu                float64 // server CPU seconds, with --server-pid
	rss                int64   // server RSS at the end of the load
	// The clients' side: this process's CPU seconds, and the frames and
	// bytes its peers received, over the load and the drain.
	clientCPU     float64
	frames, bytes int64
	churn         churnResult
}

func runPresence(ctx context.Context, o options) error {
	fmt.Printf("presence: %d documents × %d peers at %.0f moves/s for %v\n", o.docs, o.peers, o.rate, o.duration)
	r, err := measurePresence(ctx, o)
	if err != nil {
		return err
	}
	printPresence(r, o)
	return nil
}

func printPresence(r presenceResult, o options) {
	fmt.Printf("offered deliveries   %d (%.0f/s)\n", r.offered, float64(r.offered)/r.sendTime.Seconds())
	fmt.Printf("delivered            %d (%.0f/s, %.1f%% of offered)\n", r.delivered,
		float64(r.delivered)/r.sendTime.Seconds(), 100*float64(r.delivered)/float64(max(r.offered, 1)))
	fmt.Printf("latency p50/p95/p99  %v / %v / %v\n", pct(r.latencies, 50), pct(r.latencies, 95), pct(r.latencies, 99))
	fmt.Printf("  steady p50/p95/p99 %v / %v / %v (sent %v after the start to %v before the end)\n",
		pct(r.steady, 50), pct(r.steady, 95), pct(r.steady, 99), steadyTrim, steadyTrim)
	fmt.Printf("  start p99 %v, end p99 %v (sent in the first %v, in the last)\n", pct(r.start, 99), pct(r.end, 99), steadyTrim)
	fmt.Printf("final cursor missing %d of %d (receiver, sender) pairs\n", r.missingFinal, r.pairs)
	if len(o.serverPIDs) > 0 {
		fmt.Printf("server CPU           %.2f s (%.0f%% of a core), %.0f deliveries per CPU-second\n",
			r.cpu, 100*r.cpu/(r.sendTime+o.drain).Seconds(), float64(r.delivered)/max(r.cpu, 0.01))
		fmt.Printf("server RSS           %.1f MiB\n", float64(r.rss)/(1<<20))
	}
	fmt.Printf("clients' CPU         %.2f s (%.0f%% of a core), %.0f deliveries per CPU-second\n",
		r.clientCPU, 100*r.clientCPU/(r.sendTime+o.drain).Seconds(), float64(r.delivered)/max(r.clientCPU, 0.01))
	fmt.Printf("frames to clients    %d (%.1f deliveries per frame), %.1f MiB\n",
		r.frames, float64(r.delivered)/float64(max(r.frames, 1)), float64(r.bytes)/(1<<20))
	if o.churnRate > 0 {
		fmt.Printf("churn                %d users came and went (%.0f/s, each %v), %d failed\n",
			r.churn.joined, float64(r.churn.joined)/r.sendTime.Seconds(), o.churnStay, r.churn.failed)
	}
}

func measurePresence(ctx context.Context, o options) (presenceResult, error) {
	type member struct {
		p    *peer
		doc  string
		recv *receiver
	}
	var members []*member
	byDoc := map[string][]*member{}
	for d := 0; d < o.docs; d++ {
		doc := newDocID()
		for i := 0; i < o.peers; i++ {
			p, err := dialPeerAsking(o.urls[len(members)%len(o.urls)], o.batches)
			if err != nil {
				return presenceResult{}, fmt.Errorf("connect peer %d: %w", len(members), err)
			}
			if i == 0 {
				if err := p.create(doc); err != nil {
					return presenceResult{}, fmt.Errorf("create document: %w", err)
				}
			} else if err := p.open(doc); err != nil {
				return presenceResult{}, err
			}
			m := &member{p: p, doc: doc, recv: &receiver{last: map[string]*uint64{}}}
			members = append(members, m)
			byDoc[doc] = append(byDoc[doc], m)
		}
	}
	defer func() {
		for _, m := range members {
			m.p.ws.Close()
		}
	}()

	var delivered atomic.Int64
	var readers sync.WaitGroup
	for _, m := range members {
		readers.Add(1)
		go func() {
			defer readers.Done()
			readPresence(m.p, m.recv, &delivered)
		}()
	}

	// Every peer says who it is, as a client does when its presence
	// starts, and again every two seconds until the room is complete, as
	// a client's heartbeats do (a server that keeps no presence forwards
	// only what comes after a peer joined); the load begins once every
	// peer has heard every other.
	greet := func() error {
		for _, m := range members {
			hello, _ := cbor.Marshal(map[string]any{"__presence": map[string]any{
				"type": "snapshot", "state": map[string]any{"user": map[string]any{"id": m.p.id, "name": m.p.id}},
			}})
			if err := m.p.ephemeral(m.doc, hello); err != nil {
				return fmt.Errorf("greet: %w", err)
			}
		}
		return nil
	}
	if err := greet(); err != nil {
		return presenceResult{}, err
	}
	deadline := time.Now().Add(60 * time.Second)
	regreet := time.Now().Add(2 * time.Second)
	for _, m := range members {
		for {
			m.recv.mu.Lock()
			n := len(m.recv.last)
			m.recv.mu.Unlock()
			if n >= len(byDoc[m.doc])-1 {
				break
			}
			if time.Now().After(deadline) {
				return presenceResult{}, fmt.Errorf("a peer heard %d of the %d others in its document within a minute", n, len(byDoc[m.doc])-1)
			}
			if time.Now().After(regreet) {
				if err := greet(); err != nil {
					return presenceResult{}, err
				}
				regreet = time.Now().Add(2 * time.Second)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	cpu0, _ := cpuSeconds(o.serverPIDs)
	self := []int{os.Getpid()}
	client0, _ := cpuSeconds(self)
	var frames0, bytes0 int64
	for _, m := range members {
		frames0 += m.p.framesIn.Load()
		bytes0 += m.p.bytesIn.Load()
	}
	start := time.Now()
	for _, m := range members {
		m.recv.mu.Lock()
		m.recv.from, m.recv.to = start.Add(steadyTrim).UnixNano(), start.Add(o.duration-steadyTrim).UnixNano()
		m.recv.mu.Unlock()
	}
	loadCtx, stopLoad := context.WithTimeout(ctx, o.duration)
	defer stopLoad()
	var churned churnResult
	var churnErr error
	churnDone := make(chan struct{})
	go func() {
		defer close(churnDone)
		churned, churnErr = churn(loadCtx, o)
	}()
	final := make([]uint64, len(members))
	var senders sync.WaitGroup
	for i, m := range members {
		senders.Add(1)
		go func() {
			defer senders.Done()
			final[i] = sendCursors(loadCtx, m.p, m.doc, o.rate)
		}()
	}
	senders.Wait()
	sendTime := time.Since(start)
	<-churnDone
	if churnErr != nil {
		return presenceResult{}, churnErr
	}
	select {
	case <-time.After(o.drain):
	case <-ctx.Done():
	}
	cpu1, _ := cpuSeconds(o.serverPIDs)
	client1, _ := cpuSeconds(self)
	var frames, bytes int64
	for _, m := range members {
		frames += m.p.framesIn.Load()
		bytes += m.p.bytesIn.Load()
	}
	var rss int64
	if len(o.serverPIDs) > 0 {
		rss, _ = rssBytes(o.serverPIDs)
	}
	for _, m := range members {
		m.p.ws.Close()
	}
	readers.Wait()

	var all, steady, first, last []time.Duration
	missingFinal := 0
	for _, m := range members {
		all = append(all, m.recv.latencies...)
		steady = append(steady, m.recv.steady...)
		first = append(first, m.recv.start...)
		last = append(last, m.recv.end...)
		for j, other := range members {
			if other.doc == m.doc && other != m && m.recv.lastFrom(other.p.id) != final[j] {
				missingFinal++
			}
		}
	}
	offered := int64(0)
	for _, m := range members {
		offered += int64(final[slices.Index(members, m)]) * int64(len(byDoc[m.doc])-1)
	}
	slices.Sort(all)
	slices.Sort(steady)
	slices.Sort(first)
	slices.Sort(last)
	return presenceResult{
		offered: offered, delivered: delivered.Load(), sendTime: sendTime, latencies: all, steady: steady, start: first, end: last,
		missingFinal: missingFinal, pairs: countPairs(byDoc), cpu: cpu1 - cpu0, rss: rss,
		clientCPU: client1 - client0, frames: frames - frames0, bytes: bytes - bytes0, churn: churned,
	}, nil
}

// sendCursors moves the peer's cursor at rate per second, with jitter so
// peers do not send in step, until ctx ends. It returns the last seq sent.
func sendCursors(ctx context.Context, p *peer, doc string, rate float64) uint64 {
	interval := time.Duration(float64(time.Second) / rate)
	timer := time.NewTimer(time.Duration(rand.Int64N(int64(interval))))
	defer timer.Stop()
	var seq uint64
	for {
		select {
		case <-ctx.Done():
			return seq
		case <-timer.C:
		}
		seq++
		value, _ := cbor.Marshal(cursor{Seq: seq, Sent: time.Now().UnixNano()})
		data, _ := cbor.Marshal(map[string]update{"__presence": {Type: "update", Channel: "cursor", Value: value}})
		if err := p.ephemeral(doc, data); err != nil {
			return seq - 1
		}
		timer.Reset(interval*9/10 + time.Duration(rand.Int64N(int64(interval/5)+1)))
	}
}

func readPresence(p *peer, r *receiver, delivered *atomic.Int64) {
	var f scannedFrame
	for {
		_, b, err := p.ws.ReadMessage()
		if err != nil {
			return
		}
		p.counted(b)
		if scanFrame(b, &f) != nil {
			continue
		}
		switch string(f.typ) {
		case wire.TypeSync:
			p.answer(f.data) // as automerge-repo does
		case wire.TypeEphemeral:
			r.mu.Lock()
			r.take(f.sender, f.data, delivered)
			r.mu.Unlock()
		case wire.TypePresenceBatch:
			r.mu.Lock()
			for _, e := range f.entries {
				if string(e.sender) != p.id {
					r.take(e.sender, e.data, delivered)
				}
			}
			r.mu.Unlock()
		}
	}
}

// take counts one presence message from sender, if it moves a cursor.
// The caller holds r.mu: a batch is taken under one lock.
func (r *receiver) take(sender, data []byte, delivered *atomic.Int64) {
	var m scannedPresence
	if scanPresence(data, &m) != nil || len(m.typ) == 0 {
		return
	}
	last := r.last[string(sender)] // a lookup by bytes does not allocate
	if last == nil {
		last = new(uint64)
		r.last[string(sender)] = last
	}
	c := m.cursor
	if string(m.typ) != "update" || string(m.channel) != "cursor" || !m.isCursor || c.Sent == 0 {
		return
	}
	lat := time.Duration(time.Now().UnixNano() - c.Sent)
	delivered.Add(1)
	r.latencies = append(r.latencies, lat)
	switch {
	case c.Sent < r.from:
		r.start = append(r.start, lat)
	case c.Sent < r.to:
		r.steady = append(r.steady, lat)
	default:
		r.end = append(r.end, lat)
	}
	*last = max(*last, c.Seq)
}

// lastFrom is the last cursor seq heard from a peer.
func (r *receiver) lastFrom(peer string) uint64 {
	if last := r.last[peer]; last != nil {
		return *last
	}
	return 0
}

func pct(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p/100+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)].Round(10 * time.Microsecond)
}

func countPairs[T any](byDoc map[string][]T) int {
	n := 0
	for _, ms := range byDoc {
		n += len(ms) * (len(ms) - 1)
	}
	return n
}
