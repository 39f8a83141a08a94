package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strings"
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
	// older counts cursors older than one delivered before from the
	// same peer.
	older int
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
	older              int     // cursors older than one delivered before from the same peer
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
	measure := measurePresence
	if strings.HasSuffix(o.urls[0], centrifugoPath) {
		measure = func(ctx context.Context, o options) (presenceResult, error) {
			return measurePresenceOn(ctx, o, dialCentrifugo, newChannel)
		}
	}
	r, err := measure(ctx, o)
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
	fmt.Printf("final cursor missing %d of %d (receiver, sender) pairs; %d older than one delivered\n", r.missingFinal, r.pairs, r.older)
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

// presenceClient is one client of a presence run, whichever server it
// speaks to: an automerge-repo peer (amPresence) or a Centrifugo client
// (centrifugo.go).
type presenceClient interface {
	ID() string
	// Greet says who the client is: its presence's first message.
	Greet() error
	// Move moves its cursor: seq, sent at sent (Unix nanoseconds).
	Move(seq uint64, sent int64) error
	// Read takes what the client is sent, at about a real client's cost,
	// until the connection ends.
	Read(r *receiver, delivered *atomic.Int64)
	// Received is what the client was sent: frames and bytes.
	Received() (frames, bytes int64)
	Close()
}

// dialPresence connects the i-th client of a room: the first makes the
// room (an automerge document), the others join it.
type dialPresence func(url, room string, first bool) (presenceClient, error)

// amPresence is an automerge-repo peer in one document.
type amPresence struct {
	p   *peer
	doc string
}

func dialAutomerge(batches bool) dialPresence {
	return func(url, doc string, first bool) (presenceClient, error) {
		p, err := dialPeerAsking(url, batches)
		if err != nil {
			return nil, err
		}
		if first {
			err = p.create(doc)
		} else {
			err = p.open(doc)
		}
		if err != nil {
			p.ws.Close()
			return nil, err
		}
		return &amPresence{p: p, doc: doc}, nil
	}
}

func (a *amPresence) ID() string { return a.p.id }

func (a *amPresence) Greet() error {
	hello, _ := cbor.Marshal(map[string]any{"__presence": map[string]any{
		"type": "snapshot", "state": map[string]any{"user": map[string]any{"id": a.p.id, "name": a.p.id}},
	}})
	return a.p.ephemeral(a.doc, hello)
}

func (a *amPresence) Move(seq uint64, sent int64) error {
	value, _ := cbor.Marshal(cursor{Seq: seq, Sent: sent})
	data, _ := cbor.Marshal(map[string]update{"__presence": {Type: "update", Channel: "cursor", Value: value}})
	return a.p.ephemeral(a.doc, data)
}

func (a *amPresence) Read(r *receiver, delivered *atomic.Int64) { readPresence(a.p, r, delivered) }

func (a *amPresence) Received() (int64, int64) { return a.p.framesIn.Load(), a.p.bytesIn.Load() }

func (a *amPresence) Close() { a.p.ws.Close() }

func measurePresence(ctx context.Context, o options) (presenceResult, error) {
	return measurePresenceOn(ctx, o, dialAutomerge(o.batches), newDocID)
}

