package amsync

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/automerge/automerge-go"
)

// jsAutomerge is a node process holding stock automerge peers
// (testdata/js-peers.mjs), one per test that asks.
type jsAutomerge struct {
	t   testing.TB
	in  *json.Encoder
	out *bufio.Scanner
}

func startJS(t testing.TB) *jsAutomerge {
	cmd := exec.Command("node", "testdata/js-peers.mjs")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("stock automerge (node testdata/js-peers.mjs; run npm ci first): %v", err)
	}
	t.Cleanup(func() {
		in.Close()
		cmd.Wait()
	})
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 256<<20)
	return &jsAutomerge{t: t, in: json.NewEncoder(in), out: sc}
}

type jsAnswer struct {
	Msg   *string  `json:"msg"`
	Heads []string `json:"heads"`
	Err   string   `json:"err"`
}

func (j *jsAutomerge) call(req map[string]any) jsAnswer {
	j.t.Helper()
	if err := j.in.Encode(req); err != nil {
		j.t.Fatalf("stock automerge: %v", err)
	}
	if !j.out.Scan() {
		j.t.Fatalf("stock automerge exited: %v", j.out.Err())
	}
	var a jsAnswer
	if err := json.Unmarshal(j.out.Bytes(), &a); err != nil {
		j.t.Fatal(err)
	}
	if a.Err != "" {
		j.t.Fatalf("stock automerge: %s", a.Err)
	}
	return a
}

// jsPeers makes the scenario's peers in stock automerge.
func (j *jsAutomerge) peers() peerMaker {
	next := 0
	return func(_ int, base [][]byte, edits int) peerDoc {
		next++
		id := next
		b := make([]string, len(base))
		for i, c := range base {
			b[i] = base64.StdEncoding.EncodeToString(c)
		}
		j.call(map[string]any{"op": "peer", "id": id, "base": b, "edits": edits})
		return &jsPeer{j: j, id: id}
	}
}

type jsPeer struct {
	j  *jsAutomerge
	id int
}

func (p *jsPeer) edit() { p.j.call(map[string]any{"op": "edit", "id": p.id}) }

func (p *jsPeer) generate() []byte {
	a := p.j.call(map[string]any{"op": "gen", "id": p.id})
	if a.Msg == nil {
		return nil
	}
	b, err := base64.StdEncoding.DecodeString(*a.Msg)
	if err != nil {
		p.j.t.Fatal(err)
	}
	return b
}

func (p *jsPeer) receive(msg []byte) {
	p.j.call(map[string]any{"op": "recv", "id": p.id, "msg": base64.StdEncoding.EncodeToString(msg)})
}

func (p *jsPeer) heads() []Hash {
	a := p.j.call(map[string]any{"op": "heads", "id": p.id})
	out := make([]Hash, len(a.Heads))
	for i, h := range a.Heads {
		b, err := hex.DecodeString(h)
		if err != nil || len(b) != 32 {
			p.j.t.Fatalf("a head %q", h)
		}
		out[i] = Hash(b)
	}
	sortHashes(out)
	return out
}

// With stock automerge 3.5 peers (what automerge-repo clients run) the Go
// server converges as automerge-go's own sync does, in no more messages.
func TestTheGoSyncConvergesWithStockAutomergePeers(t *testing.T) {
	rounds := 40
	if testing.Short() {
		rounds = 10
	}
	js := startJS(t)
	var ours, theirs int
	for seed := range uint64(rounds) {
		sc := scenario{seed: 1000 + seed, peers: 2 + int(seed%4), base: int(seed*7) % 60, edits: 10 + int(seed*13)%90}
		gs, as := newGoServer(t), newAMServer(t)
		n := sc.run(t, gs, js.peers())
		m := sc.run(t, as, js.peers())
		ours += n
		theirs += m
		t.Logf("seed %d: %d messages, automerge-go %d", sc.seed, n, m)
	}
	t.Logf("all: %d messages, automerge-go %d", ours, theirs)
	if ours > theirs {
		t.Fatalf("the Go server took %d messages, automerge-go's %d", ours, theirs)
	}
}

