package awareness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tandemhq/tandem/internal/testenv"
)

const doc1 = "2gzyVEWRbEhwBcRvStKvD3gBE5pp"

// fakeClock is a hand-driven clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// received is one presence message a fake peer got.
type received struct {
	doc  string
	msg  Message
	body presenceMessage
}

type fakePeer struct {
	id  string
	tmu sync.Mutex // held while taking and recording, as a connection's one writer does
	mu  sync.Mutex
	got []received
}

func (p *fakePeer) ID() string { return p.id }

// PresenceReady takes what the feed has at once, as a connection whose
// writer is idle does.
func (p *fakePeer) PresenceReady(f *Feed) {
	p.tmu.Lock()
	defer p.tmu.Unlock()
	p.record(f.Document(), f.Take(p))
}

// record keeps what a take delivered.
func (p *fakePeer) record(doc string, d Delivery) {
	if d.Batch != nil {
		panic("a peer that takes no batches was sent one")
	}
	for _, m := range d.Messages {
		p.SendPresence(doc, m)
	}
}

func (p *fakePeer) SendPresence(doc string, m Message) {
	var env envelope
	if err := cbor.Unmarshal(m.Data, &env); err != nil || env.Presence == nil {
		panic("hub sent a payload that is not presence")
	}
	p.mu.Lock()
	p.got = append(p.got, received{doc, m, *env.Presence})
	p.mu.Unlock()
}

func (p *fakePeer) take() []received {
	p.mu.Lock()
	defer p.mu.Unlock()
	g := p.got
	p.got = nil
	return g
}

var _ LastSeenStore = (*testenv.MemoryLastSeen)(nil)

type fixture struct {
	t     *testing.T
	hub   *Hub
	clock *fakeClock
	seen  *testenv.MemoryLastSeen
	count map[string]uint64
}

// newHub is New for a test, which fails if cfg is refused.
func newHub(t testing.TB, cfg Config) *Hub {
	t.Helper()
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func newFixture(t *testing.T) *fixture {
	clock := &fakeClock{now: time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)}
	seen := &testenv.MemoryLastSeen{}
	h := newHub(t, Config{
		Now: clock.Now, LastSeen: seen, RelaySession: "relay",
		Logger: testenv.QuietLogger(),
	})
	h.tellAtOnce = 1 << 30 // every member is told before the hub's call returns
	return &fixture{t: t, hub: h, clock: clock, seen: seen, count: map[string]uint64{}}
}

// send delivers a presence message from p with its next clock.
func (f *fixture) send(p Peer, m presenceMessage) {
	f.t.Helper()
	f.count[p.ID()]++
	data, err := cbor.Marshal(map[string]any{"__presence": m})
	if err != nil {
		f.t.Fatal(err)
	}
	ok, err := f.hub.Receive(p, doc1, Message{SenderID: p.ID(), SessionID: "s-" + p.ID(), Count: f.count[p.ID()], Data: data})
	if !ok || err != nil {
		f.t.Fatalf("Receive: %v %v", ok, err)
	}
}

