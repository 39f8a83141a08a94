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
	peers  map[int]*State
	queued map[Hash]amcheck.Change
	raw    map[Hash][]byte
	from   map[Hash]int // who sent a queued change
}

func newGoServer(t testing.TB) *goServer {
	return &goServer{t: t, log: NewLog(), peers: map[int]*State{}, queued: map[Hash]amcheck.Change{}, raw: map[Hash][]byte{}, from: map[Hash]int{}}
}

func (s *goServer) peer(i int) *State {
	if s.peers[i] == nil {
		s.peers[i] = NewState()
	}
	return s.peers[i]
}

// add admits changes from a peer (-1: preloaded), holding back those
// whose dependencies are missing, and adds whatever became ready.
func (s *goServer) add(peer int, changes [][]byte) {
	changes = expandDocuments(s.t, changes)
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
		s.from[c.Hash] = peer
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
			delete(s.from, h)
			progress = true
		}
	}
}

// expandDocuments replaces each document chunk among a message's chunks
// by its changes (read with automerge-go, as a room reads them with
// doc/amdoc).
func expandDocuments(t testing.TB, chunks [][]byte) [][]byte {
	var out [][]byte
	for _, b := range chunks {
		if len(b) < 9 || b[8] != 0 {
			out = append(out, b)
			continue
		}
		d, err := automerge.Load(b)
		if err != nil {
			t.Fatalf("a peer sent a document that does not load: %v", err)
		}
		cs, err := d.Changes()
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			out = append(out, c.Save())
		}
	}
	return out
}

// waitingFor returns the dependencies the changes peer sent wait for: a
// room asks only the peer that sent them, the one that has them.
func (s *goServer) waitingFor(peer int) []Hash {
	var need []Hash
	for h, c := range s.queued {
		if s.from[h] != peer {
			continue
		}
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
	if !m.HasFlags && !bytes.Equal(m.Encode(), append(slices.Clip(msg), ourFlags...)) {
		s.t.Fatalf("a peer's message does not encode back to its bytes")
	}
	before := s.log.Heads()
	s.add(i, m.Changes)
	s.peer(i).Receive(s.log, m, before)
}

func (s *goServer) generate(i int, now time.Time) []byte {
	out := s.peer(i).Generate(s.log, s.waitingFor(i), func(h Hash) bool { _, ok := s.queued[h]; return ok }, now)
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
	s.add(-1, raw)
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

// peerDoc is a peer's document with its sync state toward the server.
type peerDoc interface {
	edit()
	generate() []byte // nil if nothing to send
	receive(msg []byte)
	heads() []Hash
}

// peerMaker makes the scenario's peers: one holding base (changes of the
// server's history, saved), then edits changes of its own.
type peerMaker func(id int, base [][]byte, edits int) peerDoc

// goPeer is an automerge-go peer.
type goPeer struct {
	t     testing.TB
	doc   *automerge.Doc
	state *automerge.SyncState
	made  *int
}

func goPeers(t testing.TB) peerMaker {
	made := 0
	return func(_ int, base [][]byte, edits int) peerDoc {
		p := &goPeer{t: t, doc: automerge.New(), made: &made}
		for _, c := range base {
			if err := p.doc.LoadIncremental(c); err != nil {
				t.Fatal(err)
			}
		}
		for range edits {
			p.edit()
		}
		p.state = automerge.NewSyncState(p.doc)
		return p
	}
}

func (p *goPeer) edit() {
	*p.made++
	if err := p.doc.Path(fmt.Sprintf("k%d", *p.made%20)).Set(*p.made); err != nil {
		p.t.Fatal(err)
	}
	if _, err := p.doc.Commit("edit"); err != nil {
		p.t.Fatal(err)
	}
}

func (p *goPeer) generate() []byte {
	if m, ok := p.state.GenerateMessage(); ok {
		return m.Bytes()
	}
	return nil
}

func (p *goPeer) receive(msg []byte) {
	if _, err := p.state.ReceiveMessage(msg); err != nil {
		p.t.Fatalf("automerge-go peer: %v", err)
	}
}

func (p *goPeer) heads() []Hash { return hashesOf(p.doc.Heads()) }

// run plays the scenario against s with peers made by mk and returns
// the messages it took. Every peer must end with every change made
// anywhere, and at the server's heads.
func (sc scenario) run(t testing.TB, s server, mk peerMaker) (messages int) {
	rng := rand.New(rand.NewPCG(sc.seed, 1))
	base := automerge.New()
	for i := range sc.base {
		if err := base.Path(fmt.Sprintf("b%d", i%20)).Set(i); err != nil {
			t.Fatal(err)
		}
		if _, err := base.Commit("base"); err != nil {
			t.Fatal(err)
		}
	}
	baseChanges, err := base.Changes()
	if err != nil {
		t.Fatal(err)
	}
	s.preload(baseChanges)

	peers := make([]peerDoc, sc.peers)
	for i := range peers {
		var prefix [][]byte
		edits := 0
		if rng.IntN(2) == 0 { // a stale peer, with edits of its own
			for _, c := range baseChanges[:rng.IntN(len(baseChanges)+1)] {
				prefix = append(prefix, c.Save())
			}
			edits = rng.IntN(3)
		}
		peers[i] = mk(i, prefix, edits)
	}

	type wire struct {
		to   int // -1: the server; else the peer
		from int
		data []byte
	}
	var inflight []wire
	now := time.Unix(0, 0)
	send := func(w wire) {
		if w.data != nil {
			inflight = append(inflight, w)
			messages++
		}
	}
	peerSends := func(i int) { send(wire{to: -1, from: i, data: peers[i].generate()}) }
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
			peers[i].edit()
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
			peers[w.to].receive(w.data)
			peerSends(w.to)
		}
	}
	for i, p := range peers {
		if !slices.Equal(p.heads(), s.heads()) {
			t.Fatalf("seed %d: peer %d ends at other heads than the server", sc.seed, i)
		}
	}
	return messages
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
		n := sc.run(t, gs, goPeers(t))
		m := sc.run(t, as, goPeers(t))
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
