package amsync

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/automerge/automerge-go"

	"github.com/tandemhq/tandem/doc/amcheck"
)

// The differential tests: a server speaking this package's sync over a
// Log, and one that is an automerge-go document with automerge's own sync
// states, each syncing the same peers (automerge-go documents) through
// the same random schedule of edits and deliveries. Each must bring every
// peer and itself to the same heads, holding every change made anywhere;
// the Go server must not need more messages.

// server is one side of the comparison.
type server interface {
	receive(peer int, msg []byte)
	generate(peer int, now time.Time) []byte // nil if nothing to send
	heads() []Hash
	preload(changes []*automerge.Change)
}

// goServer is this package's engine, holding back changes whose
// dependencies it lacks, as a room's guard does.
type goServer struct {
	t      testing.TB
	log    *Log
	peers  map[int]*Peer
	queued map[Hash]amcheck.Change
	raw    map[Hash][]byte
}

func newGoServer(t testing.TB) *goServer {
	return &goServer{t: t, log: NewLog(), peers: map[int]*Peer{}, queued: map[Hash]amcheck.Change{}, raw: map[Hash][]byte{}}
}

func (s *goServer) peer(i int) *Peer {
	if s.peers[i] == nil {
		s.peers[i] = NewPeer()
	}
	return s.peers[i]
}

// add admits changes, holding back those whose dependencies are missing,
// and adds whatever became ready.
func (s *goServer) add(changes [][]byte) {
	for _, b := range changes {
		c, err := amcheck.ParseSyncChange(b, amcheck.Limits{})
		if err != nil {
			s.t.Fatalf("a peer sent an unreadable change: %v", err)
		}
		if s.log.Has(c.Hash) {
			continue
		}
		s.queued[c.Hash] = c
		s.raw[c.Hash] = b
	}
	for progress := true; progress; {
		progress = false
		for h, c := range s.queued {
			deps := make([]Hash, len(c.Deps))
			for i, d := range c.Deps {
				deps[i] = d
			}
			if len(s.log.Missing(deps)) > 0 {
				continue
			}
			if _, err := s.log.Add(h, deps, s.raw[h]); err != nil {
				s.t.Fatal(err)
			}
			delete(s.queued, h)
			delete(s.raw, h)
			progress = true
		}
	}
}

func (s *goServer) waitingFor() []Hash {
	var need []Hash
	for _, c := range s.queued {
		for _, d := range c.Deps {
			if _, q := s.queued[d]; !q && !s.log.Has(d) {
				need = append(need, d)
			}
		}
	}
	return need
}

func (s *goServer) receive(i int, msg []byte) {
	m, err := Decode(msg)
	if err != nil {
		s.t.Fatalf("decode a peer's message: %v", err)
	}
	if !m.HasFlags && !bytes.Equal(m.Encode(), msg) {
		s.t.Fatalf("a peer's message does not encode back to its bytes")
	}
	before := s.log.Heads()
	s.add(m.Changes)
	s.peer(i).Receive(s.log, m, before)
}

func (s *goServer) generate(i int, now time.Time) []byte {
	out := s.peer(i).Generate(s.log, s.waitingFor(), now)
	if out == nil {
		return nil
	}
	return out.Encode()
}

func (s *goServer) heads() []Hash { return s.log.Heads() }

func (s *goServer) preload(cs []*automerge.Change) {
	var raw [][]byte
	for _, c := range cs {
		raw = append(raw, c.Save())
	}
	s.add(raw)
}

// amServer is automerge-go's own sync.
type amServer struct {
	t      testing.TB
	doc    *automerge.Doc
	states map[int]*automerge.SyncState
}

func newAMServer(t testing.TB) *amServer {
	return &amServer{t: t, doc: automerge.New(), states: map[int]*automerge.SyncState{}}
}

func (s *amServer) state(i int) *automerge.SyncState {
	if s.states[i] == nil {
		s.states[i] = automerge.NewSyncState(s.doc)
	}
	return s.states[i]
}

func (s *amServer) receive(i int, msg []byte) {
	if _, err := s.state(i).ReceiveMessage(msg); err != nil {
		s.t.Fatalf("automerge server: %v", err)
	}
}

func (s *amServer) generate(i int, _ time.Time) []byte {
	m, ok := s.state(i).GenerateMessage()
	if !ok {
		return nil
	}
	return m.Bytes()
}

func (s *amServer) heads() []Hash { return hashesOf(s.doc.Heads()) }

func (s *amServer) preload(cs []*automerge.Change) {
	if err := s.doc.Apply(cs...); err != nil {
		s.t.Fatal(err)
	}
}

func hashesOf(hs []automerge.ChangeHash) []Hash {
	out := make([]Hash, len(hs))
	for i, h := range hs {
		out[i] = Hash(h)
	}
	sortHashes(out)
	return out
}

// scenario is a random history: a base document the server holds, peers
// that start from nothing or from a stale fork of it with edits of their
// own, and edits made while they sync.
type scenario struct {
	seed               uint64
	peers, base, edits int
}

type testPeer struct {
	doc   *automerge.Doc
	state *automerge.SyncState
}