// measurePresenceOn runs the presence load with clients that dial makes,
// in rooms that newRoom names.
func measurePresenceOn(ctx context.Context, o options, dial dialPresence, newRoom func() string) (presenceResult, error) {
	type member struct {
		c    presenceClient
		doc  string
		recv *receiver
	}
	var members []*member
	byDoc := map[string][]*member{}
	defer func() {
		for _, m := range members {
			m.c.Close()
		}
	}()
	for d := 0; d < o.docs; d++ {
		doc := newRoom()
		for i := 0; i < o.peers; i++ {
			c, err := dial(o.urls[len(members)%len(o.urls)], doc, i == 0)
			if err != nil {
				return presenceResult{}, fmt.Errorf("connect peer %d: %w", len(members), err)
			}
			m := &member{c: c, doc: doc, recv: &receiver{last: map[string]*uint64{}}}
			members = append(members, m)
			byDoc[doc] = append(byDoc[doc], m)
		}
	}

	var delivered atomic.Int64
	var readers sync.WaitGroup
	for _, m := range members {
		readers.Add(1)
		go func() {
			defer readers.Done()
			m.c.Read(m.recv, &delivered)
		}()
	}

	// Every peer says who it is, as a client does when its presence
	// starts, and again every two seconds until the room is complete, as
	// a client's heartbeats do (a server that keeps no presence forwards
	// only what comes after a peer joined); the load begins once every
	// peer has heard every other.
	greet := func() error {
		for _, m := range members {
			if err := m.c.Greet(); err != nil {
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
	received := func() (frames, bytes int64) {
		for _, m := range members {
			f, b := m.c.Received()
			frames, bytes = frames+f, bytes+b
		}
		return frames, bytes
	}

	cpu0, _ := cpuSeconds(o.serverPIDs)
	self := []int{os.Getpid()}
	client0, _ := cpuSeconds(self)
	frames0, bytes0 := received()
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
			final[i] = sendCursors(loadCtx, m.c, o.rate)
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
	frames, bytes := received()
	var rss int64
	if len(o.serverPIDs) > 0 {
		rss, _ = rssBytes(o.serverPIDs)
	}
	for _, m := range members {
		m.c.Close()
	}
	readers.Wait()

	var all, steady, first, last []time.Duration
	missingFinal, older := 0, 0
	for _, m := range members {
		all = append(all, m.recv.latencies...)
		steady = append(steady, m.recv.steady...)
		first = append(first, m.recv.start...)
		last = append(last, m.recv.end...)
		older += m.recv.older
		for j, other := range members {
			if other.doc == m.doc && other != m && m.recv.lastFrom(other.c.ID()) != final[j] {
				missingFinal++
			}
		}
	}
	offered := int64(0)
	for i, m := range members {
		offered += int64(final[i]) * int64(len(byDoc[m.doc])-1)
	}
	slices.Sort(all)
	slices.Sort(steady)
	slices.Sort(first)
	slices.Sort(last)
	return presenceResult{
		offered: offered, delivered: delivered.Load(), sendTime: sendTime, latencies: all, steady: steady, start: first, end: last,
		missingFinal: missingFinal, pairs: countPairs(byDoc), older: older, cpu: cpu1 - cpu0, rss: rss,
		clientCPU: client1 - client0, frames: frames - frames0, bytes: bytes - bytes0, churn: churned,
	}, nil
}

// sendCursors moves the client's cursor at rate per second, with jitter so
// peers do not send in step, until ctx ends. It returns the last seq sent.
func sendCursors(ctx context.Context, c presenceClient, rate float64) uint64 {
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
		if err := c.Move(seq, time.Now().UnixNano()); err != nil {
			return seq - 1
		}
		timer.Reset(interval*9/10 + time.Duration(rand.Int64N(int64(interval/5)+1)))
	}
}

// passOn is --pass-on: whether the peers send every ephemeral they take
// back to the server, as stock clients do (peer.passOn).
var passOn = flag.Bool("pass-on", true, "presence: peers send every ephemeral they take back to the server under its sender, as automerge-repo's Repo does over its stock network adapter (Tandem's JS client's adapter keeps them in: with --batches, peers so cost the server more than that client does); false: they do not, which spares the server a message per delivery")

// readPresence reads what the peer is sent as a stock automerge-repo
// client does, at about its cost: every frame decoded whole (wire.Decode,
// as cbor-x decodes a message), a sync message answered (answer), an
// ephemeral dropped unless its count is new for its sender's session,
// then its payload decoded whole (as the repo's DocSynchronizer does) and
// taken, and passed on back to the server (--pass-on). A presence batch,
// which Tandem's JS client asks for, is unbatched into the ephemerals it
// holds, as that client's network adapter does.
func readPresence(p *peer, r *receiver, delivered *atomic.Int64) {
	for {
		_, b, err := p.ws.ReadMessage()
		if err != nil {
			return
		}
		p.counted(b)
		m, err := wire.Decode(b)
		if err != nil {
			continue
		}
		switch m.Type {
		case wire.TypeSync:
			p.answer(m.Data)
		case wire.TypeEphemeral:
			receiveEphemeral(p, r, m, delivered)
		case wire.TypePresenceBatch:
			for _, e := range m.Batch {
				if e.SenderID == p.id {
					continue
				}
				receiveEphemeral(p, r, &wire.Message{
					Type: wire.TypeEphemeral, SenderID: e.SenderID, TargetID: p.id, DocumentID: m.DocumentID,
					SessionID: m.SessionID, Count: e.Count, Data: e.Data,
				}, delivered)
			}
		}
	}
}

// receiveEphemeral takes one ephemeral as a stock client does.
func receiveEphemeral(p *peer, r *receiver, m *wire.Message, delivered *atomic.Int64) {
	if !p.fresh(m) {
		return
	}
	var payload any
	if payloadMode.Unmarshal(m.Data, &payload) != nil {
		return
	}
	r.mu.Lock()
	r.take(m.SenderID, payload, delivered)
	r.mu.Unlock()
	if *passOn {
		p.passOn(m)
	}
}

// payloadMode decodes an ephemeral's payload whole, maps as string-keyed
// maps, as a JavaScript client decodes it into objects.
var payloadMode, _ = cbor.DecOptions{DefaultMapType: reflect.TypeOf(map[string]any(nil))}.DecMode()

// take counts one presence message from sender, if it moves a cursor.
// The caller holds r.mu.
func (r *receiver) take(sender string, payload any, delivered *atomic.Int64) {
	env, _ := payload.(map[string]any)
	m, _ := env["__presence"].(map[string]any)
	typ, _ := m["type"].(string)
	if typ == "" {
		return
	}
	last := r.last[sender]
	if last == nil {
		last = new(uint64)
		r.last[sender] = last
	}
	var value map[string]any
	switch channel, _ := m["channel"].(string); {
	case typ == "update" && channel == "cursor":
		value, _ = m["value"].(map[string]any)
	case typ == "snapshot":
		// A snapshot carries the cursor too when the server sends a
		// peer's whole state (a member that fell behind is sent the
		// room): a delivery if it is news.
		state, _ := m["state"].(map[string]any)
		value, _ = state["cursor"].(map[string]any)
		if seq := number(value["s"]); seq == 0 || uint64(seq) <= *last {
			return
		}
	}
	seq, sent := number(value["s"]), number(value["t"])
	if sent == 0 {
		return
	}
	if uint64(seq) < *last {
		r.older++ // a value older than one delivered: presence promises never
	}
	lat := time.Duration(time.Now().UnixNano() - sent)
	delivered.Add(1)
	r.latencies = append(r.latencies, lat)
	switch {
	case sent < r.from:
		r.start = append(r.start, lat)
	case sent < r.to:
		r.steady = append(r.steady, lat)
	default:
		r.end = append(r.end, lat)
	}
	*last = max(*last, uint64(seq))
}

// number is a decoded CBOR integer, whichever Go type it came as; 0 if
// it is none.
func number(v any) int64 {
	switch n := v.(type) {
	case uint64:
		return int64(n)
	case int64:
		return n
	case float64: // JSON's, as JavaScript reads it
		return int64(n)
	}
	return 0
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
