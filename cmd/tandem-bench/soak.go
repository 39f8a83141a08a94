package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/automerge/automerge-go"
	"github.com/fxamacker/cbor/v2"
	"github.com/gorilla/websocket"

	"github.com/tandemhq/tandem/doc/amcheck"
	"github.com/tandemhq/tandem/doc/amcheck/amtest"
	"github.com/tandemhq/tandem/doc/store"
	"github.com/tandemhq/tandem/transport/wire"
)

const soakHelp = `run the fault soak on a cluster of this many Tandem nodes (--tandem-bin,
private redis-server, --postgres-url): --docs × --peers peers that edit,
move cursors and drop their connections at random, a node killed with -9
and restarted, Redis restarted (with --redis-shards: a Redis Cluster
master killed, its replica taking over), bad input mixed in; reports ghosts past
--ghost-bound, acknowledged edits lost, documents damaged or diverged, and
errors by reason`

// The soak's clients are stock-shaped: each keeps its automerge document
// across reconnects (as a browser tab does) and answers every sync message,
// so what it typed while away or unacknowledged reaches the server later.

// soakPeer is one client over its whole life, across connections.
type soakPeer struct {
	id, doc string

	mu      sync.Mutex // guards everything below, and writes to ws
	d       *automerge.Doc
	state   *automerge.SyncState
	ws      *websocket.Conn
	edits   int
	pending map[automerge.ChangeHash]string // edits not yet acknowledged, by change
	acked   map[string]int64                // acknowledged edits: key → value
	online  bool
	// count numbers its ephemeral messages in its one session, across
	// connections, as a Repo does: presence orders a peer's writes by it.
	count   uint64
	leftAt  time.Time // when its last connection ended
	lastURL string    // the node of its last connection
}

// soak is one run's shared state.
type soak struct {
	nodes     []*server
	nodeUp    []atomic.Bool
	redises   []redisProc // one redis-server, or a Redis Cluster's nodes
	bound     time.Duration
	peers     []*soakPeer
	maxMsg    int
	calmAfter atomic.Int64 // Unix ns: ghosts are measured from here at the earliest (a fault's end)
	kills     atomic.Int64 // nodes killed so far

	emu        sync.Mutex
	errors     map[string]int // by reason
	ghosts     map[string]time.Duration
	longest    time.Duration // the longest a peer that had left was still shown, within the bound or not
	longestWho string        // which peer, where, when it left
}

// nodeName names the node serving url.
func (s *soak) nodeName(url string) string {
	for _, n := range s.nodes {
		if n.url == url {
			return n.name
		}
	}
	return url
}

func (s *soak) count(reason string) {
	s.emu.Lock()
	s.errors[reason]++
	s.emu.Unlock()
}

// liveURL picks a node that is up, at random.
func (s *soak) liveURL() (string, bool) {
	var up []string
	for i, n := range s.nodes {
		if s.nodeUp[i].Load() {
			up = append(up, n.url)
		}
	}
	if len(up) == 0 {
		return "", false
	}
	return up[rand.IntN(len(up))], true
}

// soakResult is what a soak found.
type soakResult struct {
	edits, acked            int
	lost, damaged, diverged int
	lostInStore             int                      // acknowledged edits missing from PostgreSQL itself
	ghosts                  map[string]time.Duration // peer on node → how long after it left it was still shown
	finalGhosts             int                      // peers shown after everyone left and the bound passed
	crashed                 []string                 // nodes that exited without being killed
	longest                 time.Duration            // the longest a peer that had left was still shown (while the load ran)
	longestWho              string
	errors                  map[string]int // by reason
}

func (r soakResult) faulty() bool {
	return r.lost > 0 || r.lostInStore > 0 || r.damaged > 0 || r.diverged > 0 || len(r.ghosts) > 0 || r.finalGhosts > 0 || len(r.crashed) > 0 ||
		r.errors["bad input: unexpected outcome"] > 0
}

