package amsync

import (
	"crypto/sha256"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/automerge/automerge-go"
)

// The cost model must not cost honest peers: these are what a stock
// client does that the bounds could get wrong.

// A client that synced before (automerge-repo keeps its sync state with a
// storage server), edits offline and reconnects sends its edit, not its
// document: the server's have entry is a filter of what came since the
// client's last sync point. With the filter left out for want of work,
// the client read "the server holds nothing" and sent every change.
func TestAPeerBackWithAnOfflineEditSendsOnlyIt(t *testing.T) {
	base := automerge.New()
	for i := range 3000 {
		if err := base.Path(fmt.Sprintf("b%d", i%20)).Set(i); err != nil {
			t.Fatal(err)
		}
		if _, err := base.Commit("base"); err != nil {
			t.Fatal(err)
		}
	}
	cs, err := base.Changes()
	if err != nil {
		t.Fatal(err)
	}
	s := newGoServer(t)
	s.preload(cs)
	doc := automerge.New()
	for _, c := range cs {
		if err := doc.LoadIncremental(c.Save()); err != nil {
			t.Fatal(err)
		}
	}
	exchange := func(peer int, st *automerge.SyncState) (up int) {
		now := time.Unix(0, 0)
		for range 20 {
			var mb []byte
			if m, ok := st.GenerateMessage(); ok {
				mb = m.Bytes()
				up += len(mb)
				s.receive(peer, mb)
			}
			now = now.Add(2 * AnswerWait)
			o := s.generate(peer, now)
			if o != nil {
				if _, err := st.ReceiveMessage(o); err != nil {
					t.Fatal(err)
				}
			}
			if mb == nil && o == nil {
				break
			}
		}
		return up
	}
	st := automerge.NewSyncState(doc)
	exchange(0, st)
	saved := st.Save()
	if err := doc.Path("offline").Set(1); err != nil {
		t.Fatal(err)
	}
	if _, err := doc.Commit("offline"); err != nil {
		t.Fatal(err)
	}
	st2, err := automerge.LoadSyncState(doc, saved)
	if err != nil {
		t.Fatal(err)
	}
	if up := exchange(1, st2); up > 8<<10 { // a new connection: a new state on the server
		t.Fatalf("the client sent %d bytes to bring back one change", up)
	}
	if !s.log.Has(Hash(doc.Heads()[0])) {
		t.Fatal("the offline change did not arrive")
	}
}

// Messages the server holds its answer to (Spacing) pay for what working
// them out costs: bare messages within the spacing, each a little
// different, worked out a 100,000-change document each, for nothing.
func TestMessagesHeldBySpacingPayForThemselves(t *testing.T) {
	const n = 100_000
	l := typedLog(n)
	p := NewState()
	p.Spacing = 100 * time.Millisecond
	now := time.Now()
	var a account
	a.message(t, p, l, &Message{Heads: l.Heads(), Have: []Have{{LastSync: l.Heads()}}}, now)
	h := sha256.Sum256([]byte("one more"))
	deps := l.Heads()
	if _, err := l.Add(h, deps, typedChange(h, deps)); err != nil {
		t.Fatal(err)
	}
	if out := p.Generate(l, nil, nil, now); out == nil || len(out.Indices) != 1 {
		t.Fatal("the new change was not sent")
	}
	for i := range 50 {
		m := &Message{Need: unheardHashes(1, i), Have: []Have{{}}}
		if out := a.message(t, p, l, m, now.Add(time.Millisecond)); out != nil && len(out.Indices) > 0 {
			t.Fatalf("message %d was answered within the spacing", i)
		}
	}
}

// A peer that named many heads the log lacks costs a look at each change
// the log takes after, not a look at each of its heads per answer.
func TestUnknownHeadsAreNotLookedUpAgainPerAnswer(t *testing.T) {
	l := typedLog(1000)
	p := NewState()
	receive(t, p, l, &Message{Heads: unheardHashes(MaxHeads, 1), Have: []Have{{LastSync: l.Heads()}}})
	p.Generate(l, nil, nil, time.Now())
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const answers = 100
	for i := range answers {
		h := sha256.Sum256([]byte{byte(i), byte(i >> 8), 'u'})
		deps := l.Heads()
		if _, err := l.Add(h, deps, typedChange(h, deps)); err != nil {
			t.Fatal(err)
		}
		p.Generate(l, nil, nil, time.Now().Add(time.Duration(i+1)*time.Hour))
	}
	runtime.ReadMemStats(&after)
	// A change, its answer, and the log growing: some kilobytes; a set
	// of 10,000 heads is hundreds.
	if per := (after.TotalAlloc - before.TotalAlloc) / answers; per > 32<<10 {
		t.Fatalf("each answer allocated %d bytes", per)
	}
}

// Once a peer's heads say what it lacks, the filter of the log's changes
// made for it while they did not is let go.
func TestALevelPeerKeepsNoFilter(t *testing.T) {
	const n = 100_000
	l := typedLog(n)
	own := sha256.Sum256([]byte("own change"))
	held := make([]Hash, 0, n+1)
	for i := range int32(n) {
		held = append(held, l.HashAt(i))
	}
	held = append(held, own)
	b := NewBloom(len(held), func(i int) Hash { return held[i] })
	p := NewState()
	receive(t, p, l, &Message{Heads: []Hash{own}, Have: []Have{{Bloom: b.Encode()}}})
	if out := p.Generate(l, nil, nil, time.Now()); out == nil || len(out.Have) != 1 || len(out.Have[0].Bloom) == 0 {
		t.Fatal("the peer was not sent a filter of the log")
	}
	deps := l.Heads()
	before := l.Heads()
	if _, err := l.Add(own, deps, typedChange(own, deps)); err != nil {
		t.Fatal(err)
	}
	p.Receive(l, &Message{Heads: l.Heads(), Have: []Have{{LastSync: deps}}, Changes: [][]byte{typedChange(own, deps)}}, before)
	p.Generate(l, nil, nil, time.Now().Add(time.Hour))
	if kept := p.Kept(); kept > 4096 {
		t.Fatalf("a level peer's state keeps %d bytes", kept)
	}
}