type wire struct {
	to   int // -1: the server; else the peer
	from int
	data []byte
}

// run plays the scenario against s and returns the messages it took and
// the peers' final heads.
func (sc scenario) run(t testing.TB, s server) (messages int, peerHeads [][]Hash) {
	rng := rand.New(rand.NewPCG(sc.seed, 1))
	made := 0
	edit := func(d *automerge.Doc, n int) {
		for range n {
			made++
			key := fmt.Sprintf("k%d", rng.IntN(20))
			if err := d.Path(key).Set(made); err != nil {
				t.Fatal(err)
			}
			if _, err := d.Commit("edit"); err != nil {
				t.Fatal(err)
			}
		}
	}
	base := automerge.New()
	var forks []*automerge.Doc
	for range sc.base {
		edit(base, 1)
		if rng.IntN(4) == 0 {
			f, err := base.Fork()
			if err != nil {
				t.Fatal(err)
			}
			forks = append(forks, f)
		}
	}
	baseChanges, err := base.Changes()
	if err != nil {
		t.Fatal(err)
	}
	s.preload(baseChanges)

	peers := make([]*testPeer, sc.peers)
	for i := range peers {
		d := automerge.New()
		if len(forks) > 0 && rng.IntN(2) == 0 {
			var err error
			if d, err = forks[rng.IntN(len(forks))].Fork(); err != nil {
				t.Fatal(err)
			}
			edit(d, rng.IntN(3))
		}
		peers[i] = &testPeer{doc: d, state: automerge.NewSyncState(d)}
	}

	var inflight []wire
	now := time.Unix(0, 0)
	send := func(w wire) {
		if w.data != nil {
			inflight = append(inflight, w)
			messages++
		}
	}
	peerSends := func(i int) {
		if m, ok := peers[i].state.GenerateMessage(); ok {
			send(wire{to: -1, from: i, data: m.Bytes()})
		}
	}
	serverSends := func() {
		for i := range peers {
			send(wire{to: i, data: s.generate(i, now)})
		}
	}
	for i := range peers {
		peerSends(i) // a peer opens the conversation, as a client does
	}
	editsLeft := sc.edits
	for round := 0; ; round++ {
		if round > 100_000 {
			t.Fatalf("seed %d: no quiescence after %d rounds", sc.seed, round)
		}
		now = now.Add(time.Millisecond)
		if editsLeft > 0 && rng.IntN(3) == 0 {
			i := rng.IntN(len(peers))
			edit(peers[i].doc, 1)
			editsLeft--
			peerSends(i)
			continue
		}
		if len(inflight) == 0 {
			if editsLeft > 0 {
				continue
			}
			// Quiet: a paced server sends what it held back.
			now = now.Add(2 * AnswerWait)
			serverSends()
			if len(inflight) == 0 {
				break
			}
			continue
		}
		// Deliver a message; each direction stays in order.
		k := rng.IntN(len(inflight))
		for j := range k {
			if inflight[j].to == inflight[k].to && inflight[j].from == inflight[k].from {
				k = j
				break
			}
		}
		w := inflight[k]
		inflight = slices.Delete(inflight, k, k+1)
		if w.to == -1 {
			s.receive(w.from, w.data)
			serverSends()
		} else {
			if _, err := peers[w.to].state.ReceiveMessage(w.data); err != nil {
				t.Fatalf("seed %d: peer %d: %v", sc.seed, w.to, err)
			}
			peerSends(w.to)
		}
	}
	all := automerge.New()
	if err := all.Apply(baseChanges...); err != nil {
		t.Fatal(err)
	}
	for _, p := range peers {
		peerHeads = append(peerHeads, hashesOf(p.doc.Heads()))
		if _, err := all.Merge(p.doc); err != nil {
			t.Fatal(err)
		}
	}
	// Every change made anywhere is everywhere.
	want := hashesOf(all.Heads())
	if !slices.Equal(s.heads(), want) {
		t.Fatalf("seed %d: the server lacks changes", sc.seed)
	}
	for i, h := range peerHeads {
		if !slices.Equal(h, want) {
			t.Fatalf("seed %d: peer %d lacks changes", sc.seed, i)
		}
	}
	return messages, peerHeads
}

func TestTheGoSyncConvergesAsAutomergeDoes(t *testing.T) {
	rounds := 60
	if testing.Short() {
		rounds = 15
	}
	var ours, theirs int
	for seed := range uint64(rounds) {
		sc := scenario{seed: seed, peers: 2 + int(seed%4), base: int(seed*7) % 60, edits: 10 + int(seed*13)%90}
		gs, as := newGoServer(t), newAMServer(t)
		n, _ := sc.run(t, gs)
		m, _ := sc.run(t, as)
		if len(gs.queued) > 0 {
			t.Fatalf("seed %d: %d changes still wait for their dependencies", seed, len(gs.queued))
		}
		ours += n
		theirs += m
		t.Logf("seed %d: %d messages, automerge %d", seed, n, m)
	}
	t.Logf("all: %d messages, automerge %d", ours, theirs)
	if ours > theirs {
		t.Fatalf("the Go server took %d messages, automerge's %d", ours, theirs)
	}
}