func runSoak(ctx context.Context, o options, tandemBin string, n int, postgresURL string, bound time.Duration) error {
	fmt.Printf("soak: %d nodes, %d documents × %d peers, %v, ghost bound %v\n", n, o.docs, o.peers, o.duration, bound)
	r, err := measureSoak(ctx, o, tandemBin, n, postgresURL, bound)
	if err != nil {
		return err
	}
	fmt.Printf("nodes crashed        %d %v\n", len(r.crashed), r.crashed)
	fmt.Printf("edits                %d made, %d acknowledged\n", r.edits, r.acked)
	fmt.Printf("acknowledged lost    %d read from the nodes, %d read from PostgreSQL\n", r.lost, r.lostInStore)
	fmt.Printf("documents damaged    %d, diverged between nodes %d\n", r.damaged, r.diverged)
	fmt.Printf("ghosts past bound    %d during the run, %d after everyone left; the longest a peer that left was shown: %v (%s)\n",
		len(r.ghosts), r.finalGhosts, r.longest.Round(100*time.Millisecond), r.longestWho)
	for k, age := range r.ghosts {
		fmt.Printf("  ghost %s seen %v after it left\n", k, age.Round(time.Millisecond))
	}
	reasons := make([]string, 0, len(r.errors))
	for reason := range r.errors {
		reasons = append(reasons, reason)
	}
	slices.Sort(reasons)
	fmt.Println("errors by reason:")
	for _, reason := range reasons {
		fmt.Printf("  %6d  %s\n", r.errors[reason], reason)
	}
	if r.faulty() {
		return errors.New("the soak found faults")
	}
	return nil
}

func measureSoak(ctx context.Context, o options, tandemBin string, n int, postgresURL string, bound time.Duration) (soakResult, error) {
	var none soakResult
	dataDir, err := os.MkdirTemp("", "tandem-soak-")
	if err != nil {
		return none, err
	}
	defer os.RemoveAll(dataDir)
	// On a Redis Cluster each master has a replica: the fault kills a
	// master, and its replica takes over.
	redises, redisURL, err := startRedises(ctx, o.redisShards, 1, dataDir)
	for _, r := range redises {
		defer func() { r.srv.stop() }()
	}
	if err != nil {
		return none, err
	}
	var redisFlags []string
	if o.redisShards > 0 {
		redisFlags = []string{"--redis-cluster"}
	}
	s := &soak{redises: redises, bound: bound, maxMsg: 1 << 20, errors: map[string]int{}, ghosts: map[string]time.Duration{}}
	s.nodeUp = make([]atomic.Bool, n)
	for i := range n {
		node, err := startServer(fmt.Sprintf("node %d", i+1), "tandem serving", "/ws", append([]string{tandemBin,
			"--addr", "127.0.0.1:{port}", "--node-id", fmt.Sprintf("soak-%d", i+1),
			"--redis-url", redisURL, "--postgres-url", postgresURL,
			"--data-dir", filepath.Join(dataDir, fmt.Sprint(i+1)), "--log-level", "info",
			"--max-conns-per-ip", "1000000", "--message-rate", "1000", "--message-burst", "2000",
			"--max-message-bytes", fmt.Sprint(s.maxMsg)}, redisFlags...)...)
		if err != nil {
			return none, err
		}
		defer func() { node.stop() }()
		s.nodes = append(s.nodes, node)
		s.nodeUp[i].Store(true)
	}

	for d := 0; d < o.docs; d++ {
		doc := newDocID()
		for i := 0; i < o.peers; i++ {
			p := &soakPeer{id: fmt.Sprintf("soak-%d-%d", d, i), doc: doc, d: automerge.New(),
				pending: map[automerge.ChangeHash]string{}, acked: map[string]int64{}}
			s.peers = append(s.peers, p)
		}
		// The first peer creates the document, the others find it.
		first := s.peers[len(s.peers)-o.peers]
		first.d.RootMap().Set("created", true)
		first.d.Commit("create")
	}

	loadCtx, stopLoad := context.WithTimeout(ctx, o.duration)
	defer stopLoad()
	var wg sync.WaitGroup
	for _, p := range s.peers {
		wg.Add(1)
		go func() { defer wg.Done(); s.live(loadCtx, p, o.rate) }()
	}
	wg.Add(3)
	go func() { defer wg.Done(); s.faults(loadCtx, o.duration) }()
	go func() { defer wg.Done(); s.badInput(loadCtx) }()
	go func() { defer wg.Done(); s.watchGhosts(loadCtx) }()
	wg.Wait()
	if ctx.Err() != nil {
		return none, ctx.Err()
	}

	// Every peer has left. After the bound, no node may show any of them.
	fmt.Printf("load done; waiting %v for the last goodbyes\n", s.bound)
	s.printBusCounts()
	time.Sleep(s.bound)
	finalGhosts := s.ghostsNow(time.Now(), true)

	r := soakResult{finalGhosts: finalGhosts}
	for i, node := range s.nodes {
		select {
		case <-node.exited:
			r.crashed = append(r.crashed, node.name)
			s.nodeUp[i].Store(false)
		default:
		}
	}
	var err2 error
	r.lost, r.damaged, r.diverged, err2 = s.verify()
	if err2 != nil {
		return none, err2
	}
	if r.lostInStore, err2 = s.verifyStore(ctx, postgresURL); err2 != nil {
		return none, err2
	}
	for _, p := range s.peers {
		r.edits += p.edits
		r.acked += len(p.acked)
	}
	s.emu.Lock()
	r.ghosts, r.errors, r.longest, r.longestWho = s.ghosts, s.errors, s.longest, s.longestWho
	s.emu.Unlock()
	return r, nil
}