func enc(v any) cbor.RawMessage {
	b, err := cbor.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func (f *fixture) update(p Peer, channel string, v any) {
	f.t.Helper()
	f.send(p, presenceMessage{Type: TypeUpdate, Channel: channel, Value: enc(v)})
}

func (f *fixture) snapshot(p Peer, state map[string]any) {
	f.t.Helper()
	raw := map[string]cbor.RawMessage{}
	for k, v := range state {
		raw[k] = enc(v)
	}
	f.send(p, presenceMessage{Type: TypeSnapshot, State: raw})
}

func value(t *testing.T, raw cbor.RawMessage) any {
	t.Helper()
	var v any
	if err := cbor.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestNewcomerGetsEveryLivePeerAtOnce(t *testing.T) {
	f := newFixture(t)
	a, b, c := &fakePeer{id: "a"}, &fakePeer{id: "b"}, &fakePeer{id: "c"}
	f.snapshot(a, map[string]any{"user": map[string]any{"id": "ana", "name": "Ana"}, "cursor": "1@x"})
	f.snapshot(b, map[string]any{"user": map[string]any{"id": "bo"}, "cursor": "2@y"})
	a.take()
	f.hub.Join(c, doc1) // c's first message for the document
	got := c.take()
	if len(got) != 2 {
		t.Fatalf("newcomer got %d messages, want a snapshot from each of a and b", len(got))
	}
	for _, g := range got {
		if g.body.Type != TypeSnapshot || !strings.HasPrefix(g.msg.SessionID, "relay.") {
			t.Fatalf("got %+v", g)
		}
		want := map[string]string{"a": "1@x", "b": "2@y"}[g.msg.SenderID]
		if value(t, g.body.State["cursor"]) != want {
			t.Errorf("cursor of %s = %v, want %s", g.msg.SenderID, value(t, g.body.State["cursor"]), want)
		}
		if value(t, g.body.State["status"]) != "online" {
			t.Errorf("status of %s missing", g.msg.SenderID)
		}
	}
}

func TestUpdatesReachOthersNeverTheSender(t *testing.T) {
	f := newFixture(t)
	a, b := &fakePeer{id: "a"}, &fakePeer{id: "b"}
	f.hub.Join(a, doc1)
	f.hub.Join(b, doc1)
	f.update(a, "cursor", "5@x")
	if len(a.take()) != 0 {
		t.Fatal("the sender got its own update")
	}
	got := b.take()
	if len(got) == 0 || got[0].msg.SenderID != "a" || value(t, got[0].body.Value) != "5@x" && value(t, got[0].body.State["cursor"]) != "5@x" {
		t.Fatalf("b got %+v", got)
	}
}

// TestCoalescing: a burst inside one tick goes out as the leading update at
// once and the newest value at the tick; nothing older than what was
// delivered is delivered later.
func TestCoalescing(t *testing.T) {
	f := newFixture(t)
	a, b := &fakePeer{id: "a"}, &fakePeer{id: "b"}
	f.hub.Join(b, doc1)
	f.update(a, "user", "ana")
	f.hub.Tick()
	b.take()
	for i := 1; i <= 200; i++ {
		f.update(a, "cursor", i)
		if i%20 == 0 { // 20 updates per 50 ms tick, 400/s
			f.clock.Advance(50 * time.Millisecond)
			f.hub.Tick()
		}
	}
	got := b.take()
	var values []int64
	lastCount := uint64(0)
	for _, g := range got {
		if g.msg.Count <= lastCount {
			t.Fatalf("relay counts must grow: %d after %d", g.msg.Count, lastCount)
		}
		lastCount = g.msg.Count
		if g.body.Type == TypeUpdate && g.body.Channel == "cursor" {
			values = append(values, int64(value(t, g.body.Value).(uint64)))
		}
	}
	if len(values) > 11 {
		t.Errorf("forwarded %d cursor updates for 10 ticks, want at most about one per tick", len(values))
	}
	for i := 1; i < len(values); i++ {
		if values[i] <= values[i-1] {
			t.Fatalf("an older value was delivered after a newer one: %v", values)
		}
	}
	if values[len(values)-1] != 200 {
		t.Fatalf("last delivered cursor = %d, want the final 200", values[len(values)-1])
	}
}

func TestStaleUpdateIsNotForwarded(t *testing.T) {
	f := newFixture(t)
	a, b := &fakePeer{id: "a"}, &fakePeer{id: "b"}
	f.hub.Join(b, doc1)
	data := func(v string) []byte {
		d, _ := cbor.Marshal(map[string]any{"__presence": presenceMessage{Type: TypeUpdate, Channel: "cursor", Value: enc(v)}})
		return d
	}
	f.hub.Receive(a, doc1, Message{SenderID: "a", SessionID: "s", Count: 5, Data: data("new")})
	f.hub.Receive(a, doc1, Message{SenderID: "a", SessionID: "s", Count: 3, Data: data("old")})
	f.clock.Advance(time.Second)
	f.hub.Tick()
	for _, g := range b.take() {
		if g.body.Type == TypeUpdate && g.body.Channel == "cursor" && value(t, g.body.Value) == "old" {
			t.Fatal("a stale value was forwarded")
		}
	}
}

func TestLeaveSaysGoodbyeOnce(t *testing.T) {
	f := newFixture(t)
	a, b := &fakePeer{id: "a"}, &fakePeer{id: "b"}
	f.hub.Join(b, doc1)
	f.update(a, "cursor", "1@x")
	b.take()
	old := a
	fresh := &fakePeer{id: "a"} // the same peer reconnects
	f.hub.Join(fresh, doc1)
	f.hub.Leave(old) // the old socket's close arrives late
	if got := b.take(); len(got) != 0 {
		t.Fatalf("b got %+v for a replaced connection", got)
	}
	f.hub.Leave(fresh)
	got := b.take()
	if len(got) != 1 || got[0].body.Type != TypeGoodbye || got[0].msg.SenderID != "a" {
		t.Fatalf("b got %+v, want one goodbye from a", got)
	}
	f.hub.Leave(fresh)
	if len(b.take()) != 0 {
		t.Fatal("a second Leave said goodbye again")
	}
}

// TestASnapshotLeavesAsOneSnapshot: the channels one message changed are
// forwarded together, so a receiver meets a peer, after a reconnection too,
// with its name and cursor in one message, never as an anonymous cursor
// first (the channels of a snapshot come in no fixed order).
func TestASnapshotLeavesAsOneSnapshot(t *testing.T) {
	f := newFixture(t)
	b := &slowPeer{fakePeer: fakePeer{id: "b"}}
	f.hub.Join(b, doc1)
	state := map[string]any{
		"user": map[string]any{"id": "ana", "name": "Ana"}, "cursor": "1@x",
		"selection": nil, "typing": false, "status": "online",
	}
	// last is the feed's newest entry, held while b takes nothing.
	last := func(do func()) entry {
		b.hold()
		do()
		fd := f.hub.rooms[doc1].feed
		e := fd.entries[len(fd.entries)-1]
		b.release()
		return e
	}
	for round := range 50 {
		a := &fakePeer{id: "a"}
		e := last(func() { f.snapshot(a, state) })
		got := b.take()
		if len(got) != 1 || got[0].body.Type != TypeSnapshot || got[0].msg.SenderID != "a" {
			t.Fatalf("round %d: b got %+v, want one snapshot from a", round, got)
		}
		for ch := range state {
			if _, ok := got[0].body.State[ch]; !ok {
				t.Fatalf("round %d: the snapshot lacks %q: %+v", round, ch, got[0].body.State)
			}
		}
		if !e.whole || e.goodbye || e.channels != nil {
			t.Fatalf("round %d: a snapshot of all of a's channels is not marked whole: %+v", round, e)
		}
		e = last(func() { f.hub.Leave(a) })
		if got := b.take(); len(got) != 1 || got[0].body.Type != TypeGoodbye || !e.whole || !e.goodbye {
			t.Fatalf("round %d: b got %+v, want a's goodbye", round, got)
		}
	}

	// A snapshot of some of a's channels is not whole: receivers merge it,
	// so it replaces older values of just its channels.
	a := &fakePeer{id: "a"}
	f.snapshot(a, state)
	f.clock.Advance(time.Second)
	f.hub.Tick()
	b.take()
	e := last(func() {
		f.snapshot(a, map[string]any{"cursor": "2@x", "selection": map[string]any{"anchor": "1@x", "head": "2@x"}})
	})
	got := b.take()
	if len(got) != 1 || got[0].body.Type != TypeSnapshot || len(got[0].body.State) != 2 {
		t.Fatalf("b got %+v, want one snapshot of a's cursor and selection", got)
	}
	if e.whole || e.goodbye || !slices.Equal(e.channels, []string{"cursor", "selection"}) {
		t.Fatalf("the partial snapshot says it replaces %+v, want just cursor and selection", e)
	}
}

func TestSilentPeerExpires(t *testing.T) {
	f := newFixture(t)
	a, b := &fakePeer{id: "a"}, &fakePeer{id: "b"}
	f.update(a, "cursor", "1@x")
	f.update(b, "cursor", "2@y")
	ttl := f.hub.cfg.TTL
	for elapsed := time.Duration(0); elapsed < 2*ttl; elapsed += time.Second {
		f.clock.Advance(time.Second)
		f.hub.Touch(b) // b pongs; a is frozen
		f.hub.Tick()
	}
	var bye int
	for _, g := range b.take() {
		if g.body.Type == TypeGoodbye && g.msg.SenderID == "a" {
			bye++
		}
	}
	if bye != 1 {
		t.Fatalf("b got %d goodbyes from a, want 1", bye)
	}
	if views := f.hub.DocumentPresence(doc1); len(views) != 1 || views[0].PeerID != "b" {
		t.Fatalf("document presence = %+v, want only b", views)
	}
}

// TestTTLsAreSweptOncePerSweep: ticks between sweeps leave the peers
// alone; the first sweep past a peer's TTL removes it.
func TestTTLsAreSweptOncePerSweep(t *testing.T) {
	f := newFixture(t)
	a, b := &fakePeer{id: "a"}, &fakePeer{id: "b"}
	f.update(a, "cursor", "1@x")
	f.update(b, "cursor", "2@y")
	ttl, every := f.hub.cfg.TTL, f.hub.cfg.Sweep
	goodbyes := func() (n int) {
		for _, g := range b.take() {
			if g.body.Type == TypeGoodbye && g.msg.SenderID == "a" {
				n++
			}
		}
		return n
	}
	f.clock.Advance(ttl - every/2)
	f.hub.Touch(b)
	f.hub.Tick() // a sweep: a is not past its TTL yet
	swept := false
	for range 10 {
		f.clock.Advance(every / 10)
		f.hub.Touch(b)
		before := f.hub.swept
		f.hub.Tick()
		n := goodbyes()
		if f.hub.swept == before {
			if n != 0 {
				t.Fatal("a tick between sweeps removed a peer")
			}
			continue
		}
		if swept {
			t.Fatal("two sweeps within one Sweep")
		}
		swept = true
		if n != 1 {
			t.Fatalf("b got %d goodbyes from a at the sweep past a's TTL, want 1", n)
		}
	}
	if !swept {
		t.Fatal("no sweep within one Sweep")
	}
}

func TestAwayAndBack(t *testing.T) {
	f := newFixture(t)
	a, b := &fakePeer{id: "a"}, &fakePeer{id: "b"}
	f.hub.Join(b, doc1)
	f.update(a, "cursor", 1)
	b.take()
	statuses := func() []any {
		var out []any
		for _, g := range b.take() {
			if g.body.Type == TypeUpdate && g.body.Channel == "status" {
				out = append(out, value(t, g.body.Value))
			}
		}
		return out
	}
	f.clock.Advance(f.hub.cfg.AwayAfter)
	f.hub.Touch(a) // both connections stay alive (pongs) while idle
	f.hub.Touch(b)
	f.hub.Tick()
	if s := statuses(); len(s) != 1 || s[0] != "away" {
		t.Fatalf("after idling b saw statuses %v, want [away]", s)
	}
	f.update(a, "cursor", 2)
	f.hub.Tick()
	if s := statuses(); len(s) != 1 || s[0] != "online" {
		t.Fatalf("after activity b saw %v, want [online]", s)
	}
	f.update(a, "status", "away") // the client says so (a hidden tab)
	f.clock.Advance(time.Second)
	f.hub.Tick()
	if v := f.hub.UserPresence(context.Background(), "a"); v.Status != StatusAway {
		t.Fatalf("user status = %s, want away", v.Status)
	}
}

func TestTypingClearsAfterTimeout(t *testing.T) {
	f := newFixture(t)
	a, b := &fakePeer{id: "a"}, &fakePeer{id: "b"}
	f.hub.Join(b, doc1)
	f.update(a, "typing", true)
	typing := func() []any {
		var out []any
		for _, g := range b.take() {
			if g.body.Type == TypeUpdate && g.body.Channel == "typing" {
				out = append(out, value(t, g.body.Value))
			}
		}
		return out
	}
	if s := typing(); len(s) != 1 || s[0] != true {
		t.Fatalf("b saw typing %v", s)
	}
	f.clock.Advance(2 * time.Second)
	f.update(a, "typing", true) // renewed within the burst: not forwarded again
	f.hub.Tick()
	f.clock.Advance(2 * time.Second)
	f.hub.Tick()
	if s := typing(); len(s) != 0 {
		t.Fatalf("renewed typing flag changed early: %v", s)
	}
	f.clock.Advance(1100 * time.Millisecond)
	f.hub.Tick()
	if s := typing(); len(s) != 1 || s[0] != false {
		t.Fatalf("after 3 s without renewal b saw %v, want [false]", s)
	}
}

func TestUserAggregationAndWatch(t *testing.T) {
	f := newFixture(t)
	var mu sync.Mutex
	var events []Status
	initial, stop := f.hub.Watch(context.Background(), []string{"ana"}, func(us UserStatus) {
		mu.Lock()
		events = append(events, us.Status)
		mu.Unlock()
	})
	defer stop()
	if len(initial) != 1 || initial[0].Status != StatusOffline {
		t.Fatalf("initial = %+v", initial)
	}
	tab1, tab2 := &fakePeer{id: "t1"}, &fakePeer{id: "t2"}
	f.update(tab1, "user", map[string]any{"id": "ana"})
	f.update(tab2, "user", map[string]any{"id": "ana"})
	f.update(tab2, "status", "away")
	f.hub.Leave(tab1) // one tab left, the other is away
	f.hub.Leave(tab2)
	mu.Lock()
	got := append([]Status(nil), events...)
	mu.Unlock()
	want := []Status{StatusOnline, StatusAway, StatusOffline}
	if len(got) != len(want) {
		t.Fatalf("watch events %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("watch events %v, want %v", got, want)
		}
	}
	if _, ok, _ := f.seen.LastSeen(context.Background(), "ana"); !ok {
		t.Fatal("last seen was not stored when ana went offline")
	}
	v := f.hub.UserPresence(context.Background(), "ana")
	if v.Status != StatusOffline || v.LastSeen.IsZero() || len(v.Documents) != 0 {
		t.Fatalf("user presence = %+v", v)
	}
}

func TestNotPresenceAndBadPresence(t *testing.T) {
	f := newFixture(t)
	a := &fakePeer{id: "a"}
	plain, _ := cbor.Marshal(map[string]any{"cursor": 1})
	if ok, err := f.hub.Receive(a, doc1, Message{SenderID: "a", SessionID: "s", Count: 1, Data: plain}); ok || err != nil {
		t.Fatalf("an app ephemeral was taken as presence: %v %v", ok, err)
	}
	for _, bad := range []any{
		map[string]any{"__presence": map[string]any{"type": "dance"}},
		map[string]any{"__presence": map[string]any{"type": "update"}},
		map[string]any{"__presence": map[string]any{"type": "snapshot", "state": 3}},
		map[string]any{"__presence": 7},
		deep(40),
	} {
		data, _ := cbor.Marshal(bad)
		if _, err := f.hub.Receive(a, doc1, Message{SenderID: "a", SessionID: "s", Count: 2, Data: data}); !errors.Is(err, ErrBadPresence) {
			t.Errorf("%v: err = %v, want ErrBadPresence", bad, err)
		}
	}
}

// A stock client's CBOR decoder (cbor-x) reads more shapes as an object
// with a __presence key than a plain map: tag 55799 around the map, or
// around its key, means nothing to it. Relayed as an application's
// ephemeral, such a payload would reach the other peers as presence the
// hub never checked, under any user's name. The hub refuses them, and
// relays what carries tags only where they cannot make keys.
func TestPayloadsAClientCouldReadAsPresenceAreRefused(t *testing.T) {
	f := newFixture(t)
	a := &fakePeer{id: "a"}
	enc := func(v any) []byte {
		b, err := cbor.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	spoof := enc(map[string]any{"__presence": map[string]any{"type": "snapshot", "state": map[string]any{"user": map[string]any{"id": "ana", "name": "Ana"}}}})
	selfDescribed := append([]byte{0xd9, 0xd9, 0xf7}, spoof...)
	taggedKey := append([]byte{0xa1, 0xd9, 0xd9, 0xf7}, spoof[1:]...) // the key "__presence" under tag 55799
	record := append([]byte{0xd9, 0xdf, 0xff, 0x83, 0x00, 0x81, 0x6a}, "__presence"...)
	record = append(record, enc(map[string]any{"type": "heartbeat"})...)              // cbor-x's inline record: [id, keys, values...]
	laterKey := append([]byte{0xa2, 0x61, 'x', 0x01, 0xd9, 0xd9, 0xf7}, spoof[1:]...) // a second key under a tag
	for name, data := range map[string][]byte{
		"a map under tag 55799":   selfDescribed,
		"a key under tag 55799":   taggedKey,
		"an inline record":        record,
		"a later key under a tag": laterKey,
		"a map under two tags":    append([]byte{0xd8, 0x1c}, selfDescribed...),
	} {
		ok, err := f.hub.Receive(a, doc1, Message{SenderID: "a", SessionID: "s", Count: 1, Data: data})
		if !errors.Is(err, ErrBadPresence) || ok {
			t.Errorf("%s: Receive = %v, %v; want ErrBadPresence", name, ok, err)
		}
	}
	date := append([]byte{0xc1}, enc(1700000000)...)
	typed := append([]byte{0xd8, 0x55}, enc([]byte{0, 0, 128, 63})...) // a Float32Array
	valueTag := enc(map[string]any{"at": cbor.Tag{Number: 1, Content: 1700000000}, "list": []any{cbor.Tag{Number: 55799, Content: map[string]any{"__presence": 1}}}})
	indefinite := append([]byte{0xbf}, enc("cursor")...)
	indefinite = append(append(indefinite, enc(3)...), 0xff)
	otherKeys := []byte{0xa4, 0x41, 'k', 0x01, 0xf9, 0x3c, 0x00, 0x02, 0x81, 0x01, 0x03, 0x6a}
	otherKeys = append(append(otherKeys, "__PRESENCE"...), 0x04) // bytes, a float, an array, another spelling
	for name, data := range map[string][]byte{"a date": date, "a typed array": typed, "tags inside values": valueTag, "an indefinite map": indefinite,
		"keys of other types": otherKeys} {
		if ok, err := f.hub.Receive(a, doc1, Message{SenderID: "a", SessionID: "s", Count: 1, Data: data}); ok || err != nil {
			t.Errorf("%s: Receive = %v, %v; want an application's ephemeral, relayed", name, ok, err)
		}
	}
	twice := append(append([]byte{0xa2}, enc(presenceMarker)...), 0x01) // as a client reads it, the last one counts
	twice = append(append(twice, enc(presenceMarker)...), enc(map[string]any{"type": "heartbeat"})...)
	indefinitePresence := append(append([]byte{0xbf}, spoof[1:]...), 0xff)
	value := spoof[1+1+len(presenceMarker):] // the snapshot, after the map's head and the key
	wideKey := append(append([]byte{0xa1, 0x78, byte(len(presenceMarker))}, presenceMarker...), value...)
	widerKey := append(append([]byte{0xa1, 0x7a, 0, 0, 0, byte(len(presenceMarker))}, presenceMarker...), value...)
	for name, data := range map[string][]byte{
		"__presence twice, the last a heartbeat": twice,
		"presence in an indefinite map":          indefinitePresence,
		"the key's length in a byte of its own":  wideKey,
		"the key's length in four bytes":         widerKey,
	} {
		if ok, err := f.hub.Receive(a, doc1, Message{SenderID: "a", SessionID: "s", Count: 1, Data: data}); !ok || err != nil {
			t.Errorf("%s: Receive = %v, %v; want it taken as presence, the hub's to check", name, ok, err)
		}
	}
}

// deep returns a value nested n arrays deep.
func deep(n int) any {
	var v any = 1
	for i := 0; i < n; i++ {
		v = []any{v}
	}
	return map[string]any{"cursor": v}
}

func TestHeartbeatsAreForwarded(t *testing.T) {
	f := newFixture(t)
	a, b := &fakePeer{id: "a"}, &fakePeer{id: "b"}
	f.hub.Join(b, doc1)
	f.update(a, "cursor", 1)
	f.hub.Tick()
	b.take()
	f.send(a, presenceMessage{Type: TypeHeartbeat})
	got := b.take()
	if len(got) != 1 || got[0].body.Type != TypeHeartbeat {
		t.Fatalf("b got %+v, want a heartbeat", got)
	}
}

// identifiedPeer is a fakePeer with a verified identity, as a connection
// with a token has.
type identifiedPeer struct {
	*fakePeer
	identity Identity
}

func (p *identifiedPeer) Identity() Identity { return p.identity }

// nestedPresence is an update of channel whose value is an array nested
// levels deep; the payload then nests levels+2 deep (the envelope and the
// message are maps).
func nestedPresence(channel string, levels int) []byte {
	value := append(bytes.Repeat([]byte{0x81}, levels), 0x01) // levels arrays around 1
	b, err := encMode.Marshal(envelope{Presence: &presenceMessage{Type: TypeUpdate, Channel: channel, Value: value}})
	if err != nil {
		panic(err)
	}
	return b
}

// At every depth a hub may be configured for, a presence payload within it
// is read as presence (so the user channel is the token's, whatever the
// client wrote), and one past it is refused: never relayed as the client
// wrote it, as an application's own ephemeral would be.
func TestPresenceDepthIsOneDecoder(t *testing.T) {
	for depth := MinNesting; depth <= MaxNesting; depth++ {
		h := newHub(t, Config{MaxNesting: depth, Logger: testenv.QuietLogger()})
		p := &identifiedPeer{fakePeer: &fakePeer{id: "p"}, identity: Identity{UserID: "ana", Name: "Ana"}}
		handled, err := h.Receive(p, doc1, Message{SenderID: "p", SessionID: "s", Count: 1, Data: nestedPresence(ChannelUser, depth-2)})
		if err != nil || !handled {
			t.Fatalf("depth %d: a payload nested %d deep: handled %v, %v; want presence", depth, depth, handled, err)
		}
		if views := h.DocumentPresence(doc1); len(views) != 1 || views[0].UserID != "ana" || views[0].Name != "Ana" {
			t.Fatalf("depth %d: the peer shows as %+v, want the token's user", depth, views)
		}
		handled, err = h.Receive(p, doc1, Message{SenderID: "p", SessionID: "s", Count: 2, Data: nestedPresence(ChannelUser, depth-1)})
		if handled || !errors.Is(err, ErrBadPresence) {
			t.Fatalf("depth %d: a payload nested %d deep: handled %v, %v; want ErrBadPresence", depth, depth+1, handled, err)
		}
	}
	for _, bad := range []int{1, MinNesting - 1, MaxNesting + 1} {
		if _, err := New(Config{MaxNesting: bad}); err == nil {
			t.Errorf("MaxNesting %d: New accepted it", bad)
		}
	}
}

// One peer's presence is bounded in channels and bytes: what would pass a
// limit is refused (and so never relayed); what stays within it goes on.
func TestPresenceStatePerPeerIsBounded(t *testing.T) {
	h := newHub(t, Config{MaxChannels: 4, MaxStateBytes: 100, Logger: testenv.QuietLogger()})
	p := &fakePeer{id: "p"}
	count := uint64(0)
	send := func(m presenceMessage) error {
		count++
		data, err := cbor.Marshal(map[string]any{"__presence": m})
		if err != nil {
			t.Fatal(err)
		}
		handled, err := h.Receive(p, doc1, Message{SenderID: "p", SessionID: "s", Count: count, Data: data})
		if !handled {
			t.Fatal("a presence message was not handled as presence")
		}
		return err
	}
	// The hub itself writes the status channel: 1 of 4.
	for _, ch := range []string{"a", "b", "c"} {
		if err := send(presenceMessage{Type: TypeUpdate, Channel: ch, Value: enc(1)}); err != nil {
			t.Fatalf("channel %s: %v", ch, err)
		}
	}
	if err := send(presenceMessage{Type: TypeUpdate, Channel: "d", Value: enc(1)}); !errors.Is(err, ErrPresenceLimit) {
		t.Fatalf("a fifth channel: %v, want ErrPresenceLimit", err)
	}
	if err := send(presenceMessage{Type: TypeUpdate, Channel: "a", Value: enc(2)}); err != nil {
		t.Fatalf("a held channel again: %v", err)
	}
	if err := send(presenceMessage{Type: TypeUpdate, Channel: "b", Value: enc(string(make([]byte, 120)))}); !errors.Is(err, ErrPresenceLimit) {
		t.Fatalf("120 bytes: %v, want ErrPresenceLimit", err)
	}
	if err := send(presenceMessage{Type: TypeSnapshot, State: map[string]cbor.RawMessage{"x": enc(1), "y": enc(1)}}); !errors.Is(err, ErrPresenceLimit) {
		t.Fatalf("a snapshot adding two channels: %v, want ErrPresenceLimit", err)
	}
	if v := h.DocumentPresence(doc1); len(v) != 1 || len(v[0].State) != 4 || v[0].State["a"] != uint64(2) {
		t.Fatalf("the peer's state is %+v", v)
	}
}

// presenceSender returns a function that sends h a presence message from
// p in doc1, counting, and returns Receive's error.
func presenceSender(t *testing.T, h *Hub, p *fakePeer) func(presenceMessage) error {
	count := uint64(0)
	return func(m presenceMessage) error {
		count++
		data, err := cbor.Marshal(map[string]any{"__presence": m})
		if err != nil {
			t.Fatal(err)
		}
		_, err = h.Receive(p, doc1, Message{SenderID: p.id, SessionID: "s", Count: count, Data: data})
		return err
	}
}

// A user id is a key of the stores presence writes (last-seen, history)
// and of the cluster's: one past MaxUserIDBytes is refused before the hub
// holds it. A 40 KB id once failed every batch of last-seen writes (bbolt
// refused the key) and so kept every other user's last-seen unstored.
func TestAUserIDPastTheLimitIsRefused(t *testing.T) {
	h := newHub(t, Config{Logger: testenv.QuietLogger()})
	send := presenceSender(t, h, &fakePeer{id: "p"})
	enc := func(v any) cbor.RawMessage {
		b, _ := cbor.Marshal(v)
		return b
	}
	long := strings.Repeat("u", MaxUserIDBytes+1)
	for _, m := range []presenceMessage{
		{Type: TypeUpdate, Channel: ChannelUser, Value: enc(map[string]any{"id": long})},
		{Type: TypeUpdate, Channel: ChannelUser, Value: enc(long)},
		{Type: TypeSnapshot, State: map[string]cbor.RawMessage{ChannelUser: enc(map[string]any{"id": long, "name": "Ana"})}},
	} {
		if err := send(m); !errors.Is(err, ErrPresenceLimit) {
			t.Errorf("%s naming a user id of %d bytes: %v, want ErrPresenceLimit", m.Type, len(long), err)
		}
	}
	if n := testutil.ToFloat64(h.metrics.refused.WithLabelValues(refusedUser)); n != 3 {
		t.Errorf("refused for a user id: %v, want 3", n)
	}
	if err := send(presenceMessage{Type: TypeUpdate, Channel: ChannelUser, Value: enc(map[string]any{"id": long[1:]})}); err != nil {
		t.Fatalf("a user id of %d bytes: %v", MaxUserIDBytes, err)
	}
}

// A user id or name holding a NUL is text PostgreSQL refuses: one such id
// in a batch of last-seen or history writes once failed the batch, and
// every later one, for everyone. It is refused before the hub holds it.
func TestAUserIDOrNameHoldingANULIsRefused(t *testing.T) {
	h := newHub(t, Config{Logger: testenv.QuietLogger()})
	send := presenceSender(t, h, &fakePeer{id: "p"})
	for _, m := range []presenceMessage{
		{Type: TypeUpdate, Channel: ChannelUser, Value: enc(map[string]any{"id": "ana\x00"})},
		{Type: TypeUpdate, Channel: ChannelUser, Value: enc("\x00")},
		{Type: TypeSnapshot, State: map[string]cbor.RawMessage{ChannelUser: enc(map[string]any{"id": "a\x00na", "name": "Ana"})}},
	} {
		if err := send(m); !errors.Is(err, ErrPresenceLimit) {
			t.Errorf("%s naming a user id with a NUL: %v, want ErrPresenceLimit", m.Type, err)
		}
	}
	if err := send(presenceMessage{Type: TypeUpdate, Channel: ChannelUser, Value: enc(map[string]any{"id": "ana", "name": "A\x00na"})}); !errors.Is(err, ErrPresenceLimit) {
		t.Errorf("a user name with a NUL: %v, want ErrPresenceLimit", err)
	}
	if n := testutil.ToFloat64(h.metrics.refused.WithLabelValues(refusedUser)); n != 3 {
		t.Errorf("refused for a user id: %v, want 3", n)
	}
	if n := testutil.ToFloat64(h.metrics.refused.WithLabelValues(refusedUserName)); n != 1 {
		t.Errorf("refused for a user name: %v, want 1", n)
	}
	if v := h.DocumentPresence(doc1); len(v) != 0 {
		t.Fatalf("the hub holds %+v", v)
	}
	if err := send(presenceMessage{Type: TypeUpdate, Channel: ChannelUser, Value: enc(map[string]any{"id": "ana", "name": "Ana", "n": 0})}); err != nil {
		t.Fatalf("a user value with a zero byte outside its text: %v", err)
	}
}

// A channel's clock holds the session of the message that wrote it, up to
// 256 bytes a channel, which the hub holds beside the value: it counts in
// the peer's bytes. Uncounted, 32 channels of one-byte names and values
// held over 8 KiB under a limit of 1,024 bytes.
func TestPresenceClocksCountInThePeersBytes(t *testing.T) {
	const limit = 1024
	h := newHub(t, Config{MaxChannels: 32, MaxStateBytes: limit, Logger: testenv.QuietLogger()})
	p := &fakePeer{id: "p"}
	session := strings.Repeat("s", 256)
	for i := range 31 {
		data, _ := cbor.Marshal(map[string]any{"__presence": presenceMessage{Type: TypeUpdate, Channel: string(rune('a' + i)), Value: enc(1)}})
		if _, err := h.Receive(p, doc1, Message{SenderID: "p", SessionID: session, Count: uint64(i + 1), Data: data}); err != nil {
			if !errors.Is(err, ErrPresenceLimit) {
				t.Fatalf("channel %d: %v, want ErrPresenceLimit", i, err)
			}
			break
		}
	}
	h.mu.Lock()
	ps := h.rooms[doc1].state["p"]
	held := len(ps.Gone.Session)
	for ch, reg := range ps.Channels {
		held += len(ch) + len(reg.Value) + len(reg.Clock.Session)
	}
	h.mu.Unlock()
	if held > limit {
		t.Fatalf("the hub holds %d bytes of the peer's presence (%d channels), over its limit of %d", held, len(ps.Channels), limit)
	}
	if n := testutil.ToFloat64(h.metrics.refused.WithLabelValues(refusedBytes)); n != 1 {
		t.Errorf("refused for bytes: %v, want 1", n)
	}
}

// Channel names are held as values are, so they count in a peer's bytes,
// and one name is bounded: thirty channels of long names cannot make the
// hub hold, and send every newcomer, far more than MaxStateBytes.
func TestPresenceChannelNamesAreBounded(t *testing.T) {
	h := newHub(t, Config{MaxChannels: 32, MaxStateBytes: 1024, Logger: testenv.QuietLogger()})
	send := presenceSender(t, h, &fakePeer{id: "p"})
	long := strings.Repeat("n", MaxChannelNameBytes+1)
	if err := send(presenceMessage{Type: TypeUpdate, Channel: long, Value: enc(1)}); !errors.Is(err, ErrPresenceLimit) {
		t.Fatalf("an update to a channel named by %d bytes: %v, want ErrPresenceLimit", len(long), err)
	}
	if err := send(presenceMessage{Type: TypeSnapshot, State: map[string]cbor.RawMessage{"a": enc(1), long: enc(1)}}); !errors.Is(err, ErrPresenceLimit) {
		t.Fatalf("a snapshot with a channel named by %d bytes: %v, want ErrPresenceLimit", len(long), err)
	}
	if n := testutil.ToFloat64(h.metrics.refused.WithLabelValues(refusedName)); n != 2 {
		t.Errorf("refused for a channel name: %v, want 2", n)
	}
	// Names of 100 bytes with one-byte values and one-byte sessions: nine
	// fit in 1024 bytes (with the status channel the hub writes, its
	// session 24 bytes), the tenth does not.
	accepted := 0
	for i := range 20 {
		name := fmt.Sprintf("%03d", i) + strings.Repeat("n", 97)
		if err := send(presenceMessage{Type: TypeUpdate, Channel: name, Value: enc(1)}); err != nil {
			if !errors.Is(err, ErrPresenceLimit) {
				t.Fatalf("channel %d: %v, want ErrPresenceLimit", i, err)
			}
			break
		}
		accepted++
	}
	if accepted != 9 {
		t.Fatalf("%d channels of 100-byte names held under 1024 bytes, want 9", accepted)
	}
	if n := testutil.ToFloat64(h.metrics.refused.WithLabelValues(refusedBytes)); n != 1 {
		t.Errorf("refused for bytes: %v, want 1", n)
	}
	held := 0
	for _, v := range h.DocumentPresence(doc1) {
		for ch := range v.State {
			held += len(ch)
		}
	}
	if held > 1024 {
		t.Fatalf("the hub holds %d bytes of channel names for one peer, over 1024", held)
	}
}

// The presence API names a verified peer's color as its token says, as
// it does its name: a color channel the peer writes does not change it.
// A peer without a token may say its color in either channel.
func TestDocumentPresenceColorIsTheTokens(t *testing.T) {
	h := newHub(t, Config{})
	count := uint64(0)
	send := func(p Peer, m presenceMessage) {
		t.Helper()
		count++
		data, err := cbor.Marshal(map[string]any{"__presence": m})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.Receive(p, doc1, Message{SenderID: p.ID(), SessionID: "s", Count: count, Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	ana := &identifiedPeer{fakePeer: &fakePeer{id: "ana-tab"}, identity: Identity{UserID: "ana", Name: "Ana", Color: "#f00"}}
	send(ana, presenceMessage{Type: TypeUpdate, Channel: "color", Value: enc("#0f0")})
	send(ana, presenceMessage{Type: TypeUpdate, Channel: ChannelUser, Value: enc(map[string]any{"id": "ana", "name": "Eve", "color": "#00f"})})
	bare := &identifiedPeer{fakePeer: &fakePeer{id: "bo-tab"}, identity: Identity{UserID: "bo", Name: "Bo"}} // a token without a color
	send(bare, presenceMessage{Type: TypeUpdate, Channel: "color", Value: enc("#0f0")})
	open := &fakePeer{id: "cy-tab"}
	send(open, presenceMessage{Type: TypeUpdate, Channel: "color", Value: enc("#abc")})
	got := map[string]PeerView{}
	for _, v := range h.DocumentPresence(doc1) {
		got[v.PeerID] = v
	}
	if v := got["ana-tab"]; v.Color != "#f00" || v.Name != "Ana" {
		t.Errorf("a verified peer: name %v color %v, want the token's Ana #f00", v.Name, v.Color)
	}
	if v := got["bo-tab"]; v.Color != nil {
		t.Errorf("a verified peer whose token names no color: color %v, want none", v.Color)
	}
	if v := got["cy-tab"]; v.Color != "#abc" {
		t.Errorf("a peer without a token: color %v, want its color channel's #abc", v.Color)
	}
}

// UserOf names a peer's user from its token first, else, running open,
// from what its presence says; a stranger is nobody.
func TestUserOfNamesAPeersUser(t *testing.T) {
	f := newFixture(t)
	open := &fakePeer{id: "open"}
	f.update(open, "user", map[string]any{"id": "cy", "name": "Cy"})
	tokened := &identifiedPeer{fakePeer: &fakePeer{id: "tok"}, identity: Identity{UserID: "ana", Name: "Ana"}}
	if u, n := f.hub.UserOf(doc1, tokened); u != "ana" || n != "Ana" {
		t.Errorf("the token's user: %q %q", u, n)
	}
	if u, n := f.hub.UserOf(doc1, open); u != "cy" || n != "Cy" {
		t.Errorf("the user presence names: %q %q", u, n)
	}
	if u, _ := f.hub.UserOf(doc1, &fakePeer{id: "stranger"}); u != "" {
		t.Errorf("a stranger is %q", u)
	}
}

// TestLeaveDocumentSaysGoodbyeThereOnly: a peer taken out of one document
// while connected is gone there at once, and stays in its others.
func TestLeaveDocumentSaysGoodbyeThereOnly(t *testing.T) {
	const doc2 = "jN3pd9agHvY1zVqDCHrDTE3fDh1"
	f := newFixture(t)
	a, b := &fakePeer{id: "a"}, &fakePeer{id: "b"}
	for _, d := range []string{doc1, doc2} {
		f.hub.Join(a, d)
		f.hub.Join(b, d)
	}
	f.update(a, "cursor", "1@x") // in doc1
	data, err := cbor.Marshal(map[string]any{"__presence": presenceMessage{Type: TypeUpdate, Channel: "cursor", Value: enc("2@x")}})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := f.hub.Receive(a, doc2, Message{SenderID: "a", SessionID: "s-a", Count: 100, Data: data}); !ok || err != nil {
		t.Fatalf("Receive: %v %v", ok, err)
	}
	f.hub.Tick()
	b.take()

	f.hub.LeaveDocument(a, doc1)
	got := b.take()
	if len(got) != 1 || got[0].doc != doc1 || got[0].body.Type != TypeGoodbye || got[0].msg.SenderID != "a" {
		t.Fatalf("b got %+v, want one goodbye from a in doc1", got)
	}
	f.hub.LeaveDocument(a, doc1)
	if got := b.take(); len(got) != 0 {
		t.Fatalf("a second LeaveDocument sent %+v", got)
	}
	if v := f.hub.UserPresence(context.Background(), "a"); len(v.Documents) != 1 || v.Documents[0] != doc2 {
		t.Fatalf("a is in %v, want doc2 only", v.Documents)
	}
	f.hub.Leave(a)
	got = b.take()
	if len(got) != 1 || got[0].doc != doc2 || got[0].body.Type != TypeGoodbye {
		t.Fatalf("b got %+v at a's close, want one goodbye in doc2", got)
	}
}
