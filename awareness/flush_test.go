package awareness

import (
	"sync"
	"testing"
)

// flushPeer is a Flusher that notes what it is told and takes in
// PresenceFlush, as a connection does, and records the order of the calls
// in a log it shares with the other peers of its test.
type flushPeer struct {
	fakePeer
	log  *callLog
	told []*Feed
}

type callLog struct {
	mu    sync.Mutex
	calls []string
}

func (l *callLog) add(s string) {
	l.mu.Lock()
	l.calls = append(l.calls, s)
	l.mu.Unlock()
}

func (p *flushPeer) PresenceReady(f *Feed) {
	p.log.add("ready " + p.id)
	p.told = append(p.told, f)
}

func (p *flushPeer) PresenceFlush() {
	p.log.add("flush " + p.id)
	for _, f := range p.told {
		p.record(f.Document(), f.Take(p))
	}
	p.told = nil
}

// The members a post concerns are all told before any of them takes: a
// Flusher writes once its whole group has been told, and takes what was
// posted for it by then.
func TestFlushersTakeOnceTheirGroupIsTold(t *testing.T) {
	f := newFixture(t)
	log := &callLog{}
	peers := []*flushPeer{{fakePeer: fakePeer{id: "a"}, log: log}, {fakePeer: fakePeer{id: "b"}, log: log}, {fakePeer: fakePeer{id: "c"}, log: log}}
	for _, p := range peers {
		f.update(p, "cursor", 0)
	}
	f.hub.Tick() // a new period: the next move is a leading edge, forwarded at once
	for _, p := range peers {
		p.take()
	}
	log.calls = nil
	f.update(peers[0], "cursor", 1)
	want := []string{"ready b", "ready c", "flush b", "flush c"}
	if got := log.calls; len(got) != len(want) || !(got[0][:5] == "ready" && got[1][:5] == "ready" && got[2][:5] == "flush" && got[3][:5] == "flush") {
		t.Fatalf("calls %q, want every ready before any flush: %q in some order", got, want)
	}
	for _, p := range peers[1:] {
		got := p.take()
		if len(got) != 1 || got[0].body.Type != TypeUpdate {
			t.Fatalf("%s took %+v, want a's update", p.id, got)
		}
	}
}

// A peer that is no Flusher takes in PresenceReady, as before: nothing
// waits for it.
func TestAPeerThatIsNoFlusherTakesAtOnce(t *testing.T) {
	f := newFixture(t)
	a, b := &fakePeer{id: "a"}, &fakePeer{id: "b"}
	f.update(a, "cursor", 0)
	f.update(b, "cursor", 0)
	f.hub.Tick()
	a.take()
	b.take()
	f.update(a, "cursor", 1)
	if got := b.take(); len(got) != 1 {
		t.Fatalf("b took %d messages at once, want a's update", len(got))
	}
}