// live runs a peer until ctx ends: connect to a node that is up, sync,
// edit and move its cursor, then drop the connection (half the time
// without a close frame, as a killed tab) and stay away a while, mostly
// briefly, sometimes three times the ghost bound.
func (s *soak) live(ctx context.Context, p *soakPeer, rate float64) {
	for ctx.Err() == nil {
		url, ok := s.liveURL()
		if !ok {
			sleepCtx(ctx, 100*time.Millisecond)
			continue
		}
		s.session(ctx, p, url, rate, time.Duration(1+rand.IntN(5))*time.Second)
		away := time.Duration(100+rand.IntN(500)) * time.Millisecond
		if rand.IntN(5) == 0 {
			// Long enough to see a ghost outlive the bound by far: a peer
			// that is back is online again, which ends the measurement.
			away = 3 * s.bound
		}
		sleepCtx(ctx, away)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// session is one connection of a peer, for at most life.
func (s *soak) session(ctx context.Context, p *soakPeer, url string, rate float64, life time.Duration) {
	ws, _, err := websocket.DefaultDialer.DialContext(ctx, url, nil)
	if err != nil {
		if ctx.Err() == nil {
			s.count("peer: dial failed (node down)")
		}
		return
	}
	send := func(m *wire.Message) error {
		m.SenderID = p.id
		b, err := wire.Encode(m)
		if err != nil {
			return err
		}
		ws.SetWriteDeadline(time.Now().Add(5 * time.Second))
		return ws.WriteMessage(websocket.BinaryMessage, b)
	}
	p.mu.Lock()
	p.ws, p.state, p.online, p.lastURL = ws, automerge.NewSyncState(p.d), true, url
	err = send(&wire.Message{Type: wire.TypeJoin, SupportedProtocolVersions: []string{wire.ProtocolV1},
		PeerMetadata: &wire.PeerMetadata{IsEphemeral: true}})
	if err == nil {
		typ := wire.TypeSync
		if len(p.d.Heads()) == 0 {
			typ = wire.TypeRequest
		}
		if m, ok := p.state.GenerateMessage(); ok {
			err = send(&wire.Message{Type: typ, DocumentID: p.doc, Data: m.Bytes()})
		}
	}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.online, p.leftAt, p.ws = false, time.Now(), nil
		p.mu.Unlock()
	}()
	if err != nil {
		s.count("peer: send failed")
		ws.Close()
		return
	}

	done := make(chan struct{})
	go func() {
		defer close(done)
		s.read(p, ws, send)
	}()
	edit := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer edit.Stop()
	cursor := time.NewTicker(300 * time.Millisecond)
	defer cursor.Stop()
	end := time.NewTimer(life)
	defer end.Stop()
	for {
		select {
		case <-ctx.Done():
			ws.Close()
			<-done
			return
		case <-done:
			return // the connection ended under it (a node killed, a close)
		case <-end.C:
			if rand.IntN(2) == 0 {
				p.mu.Lock()
				ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
				p.mu.Unlock()
			}
			ws.Close() // without a close frame half the time: a tab killed
			<-done
			return
		case <-edit.C:
			p.mu.Lock()
			key := fmt.Sprintf("%s-%d", p.id, p.edits)
			p.d.RootMap().Set(key, int64(p.edits))
			h, err := p.d.Commit("edit")
			if err == nil {
				p.edits++
				p.pending[h] = key
				if m, ok := p.state.GenerateMessage(); ok {
					err = send(&wire.Message{Type: wire.TypeSync, DocumentID: p.doc, Data: m.Bytes()})
				}
			}
			p.mu.Unlock()
			if err != nil {
				ws.Close()
			}
		case <-cursor.C:
			p.mu.Lock()
			p.count++
			value, _ := cbor.Marshal(map[string]any{"s": p.count})
			data, _ := cbor.Marshal(map[string]update{"__presence": {Type: "update", Channel: "cursor", Value: value}})
			err := send(&wire.Message{Type: wire.TypeEphemeral, DocumentID: p.doc, SessionID: p.id, Count: p.count, Data: data})
			p.mu.Unlock()
			if err != nil {
				ws.Close()
			}
		}
	}
}

// read handles what the server sends a peer: sync messages are received
// and answered; an edit counts as acknowledged once the server's heads
// cover it (Tandem names only stored heads).
func (s *soak) read(p *soakPeer, ws *websocket.Conn, send func(*wire.Message) error) {
	for {
		_, b, err := ws.ReadMessage()
		if err != nil {
			var ce *websocket.CloseError
			switch {
			case errors.As(err, &ce) && ce.Code == websocket.CloseAbnormalClosure:
				s.count("peer: connection dropped without a close (node killed)")
			case errors.As(err, &ce) && ce.Code != websocket.CloseNormalClosure && ce.Code != websocket.CloseGoingAway:
				s.count(fmt.Sprintf("peer: closed by the server with %d", ce.Code))
			}
			return
		}
		m, err := wire.Decode(b)
		if err != nil {
			s.count("peer: undecodable frame from the server")
			continue
		}
		switch m.Type {
		case wire.TypeSync:
			p.mu.Lock()
			sm, err := p.state.ReceiveMessage(m.Data)
			if err == nil {
				p.ackCovered(sm.Heads())
				if out, ok := p.state.GenerateMessage(); ok {
					err = send(&wire.Message{Type: wire.TypeSync, DocumentID: p.doc, Data: out.Bytes()})
				}
			}
			p.mu.Unlock()
			if err != nil {
				ws.Close()
				return
			}
		case wire.TypeError:
			s.count("peer: error from the server: " + m.ErrorMessage)
		}
	}
}

// ackCovered marks acknowledged the pending edits that the server's heads
// cover: those not among the changes since those heads. Called with p.mu.
func (p *soakPeer) ackCovered(heads []automerge.ChangeHash) {
	if len(p.pending) == 0 || len(heads) == 0 {
		return
	}
	for _, h := range heads {
		if _, err := p.d.Change(h); err != nil {
			return // the server is ahead of what we hold: wait for the next
		}
	}
	after, err := p.d.Changes(heads...)
	if err != nil {
		return
	}
	notCovered := make(map[automerge.ChangeHash]bool, len(after))
	for _, c := range after {
		notCovered[c.Hash()] = true
	}
	for h, key := range p.pending {
		if !notCovered[h] {
			v, _ := p.d.RootMap().Get(key)
			p.acked[key] = v.Int64()
			delete(p.pending, h)
		}
	}
}

// faults kills node 1 with -9 at a third of the run and restarts it 3 s
// later, and restarts Redis (empty: shared keys gone) at two thirds.
func (s *soak) faults(ctx context.Context, d time.Duration) {
	sleepCtx(ctx, d/3)
	if ctx.Err() != nil {
		return
	}
	fmt.Println(time.Now().Format("15:04:05.000"), "fault: kill -9 node 1")
	s.nodeUp[0].Store(false)
	s.kills.Add(1)
	s.nodes[0].kill()
	sleepCtx(ctx, 3*time.Second)
	if err := s.nodes[0].restart(); err != nil {
		s.count("soak: node 1 did not restart: " + err.Error())
	} else {
		s.nodeUp[0].Store(true)
		fmt.Println(time.Now().Format("15:04:05.000"), "fault: node 1 restarted")
	}
	sleepCtx(ctx, d/3-3*time.Second)
	if ctx.Err() != nil {
		return
	}
	if len(s.redises) > 1 {
		// A Redis Cluster: a master is killed, its replica takes over,
		// and the master comes back as a replica.
		fmt.Println(time.Now().Format("15:04:05.000"), "fault: kill -9 a Redis Cluster master")
		s.redises[0].srv.kill()
		sleepCtx(ctx, 3*time.Second) // the cluster's node timeout (2 s) first: until then it says ok
		if err := clusterOK(ctx, s.redises[1].addr, 30*time.Second); err != nil {
			s.count("soak: " + err.Error())
		}
		fmt.Println(time.Now().Format("15:04:05.000"), "fault: its replica serves")
		if err := s.redises[0].srv.restart(); err != nil {
			s.count("soak: the killed master did not restart: " + err.Error())
		}
	} else {
		fmt.Println(time.Now().Format("15:04:05.000"), "fault: Redis restarted")
		s.redises[0].srv.kill()
		sleepCtx(ctx, 2*time.Second)
		if err := s.redises[0].srv.restart(); err != nil {
			s.count("soak: redis did not restart: " + err.Error())
		}
	}
	// Nodes reconnect and repair within their next rosters: ghosts count
	// from when Redis is back.
	s.calmAfter.Store(time.Now().UnixNano())
}

// badInput sends one bad input after another, each on a connection of its
// own, and counts what the server answered.
func (s *soak) badInput(ctx context.Context) {
	cases := []struct {
		name string
		want int // close code; 0 for "error, the connection stays"
		send func(ws *websocket.Conn, doc string) error
	}{
		{"garbage bytes", websocket.CloseInvalidFramePayloadData, func(ws *websocket.Conn, _ string) error {
			return ws.WriteMessage(websocket.BinaryMessage, []byte{0xff, 0x00, 0x13, 0x37})
		}},
		{"text frame", websocket.CloseUnsupportedData, func(ws *websocket.Conn, _ string) error {
			return ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"join"}`))
		}},
		{"oversized frame", websocket.CloseMessageTooBig, func(ws *websocket.Conn, _ string) error {
			return ws.WriteMessage(websocket.BinaryMessage, make([]byte, s.maxMsg+1))
		}},
		{"sync before join", websocket.CloseProtocolError, func(ws *websocket.Conn, doc string) error {
			b, _ := wire.Encode(&wire.Message{Type: wire.TypeSync, SenderID: "x", DocumentID: doc, Data: []byte{0x42}})
			return ws.WriteMessage(websocket.BinaryMessage, b)
		}},
		{"forged sender", websocket.ClosePolicyViolation, func(ws *websocket.Conn, doc string) error {
			if err := joinAs(ws, "mallory"); err != nil {
				return err
			}
			// A sync message under another peer's id (an ephemeral under
			// another id is dropped quietly: stock clients relay those).
			m, _ := automerge.NewSyncState(automerge.New()).GenerateMessage()
			b, _ := wire.Encode(&wire.Message{Type: wire.TypeSync, SenderID: "someone-else", DocumentID: doc, Data: m.Bytes()})
			return ws.WriteMessage(websocket.BinaryMessage, b)
		}},
		{"forged change", 0, func(ws *websocket.Conn, doc string) error {
			if err := joinAs(ws, "mallory3"); err != nil {
				return err
			}
			// A change into an object no change made: automerge-go takes
			// it, stock clients could never load the document again.
			v, raw := amtest.Int(1)
			chunk, _ := amtest.Encode(amtest.Change{Actors: [][]byte{[]byte("mallory3")}, Seq: 1, StartOp: 9, Ops: []amtest.Op{
				{Obj: amcheck.OpID{Counter: 5}, MapKey: true, Key: "x", Action: amcheck.Put, Value: v, Raw: raw},
			}})
			data := append([]byte{0x42, 0, 0, 0, 1}, binary.AppendUvarint(nil, uint64(len(chunk)))...)
			b, _ := wire.Encode(&wire.Message{Type: wire.TypeSync, SenderID: "mallory3", DocumentID: doc, Data: append(data, chunk...)})
			return ws.WriteMessage(websocket.BinaryMessage, b)
		}},
		{"invalid document id", 0, func(ws *websocket.Conn, _ string) error {
			if err := joinAs(ws, "mallory2"); err != nil {
				return err
			}
			m, _ := automerge.NewSyncState(automerge.New()).GenerateMessage()
			b, _ := wire.Encode(&wire.Message{Type: wire.TypeRequest, SenderID: "mallory2", DocumentID: "not-a-document", Data: m.Bytes()})
			return ws.WriteMessage(websocket.BinaryMessage, b)
		}},
	}
	for i := 0; ctx.Err() == nil; i++ {
		sleepCtx(ctx, 150*time.Millisecond)
		url, ok := s.liveURL()
		if !ok || ctx.Err() != nil {
			continue
		}
		c := cases[i%len(cases)]
		kills := s.kills.Load()
		ws, _, err := websocket.DefaultDialer.DialContext(ctx, url, nil)
		if err != nil {
			continue // a node going down meanwhile
		}
		doc := s.peers[rand.IntN(len(s.peers))].doc
		if err := c.send(ws, doc); err != nil {
			ws.Close()
			continue
		}
		code, gotError := readOutcome(ws, c.want == 0)
		ws.Close()
		if s.kills.Load() != kills {
			continue // a node killed meanwhile: not the input's outcome
		}
		switch {
		case c.want == 0 && gotError && code == 0:
			s.count("bad input: " + c.name + " → error, connection kept")
		case c.want != 0 && code == c.want:
			s.count(fmt.Sprintf("bad input: %s → close %d", c.name, code))
		default:
			s.count("bad input: unexpected outcome")
			s.count(fmt.Sprintf("bad input: %s → close %d, error %v (unexpected)", c.name, code, gotError))
		}
	}
}

func joinAs(ws *websocket.Conn, id string) error {
	b, _ := wire.Encode(&wire.Message{Type: wire.TypeJoin, SenderID: id, SupportedProtocolVersions: []string{wire.ProtocolV1}})
	if err := ws.WriteMessage(websocket.BinaryMessage, b); err != nil {
		return err
	}
	ws.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, _, err := ws.ReadMessage() // the peer message
	return err
}

// readOutcome reads until the server closes (its close code), or, when
// an error is expected without a close, until that error arrives (code 0).
// A connection that ends without a close frame gives -1.
func readOutcome(ws *websocket.Conn, errorOnly bool) (code int, gotError bool) {
	ws.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		_, b, err := ws.ReadMessage()
		var ce *websocket.CloseError
		if errors.As(err, &ce) {
			return ce.Code, gotError
		}
		if err != nil {
			return -1, gotError
		}
		if m, err := wire.Decode(b); err == nil && m.Type == wire.TypeError {
			gotError = true
			if errorOnly {
				return 0, true
			}
		}
	}
}

// watchGhosts asks every node that is up, every 500 ms, whom it shows in
// each document, and records each peer shown longer than the bound after
// it left (counted from the end of the last fault at the earliest).
func (s *soak) watchGhosts(ctx context.Context) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.ghostsNow(time.Now(), false)
		}
	}
}

// ghostsNow records the ghosts shown now and returns how many; final
// counts every soak peer shown (all of them have left).
func (s *soak) ghostsNow(now time.Time, final bool) int {
	docs := map[string]bool{}
	byID := map[string]*soakPeer{}
	for _, p := range s.peers {
		docs[p.doc] = true
		byID[p.id] = p
	}
	calm := time.Unix(0, s.calmAfter.Load())
	n := 0
	for i, node := range s.nodes {
		if !s.nodeUp[i].Load() {
			continue
		}
		base := "http://" + strings.TrimSuffix(strings.TrimPrefix(node.url, "ws://"), "/ws")
		for doc := range docs {
			shown, err := presenceOf(base, doc)
			if err != nil {
				continue // a node going down
			}
			for _, id := range shown {
				p := byID[id]
				if p == nil {
					continue
				}
				p.mu.Lock()
				online, left, last := p.online, p.leftAt, p.lastURL
				p.mu.Unlock()
				if online || left.IsZero() {
					continue
				}
				from := left
				if calm.After(from) {
					from = calm
				}
				age := now.Sub(from)
				key := fmt.Sprintf("%s on node %d (it left %s at %s)", id, i+1, s.nodeName(last), left.Format("15:04:05.000"))
				if !final {
					s.emu.Lock()
					if age > s.longest {
						s.longest, s.longestWho = age, key
					}
					s.emu.Unlock()
				}
				if final || age > s.bound {
					n++
					s.emu.Lock()
					if age > s.ghosts[key] {
						s.ghosts[key] = age
					}
					s.emu.Unlock()
				}
			}
		}
	}
	return n
}

// printBusCounts prints what each node published to Redis and dropped
// (a full queue, or Redis away), from its metrics.
func (s *soak) printBusCounts() {
	for i, node := range s.nodes {
		if !s.nodeUp[i].Load() {
			continue
		}
		base := "http://" + strings.TrimSuffix(strings.TrimPrefix(node.url, "ws://"), "/ws")
		c := http.Client{Timeout: 2 * time.Second}
		res, err := c.Get(base + "/metrics")
		if err != nil {
			continue
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		var counts []string
		for _, line := range strings.Split(string(body), "\n") {
			for _, name := range []string{"tandem_redis_published_total", "tandem_redis_dropped_total"} {
				if v, ok := strings.CutPrefix(line, name+" "); ok {
					counts = append(counts, strings.TrimPrefix(strings.TrimSuffix(name, "_total"), "tandem_redis_")+" "+v)
				}
			}
		}
		fmt.Printf("  %s's bus: %s\n", node.name, strings.Join(counts, ", "))
	}
}

func presenceOf(base, doc string) ([]string, error) {
	c := http.Client{Timeout: 2 * time.Second}
	res, err := c.Get(base + "/api/docs/" + doc + "/presence")
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	var body struct {
		Peers []struct {
			PeerID string `json:"peerId"`
		} `json:"peers"`
	}
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
		return nil, err
	}
	ids := make([]string, len(body.Peers))
	for i, p := range body.Peers {
		ids[i] = p.PeerID
	}
	return ids, nil
}

// missingAcked returns the keys of the edits the peers saw acknowledged
// that d lacks or holds with another value, sorted.
func missingAcked(d *automerge.Doc, peers []*soakPeer) []string {
	var missing []string
	for _, p := range peers {
		for key, want := range p.acked {
			if v, err := d.RootMap().Get(key); err != nil || v.Kind() != automerge.KindInt64 || v.Int64() != want {
				missing = append(missing, key)
			}
		}
	}
	slices.Sort(missing)
	return missing
}

// someKeys names a few of keys, for a report.
func someKeys(keys []string) string {
	if len(keys) > 5 {
		return strings.Join(keys[:5], " ") + " …"
	}
	return strings.Join(keys, " ")
}

// verifyStore reads every document from PostgreSQL, as a node starting
// afresh would, and counts acknowledged edits missing or wrong there: the
// nodes may still hold in memory what the store lost.
func (s *soak) verifyStore(ctx context.Context, postgresURL string) (lost int, err error) {
	st, err := store.OpenPostgres(ctx, postgresURL)
	if err != nil {
		return 0, err
	}
	defer st.Close()
	byDoc := map[string][]*soakPeer{}
	for _, p := range s.peers {
		byDoc[p.doc] = append(byDoc[p.doc], p)
	}
	for id, peers := range byDoc {
		stored, err := st.Load(ctx, id)
		if err != nil {
			return 0, fmt.Errorf("load %s from PostgreSQL: %w", id, err)
		}
		d := automerge.New()
		for _, chunk := range append([][]byte{stored.Snapshot}, stored.Chunks...) {
			if chunk != nil {
				if err := d.LoadIncremental(chunk); err != nil {
					return 0, fmt.Errorf("load %s from PostgreSQL: %w", id, err)
				}
			}
		}
		missing := missingAcked(d, peers)
		if len(missing) > 0 {
			fmt.Printf("  %s in PostgreSQL: %d acknowledged edits missing: %s\n", id, len(missing), someKeys(missing))
		}
		lost += len(missing)
	}
	return lost, nil
}

// verify reads every document from every node with a fresh client and
// counts acknowledged edits missing or wrong, documents that do not load
// again, and documents whose heads still differ between nodes after
// three reads 2 s apart: a node may hold changes it has not stored yet
// (waiting for a dependency that another node stored), and stores them
// once a read brings it the dependency; another node reads them at its
// next read. Acknowledged edits count at the first read.
func (s *soak) verify() (lost, damaged, diverged int, err error) {
	byDoc := map[string][]*soakPeer{}
	for _, p := range s.peers {
		byDoc[p.doc] = append(byDoc[p.doc], p)
	}
	for doc, peers := range byDoc {
		var heads []string
		for pass := 0; pass < 3; pass++ {
			if pass > 0 {
				time.Sleep(2 * time.Second)
			}
			heads = heads[:0]
			for i, node := range s.nodes {
				if !s.nodeUp[i].Load() {
					continue // crashed: reported as such
				}
				d, err := fetchDoc(node.url, doc)
				if err != nil {
					return 0, 0, 0, fmt.Errorf("read %s from %s: %w", doc, node.name, err)
				}
				if pass == 0 {
					if _, err := automerge.Load(d.Save()); err != nil {
						damaged++
					}
					missing := missingAcked(d, peers)
					if len(missing) > 0 {
						fmt.Printf("  %s on %s: %d acknowledged edits missing: %s\n", doc, node.name, len(missing), someKeys(missing))
					}
					lost += len(missing)
				}
				hs := d.Heads()
				ss := make([]string, len(hs))
				for i, h := range hs {
					ss[i] = h.String()
				}
				slices.Sort(ss)
				heads = append(heads, strings.Join(ss, ","))
			}
			if !slices.ContainsFunc(heads, func(h string) bool { return h != heads[0] }) {
				break
			}
			fmt.Printf("  %s: heads differ between nodes at read %d: %v\n", doc, pass+1, heads)
		}
		if slices.ContainsFunc(heads, func(h string) bool { return h != heads[0] }) {
			diverged++
		}
	}
	return lost, damaged, diverged, nil
}

// fetchDoc syncs a document from a node into a new automerge document,
// until the node has had nothing to add for a second.
func fetchDoc(url, doc string) (*automerge.Doc, error) {
	ws, _, err := websocket.DefaultDialer.Dial(url, nil)
	if err != nil {
		return nil, err
	}
	defer ws.Close()
	id := "soak-verifier-" + newDocID()[:8]
	if err := joinAs(ws, id); err != nil {
		return nil, err
	}
	d := automerge.New()
	state := automerge.NewSyncState(d)
	typ := wire.TypeRequest
	for {
		if m, ok := state.GenerateMessage(); ok {
			b, _ := wire.Encode(&wire.Message{Type: typ, SenderID: id, DocumentID: doc, Data: m.Bytes()})
			if err := ws.WriteMessage(websocket.BinaryMessage, b); err != nil {
				return nil, err
			}
			typ = wire.TypeSync
		}
		ws.SetReadDeadline(time.Now().Add(time.Second))
		_, b, err := ws.ReadMessage()
		if err != nil {
			var ne interface{ Timeout() bool }
			if errors.As(err, &ne) && ne.Timeout() && len(d.Heads()) > 0 {
				return d, nil
			}
			return nil, err
		}
		m, err := wire.Decode(b)
		if err != nil {
			return nil, err
		}
		switch m.Type {
		case wire.TypeSync:
			if _, err := state.ReceiveMessage(m.Data); err != nil {
				return nil, err
			}
		case wire.TypeDocUnavailable:
			return nil, errors.New("document unavailable")
		}
	}
}