// editedChanges returns the n changes of an automerge-go document edited
// n times.
func editedChanges(t testing.TB, n int) []*automerge.Change {
	t.Helper()
	doc := automerge.New()
	for i := range n {
		if err := doc.Path(fmt.Sprintf("k%d", i%7)).Set(i); err != nil {
			t.Fatal(err)
		}
		if _, err := doc.Commit("edit"); err != nil {
			t.Fatal(err)
		}
	}
	changes, err := doc.Changes()
	if err != nil {
		t.Fatal(err)
	}
	return changes
}

// A peer whose messages carry a flags section (automerge 0.6 and later,
// as stock JS 3.5) is sent its changes joined in one entry, which it
// decodes as one byte string instead of one per change, and takes them;
// a peer whose messages carry none (automerge-go 0.5) reads an entry as
// one change and is sent one entry per change.
func TestAPeerThatSendsFlagsGetsItsChangesInOneEntry(t *testing.T) {
	changes := editedChanges(t, 30)
	for _, tc := range []struct {
		name    string
		peers   peerMaker
		entries int
	}{
		{"stock automerge 3.5", startJS(t).peers(), 1},
		{"automerge-go 0.5", goPeers(t), len(changes)},
	} {
		s := newGoServer(t)
		s.preload(changes)
		p := tc.peers(0, nil, 0)
		s.receive(0, p.generate())
		msg := s.generate(0, time.Unix(0, 0))
		m, err := Decode(msg)
		if err != nil {
			t.Fatal(err)
		}
		if n := entryCount(t, msg); n != tc.entries || len(m.Changes) != len(changes) {
			t.Errorf("%s: sent %d changes in %d entries, want %d in %d", tc.name, len(m.Changes), n, len(changes), tc.entries)
		}
		if m.V2 != (tc.entries == 1) {
			t.Errorf("%s: a message of version 2: %v", tc.name, m.V2)
		}
		p.receive(msg)
		if got := p.heads(); !slices.Equal(got, s.heads()) {
			t.Errorf("%s: at %x after the message, want the server's %x", tc.name, got, s.heads())
		}
	}
}

// entryCount returns the number of entries of a message's changes.
func entryCount(t testing.TB, msg []byte) int {
	t.Helper()
	r := &reader{b: msg, off: 1}
	r.hashes()
	r.hashes()
	for range r.uvarint() {
		r.hashes()
		r.bytes(r.uvarint())
	}
	n := r.uvarint()
	if r.err != nil {
		t.Fatal(r.err)
	}
	return int(n)
}

// A peer that has nothing and reads a message's changes as one is sent
// the log's saved document in place of the changes it holds, then the
// changes since, and ends at the server's heads; a peer that reads one
// change per entry is sent the changes. So is a peer that has part of
// the document: the saved document is all or nothing.
func TestAFreshPeerIsSentTheSavedDocument(t *testing.T) {
	changes := editedChanges(t, 30)
	var first []byte
	for _, c := range changes[:20] {
		first = append(first, c.Save()...)
	}
	prefix, err := automerge.Load(first)
	if err != nil {
		t.Fatal(err)
	}
	saved := prefix.Save()
	js := startJS(t)
	for _, tc := range []struct {
		name  string
		peers peerMaker
		base  int  // changes the peer holds before
		saved bool // whether it is sent the saved document
	}{
		{"stock automerge 3.5, fresh", js.peers(), 0, true},
		{"stock automerge 3.5, holding some", js.peers(), 5, false},
		{"automerge-go 0.5, fresh", goPeers(t), 0, false},
	} {
		s := newGoServer(t)
		s.preload(changes)
		if err := s.log.SetSaved(19, saved); err == nil {
			t.Fatal("a saved document of 20 changes was taken as the first 19")
		}
		if err := s.log.SetSaved(20, saved); err != nil {
			t.Fatal(err)
		}
		var base [][]byte
		for _, c := range changes[:tc.base] {
			base = append(base, c.Save())
		}
		p := tc.peers(0, base, 0)
		for round := 0; ; round++ {
			msg := p.generate()
			if msg == nil {
				break
			}
			s.receive(0, msg)
			out := s.generate(0, time.Unix(int64(round), 0))
			if out == nil {
				break
			}
			m, err := Decode(out)
			if err != nil {
				t.Fatal(err)
			}
			if round == 0 {
				got := entryCount(t, out) == 1 && bytes.Equal(m.Changes[0], saved)
				if got != tc.saved {
					t.Errorf("%s: sent the saved document: %v, want %v", tc.name, got, tc.saved)
				}
			}
			p.receive(out)
		}
		if got := p.heads(); !slices.Equal(got, s.heads()) {
			t.Errorf("%s: at %x, want the server's %x", tc.name, got, s.heads())
		}
	}
}

// TestAStockPeerSendsUsVersion2 has a stock automerge 3.5 peer, holding a
// document the server lacks, read the server's flags section: it then
// sends version 2 messages, and the whole document saved, in one entry,
// as it does to a peer that has nothing and reads version 2; the server
// takes it (its changes) and ends at the peer's heads.
func TestAStockPeerSendsUsVersion2(t *testing.T) {
	changes := editedChanges(t, 30)
	var base [][]byte
	for _, c := range changes {
		base = append(base, c.Save())
	}
	s := newGoServer(t)
	p := startJS(t).peers()(0, base, 0)
	sawDocument := false
	for round := 0; round < 10; round++ {
		msg := p.generate()
		if msg == nil {
			break
		}
		m, err := Decode(msg)
		if err != nil {
			t.Fatal(err)
		}
		if round > 0 && !m.V2 {
			t.Errorf("round %d: the peer sent version 1 after our flags", round)
		}
		for _, c := range m.Changes {
			if c[8] == 0 {
				sawDocument = true
				if n := entryCount(t, msg); n != 1 {
					t.Errorf("the document came in %d entries", n)
				}
			}
		}
		s.receive(0, msg)
		out := s.generate(0, time.Unix(int64(round), 0))
		if out == nil {
			break
		}
		p.receive(out)
	}
	if !sawDocument {
		t.Error("the peer never sent its document saved")
	}
	if got := p.heads(); !slices.Equal(got, s.heads()) || s.log.Len() != len(changes) {
		t.Errorf("the server at %x with %d changes, want the peer's %x with %d", s.heads(), s.log.Len(), got, len(changes))
	}
}

// TestDecodeSplitsEntriesIntoChunks reads a version 2 message whose one
// entry holds change chunks one after another, and keeps an entry that
// does not split into whole chunks as it is.
func TestDecodeSplitsEntriesIntoChunks(t *testing.T) {
	changes := editedChanges(t, 3)
	var joined []byte
	for _, c := range changes {
		joined = append(joined, c.Save()...)
	}
	for _, tc := range []struct {
		name  string
		entry []byte
		want  int
	}{
		{"joined", joined, 3},
		{"cut short", joined[:len(joined)-1], 1},
	} {
		msg := (&Message{V2: true, Changes: [][]byte{tc.entry}}).Encode()
		if msg[0] != MessageV2 || !bytes.HasSuffix(msg, ourFlags) {
			t.Fatalf("%s: encoded as %x…%x", tc.name, msg[:1], msg[len(msg)-2:])
		}
		m, err := Decode(msg)
		if err != nil {
			t.Fatal(err)
		}
		if !m.V2 || !m.HasFlags || len(m.Changes) != tc.want || !bytes.Equal(bytes.Join(m.Changes, nil), tc.entry) {
			t.Errorf("%s: read %d chunks (v2 %v, flags %v), want %d", tc.name, len(m.Changes), m.V2, m.HasFlags, tc.want)
		}
	}
}
