package redisbus

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tandemhq/tandem/doc/store"
	"github.com/tandemhq/tandem/internal/testenv"

	"github.com/automerge/automerge-go"
	"github.com/fxamacker/cbor/v2"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/tandemhq/tandem/awareness"
	"github.com/tandemhq/tandem/doc"
)

// recorder is a peer that keeps what it is sent.
type recorder struct {
	id string
	mu sync.Mutex
	sy [][]byte
	pr []awareness.Message
	ep []doc.Ephemeral
}

func (r *recorder) ID() string                { return r.id }
func (r *recorder) SendDocUnavailable(string) {}
func (r *recorder) SendEphemeral(_ string, e doc.Ephemeral) {
	r.mu.Lock()
	r.ep = append(r.ep, e)
	r.mu.Unlock()
}
func (r *recorder) ephemerals() []doc.Ephemeral {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]doc.Ephemeral(nil), r.ep...)
}
func (r *recorder) SendSync(_ string, d []byte) { r.mu.Lock(); r.sy = append(r.sy, d); r.mu.Unlock() }
func (r *recorder) PresenceReady(f *awareness.Feed) {
	r.mu.Lock()
	r.pr = append(r.pr, f.Take(r).Messages...)
	r.mu.Unlock()
}
func (r *recorder) syncs() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]byte(nil), r.sy...)
}
func (r *recorder) presence() []awareness.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]awareness.Message(nil), r.pr...)
}

// node is one in-process cluster node: document hub, presence and bus.
type node struct {
	hub      *doc.Hub
	presence *awareness.Hub
	bus      *Bus
	stop     func()
}

// startNode starts a node; opts adjust its bus and presence settings.
func startNode(t *testing.T, id string, opts ...func(*Config, *awareness.Config)) *node {
	t.Helper()
	return startNodeWith(t, id, nil, opts...)
}

// startNodeWith is startNode with before, if not nil, called on the bus
// before it runs: where a test sets the bus's hooks.
func startNodeWith(t *testing.T, id string, before func(*Bus), opts ...func(*Config, *awareness.Config)) *node {
	t.Helper()
	logger := testenv.QuietLogger()
	client := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr()})
	if err := client.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("Redis at %s: %v", testenv.RedisAddr(), err)
	}
	bcfg := Config{Client: client, NodeID: id, NodeTTL: time.Second, Logger: logger}
	pcfg := awareness.Config{Logger: logger}
	for _, o := range opts {
		o(&bcfg, &pcfg)
	}
	bus, err := New(bcfg)
	if err != nil {
		t.Fatal(err)
	}
	pcfg.Replicator = bus
	st, err := store.OpenBolt(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() }) // after the hub's Close: registered before it
	hub, err := doc.NewHub(doc.Config{Store: st, Logger: logger, Cluster: bus})
	if err != nil {
		t.Fatal(err)
	}
	go hub.Run(context.Background()) // until hub.Close
	presence, err := awareness.New(pcfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	bus.Attach(hub, presence)
	if before != nil {
		before(bus)
	}
	go func() { defer wg.Done(); bus.Run(ctx) }()
	go func() { defer wg.Done(); presence.Run(ctx) }()
	n := &node{hub: hub, presence: presence, bus: bus}
	var once sync.Once
	n.stop = func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			hub.Close(context.Background())
			client.Close()
		})
	}
	t.Cleanup(n.stop)
	return n
}

func TestRedisBusReplicatesDocumentsAndPresence(t *testing.T) {
	docID := fmt.Sprint("bus-test-", time.Now().UnixNano()) // channels are per document: no other test meets it
	n1, n2 := startNode(t, "bus-n1"), startNode(t, "bus-n2")

	// A peer on node 2 and node 1 watch the document.
	watcher := watchOnTwoNodes(t, n1, n2, docID)

	// A writer on node 1 creates content; the watcher on node 2 is sent it.
	before := len(watcher.syncs())
	writer := &recorder{id: "writer"}
	d := automerge.New()
	d.RootMap().Set("title", "across nodes")
	d.Commit("create")
	state := automerge.NewSyncState(d)
	for seen, round := 0, 0; round < 10; round++ { // the hub answers synchronously
		if m, ok := state.GenerateMessage(); ok {
			n1.hub.Sync(context.Background(), writer, doc.SyncMessage{DocumentID: docID, Data: m.Bytes()})
		}
		replies := writer.syncs()
		for _, b := range replies[seen:] {
			state.ReceiveMessage(b)
		}
		seen = len(replies)
	}
	testenv.WaitFor(t, "the change on node 2", func() bool {
		heads, ok := n2.hub.Heads(docID)
		return ok && len(heads) == 1
	})
	testenv.WaitFor(t, "the watcher sent the change", func() bool { return len(watcher.syncs()) > before })

	// Presence from node 1 reaches the watcher on node 2.
	speakTo(t, n1, watcher, docID)

	// Node 1 stops: node 2 says goodbye for its peer at once (bye).
	n1.stop()
	testenv.WaitFor(t, "goodbye for the speaker", func() bool {
		for _, m := range watcher.presence() {
			var env struct {
				P struct{ Type string } `cbor:"__presence"`
			}
			if m.SenderID == "speaker" && cbor.Unmarshal(m.Data, &env) == nil && env.P.Type == "goodbye" {
				return true
			}
		}
		return false
	})
}

// watchOnTwoNodes makes a peer of node 2 watch the document (presence and
// a sync request, as a connection's first message would), and node 1
// watch it too; it returns once both nodes subscribe.
func watchOnTwoNodes(t *testing.T, n1, n2 *node, docID string) *recorder {
	t.Helper()
	watcher := &recorder{id: "watcher"}
	n2.bus.Join(docID)
	n2.presence.Join(watcher, docID)
	n2.hub.Sync(context.Background(), watcher, doc.SyncMessage{DocumentID: docID, Data: emptySync(t), Request: true})
	n1.bus.Join(docID)
	subscribedOnBoth(t, n1, docID)
	return watcher
}

// subscribedOnBoth waits until two nodes subscribe to the document.
func subscribedOnBoth(t *testing.T, n1 *node, docID string) {
	t.Helper()
	testenv.WaitFor(t, "both nodes subscribed", func() bool {
		n, err := n1.bus.cfg.Client.PubSubNumSub(context.Background(), docChannel(docID)).Result()
		return err == nil && n[docChannel(docID)] == 2
	})
}

func emptySync(t *testing.T) []byte {
	t.Helper()
	m, ok := automerge.NewSyncState(automerge.New()).GenerateMessage()
	if !ok {
		t.Fatal("no first sync message")
	}
	return m.Bytes()
}

func TestParseUserStatus(t *testing.T) {
	now := time.Now().UnixMilli()
	for _, tc := range []struct {
		v     string
		want  awareness.Status
		fresh bool
	}{
		{fmt.Sprintf("online %d", now+1000), awareness.StatusOnline, true},
		{fmt.Sprintf("away %d", now+1000), awareness.StatusAway, true},
		{fmt.Sprintf("online %d", now-1), awareness.StatusOffline, false}, // expired
		{"online", awareness.StatusOffline, false},
		{"online soon", awareness.StatusOffline, false},
	} {
		st, fresh := parseUserStatus(tc.v, now)
		if st != tc.want || fresh != tc.fresh {
			t.Errorf("%q: %s %v, want %s %v", tc.v, st, fresh, tc.want, tc.fresh)
		}
	}
}

// presenceType returns the type of a presence message.
func presenceType(m awareness.Message) string {
	var env struct {
		P struct{ Type string } `cbor:"__presence"`
	}
	cbor.Unmarshal(m.Data, &env)
	return env.P.Type
}

// A peer's goodbye lost on the bus (injected): the next roster of its
// node no longer names it, and the other node says goodbye in its name.
// Its node lives on, so neither the node's bye nor its TTL can be what
// ends the ghost.
func TestLostGoodbyeIsRepairedByTheRoster(t *testing.T) {
	docID := fmt.Sprint("roster-test-", time.Now().UnixNano())
	fast := func(b *Config, p *awareness.Config) {
		b.GossipInterval = 100 * time.Millisecond
		b.NodeTTL = time.Minute
		p.RemoteTTL = time.Minute // the roster, not the TTL, must end it
	}
	var lost sync.WaitGroup
	lost.Add(1)
	var once sync.Once
	loseLeaves := func(b *Bus) { // before the bus runs: its publisher reads the hook
		b.lose = func(o busOut) bool {
			if o.leave {
				once.Do(lost.Done)
				return true
			}
			return false
		}
	}
	n1, n2 := startNodeWith(t, "roster-n1", loseLeaves, fast), startNode(t, "roster-n2", fast)
	watcher := &recorder{id: "watcher"}
	n2.bus.Join(docID)
	n2.presence.Join(watcher, docID)
	n1.bus.Join(docID)
	speaker := speakTo(t, n1, watcher, docID)
	n1.presence.Leave(speaker)
	lost.Wait() // the goodbye was published, and lost
	testenv.WaitFor(t, "goodbye for the speaker on node 2", func() bool {
		for _, m := range watcher.presence() {
			if m.SenderID == "speaker" && presenceType(m) == "goodbye" {
				return true
			}
		}
		return false
	})
	if v := n2.presence.UserPresence(context.Background(), "speaker"); v.Status != awareness.StatusOffline {
		t.Fatalf("node 2 sees the speaker %s", v.Status)
	}
}

// Leaves are never dropped for a full queue: they wait past it, and go
// out first; other messages are dropped and counted.
func TestLeavesOutliveAFullQueue(t *testing.T) {
	b := bareBus(t, Config{NodeID: "full-queue", Queue: 1}) // never run: Close alone unsubscribes
	b.PublishUserStatus("ana", awareness.StatusOnline)
	b.PublishPresence("d", []byte("a cursor"), false) // dropped: full
	if n := testutil.ToFloat64(b.dropped); n != 1 {
		t.Fatalf("dropped %v, want 1", n)
	}
	// A leave makes room by dropping the oldest: it never overtakes it.
	b.PublishUserStatus("ana", awareness.StatusOffline)
	if n := testutil.ToFloat64(b.dropped); n != 2 {
		t.Fatalf("dropped %v, want 2 (the older online)", n)
	}
	if q := <-b.out; q.user != "ana" || q.status != awareness.StatusOffline {
		t.Fatalf("queued %+v, want ana offline", q)
	}
	// The queue full of a leave: another leave waits beside it, both kept.
	b.PublishUserStatus("bo", awareness.StatusOffline)
	b.PublishPresence("d", []byte("a goodbye"), true)
	if n := testutil.ToFloat64(b.dropped); n != 2 {
		t.Fatalf("dropped %v, want still 2: leaves are kept", n)
	}
	queued, waiting := <-b.out, b.takeLeaves()
	if !queued.leave || len(waiting) != 1 || !waiting[0].leave {
		t.Fatalf("queued %+v, waiting %+v", queued, waiting)
	}
}

// An application's ephemeral message reaches the document's peers on the
// other nodes too, as on the sender's node, and never the sender.
func TestEphemeralsCrossNodes(t *testing.T) {
	docID := fmt.Sprint("eph-test-", time.Now().UnixNano())
	n1, n2 := startNode(t, "eph-n1"), startNode(t, "eph-n2")
	far, near, sender := &recorder{id: "far"}, &recorder{id: "near"}, &recorder{id: "sender"}
	n2.bus.Join(docID)
	n1.bus.Join(docID)
	n2.hub.Ephemeral(context.Background(), far, docID, doc.Ephemeral{SenderID: "far", SessionID: "f", Count: 1, Data: []byte{0xa0}})
	n1.hub.Ephemeral(context.Background(), near, docID, doc.Ephemeral{SenderID: "near", SessionID: "n", Count: 1, Data: []byte{0xa0}})
	subscribedOnBoth(t, n1, docID)
	hello := doc.Ephemeral{SenderID: "sender", SessionID: "s", Count: 7, Data: []byte("hello")}
	if err := n1.hub.Ephemeral(context.Background(), sender, docID, hello); err != nil {
		t.Fatal(err)
	}
	got := func(r *recorder) bool {
		for _, e := range r.ephemerals() {
			if e.SenderID == "sender" && e.SessionID == "s" && e.Count == 7 && string(e.Data) == "hello" {
				return true
			}
		}
		return false
	}
	testenv.WaitFor(t, "the peer on the other node", func() bool { return got(far) })
	if !got(near) {
		t.Fatal("the peer on the same node did not get it")
	}
	if got(sender) {
		t.Fatal("the sender got its own message back")
	}
}

// speakTo makes a peer on n say a cursor in the document and waits until
// the watcher, on another node, hears it.
func speakTo(t *testing.T, n *node, watcher *recorder, docID string) *recorder {
	t.Helper()
	speaker := &recorder{id: "speaker"}
	data, _ := cbor.Marshal(map[string]any{"__presence": map[string]any{"type": "update", "channel": "cursor", "value": "9@z"}})
	n.presence.Join(speaker, docID)
	n.presence.Receive(speaker, docID, awareness.Message{SenderID: "speaker", SessionID: "s", Count: 1, Data: data})
	testenv.WaitFor(t, "the cursor on the other node", func() bool {
		for _, m := range watcher.presence() {
			if m.SenderID == "speaker" {
				return true
			}
		}
		return false
	})
	return speaker
}

// A node killed and started again under the same id (a fixed --node-id)
// before its TTL ran out: the other nodes drop what its last run held as
// soon as they hear the new run, rather than when rosters or the remote
// TTL catch up (a minute here, so only the restart can end it).
func TestARestartedNodesPeersGoAtOnce(t *testing.T) {
	docID := fmt.Sprint("restart-test-", time.Now().UnixNano())
	slow := func(b *Config, p *awareness.Config) {
		b.NodeTTL, b.GossipInterval, p.RemoteTTL = time.Minute, time.Minute, time.Minute
	}
	n1, n2 := startNode(t, "restart-n1", slow), startNode(t, "restart-n2", slow)
	watcher := &recorder{id: "watcher"}
	n2.bus.Join(docID)
	n2.presence.Join(watcher, docID)
	n1.bus.Join(docID)
	subscribedOnBoth(t, n1, docID)
	speakTo(t, n1, watcher, docID)

	n1.bus.cfg.Client.Close() // killed: no goodbye, no bye
	n1.stop()
	startNode(t, "restart-n1", slow)
	testenv.WaitFor(t, "goodbye for the speaker of the last run", func() bool {
		for _, m := range watcher.presence() {
			if m.SenderID == "speaker" && presenceType(m) == "goodbye" {
				return true
			}
		}
		return false
	})
}

// countingDocs is a document layer that counts NodeGone.
type countingDocs struct {
	holdings
	gone atomic.Int32
}

func (d *countingDocs) NodeGone(string) { d.gone.Add(1) }

// bareBus returns a bus on the local Redis, neither attached nor
// started, with cfg's client and logger set; the test closes it.
func bareBus(t *testing.T, cfg Config) *Bus {
	t.Helper()
	cfg.Client = redis.NewClient(&redis.Options{Addr: testenv.RedisAddr()})
	t.Cleanup(func() { cfg.Client.Close() })
	cfg.Logger = testenv.QuietLogger()
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(context.Background()) })
	return b
}

// On a Redis Cluster a node's messages come over several shards, so one of
// its last run can arrive after the first of its new run: that one late
// message must not count as another restart.
func TestALateMessageOfAReplacedRunIsIgnored(t *testing.T) {
	b := bareBus(t, Config{NodeID: "late-run-me"})
	presence, err := awareness.New(awareness.Config{Logger: testenv.QuietLogger(), Replicator: b})
	if err != nil {
		t.Fatal(err)
	}
	docs := &countingDocs{holdings: holdings{held: map[string]bool{}}}
	b.Attach(docs, presence)
	from := func(run string, kind busKind) string {
		payload, _ := cbor.Marshal(busMsg{Kind: kind, Node: "late-run-other", Run: run})
		return string(payload)
	}
	b.dispatch(nodesChannel, from("r1", kindAlive))
	b.dispatch(nodesChannel, from("r2", kindAlive)) // restarted
	if n := docs.gone.Load(); n != 1 {
		t.Fatalf("NodeGone %d times after the restart, want 1", n)
	}
	b.dispatch(docChannel("d"), from("r1", kindHello)) // late, from another shard
	b.dispatch(nodesChannel, from("r2", kindAlive))
	if n := docs.gone.Load(); n != 1 {
		t.Fatalf("NodeGone %d times, want still 1: the late message of r1 was taken for another restart", n)
	}
}

// A channel's messages wait in one lane: while some wait in the lane of
// the shard that served it (a master failing over), the next goes there
// too, never to the lane of the shard that serves it now.
func TestAChannelsMessagesKeepToOneLane(t *testing.T) {
	b := bareBus(t, Config{NodeID: "lanes"})
	old := &lane{busy: true, waiting: []busOut{{channel: "c", leave: true}}} // retrying, on a dead master
	b.lanes["dead:1"] = old
	b.held["c"] = &held{in: old, n: 1}
	b.route(context.Background(), []busOut{{channel: "c"}, {channel: "other"}})
	if len(old.waiting) != 2 || old.waiting[1].channel != "c" {
		t.Fatalf("the old lane holds %+v: the channel's next message went elsewhere", old.waiting)
	}
	b.pmu.Lock()
	defer b.pmu.Unlock()
	if h := b.held["other"]; h == nil || h.in == old {
		t.Fatalf("another channel went to the old lane: %+v", h)
	}
}

// Two nodes that start watching a document at the same moment: node 1
// publishes a cursor before node 2 is subscribed, node 2 greets before
// node 1 is. Rosters and the heads exchange are slowed to a minute here,
// so only what node 1 sends once its own subscription is confirmed can
// bring the cursor across. (Subscriptions are asynchronous: the test
// makes that order certain by joining node 1's bus last.)
func TestNodesThatStartWatchingAtOnceHearEachOther(t *testing.T) {
	slow := func(b *Config, p *awareness.Config) { b.GossipInterval, p.RemoteTTL = time.Minute, time.Minute }
	n1, n2 := startNode(t, "at-once-1", slow), startNode(t, "at-once-2", slow)
	docID := fmt.Sprint("at-once-", time.Now().UnixNano())
	speaker := &recorder{id: "speaker"}
	n1.presence.Join(speaker, docID)
	data, _ := cbor.Marshal(map[string]any{"__presence": map[string]any{"type": "update", "channel": "cursor", "value": "1@a"}})
	n1.presence.Receive(speaker, docID, awareness.Message{SenderID: "speaker", SessionID: "s", Count: 1, Data: data})
	watcher := watch(t, n2, docID, "watcher")
	testenv.WaitFor(t, "node 2 subscribed", func() bool { return confirmedOn(n2.bus, docChannel(docID)) != "" })
	n1.bus.Join(docID)
	testenv.WaitWithin(t, "the cursor on node 2", 5*time.Second, func() bool { return heard(watcher, "speaker", "1@a") })
}

// A lane over its bound loses its newest messages other than leaves
// first, and leaves last; what stays keeps its order.
func TestATrimmedLaneKeepsItsLeavesLongest(t *testing.T) {
	l := &lane{waiting: []busOut{{channel: "a", leave: true}, {channel: "b"}, {channel: "c", leave: true}, {channel: "d"}}}
	cut := trimLane(l, 2)
	if len(cut) != 2 || cut[0].channel != "d" || cut[1].channel != "b" || len(l.waiting) != 2 || l.waiting[0].channel != "a" || l.waiting[1].channel != "c" {
		t.Fatalf("cut %+v, kept %+v", cut, l.waiting)
	}
	if cut = trimLane(l, 1); len(cut) != 1 || cut[0].channel != "c" || len(l.waiting) != 1 || l.waiting[0].channel != "a" {
		t.Fatalf("cut %+v, kept %+v", cut, l.waiting)
	}
}

// A user's status lost for a full queue is owed: the next beat sends the
// user's status here as it is then, since no roster repairs statuses.
func TestALostStatusIsSentAgain(t *testing.T) {
	b := bareBus(t, Config{NodeID: "owed", Queue: 1}) // never run: the test reads the queue itself
	presence, err := awareness.New(awareness.Config{Logger: testenv.QuietLogger(), Replicator: b})
	if err != nil {
		t.Fatal(err)
	}
	b.Attach(&holdings{held: map[string]bool{}}, presence)
	b.PublishUserStatus("ana", awareness.StatusOnline)
	b.PublishUserStatus("bo", awareness.StatusAway) // the queue is full: lost
	if q := <-b.out; q.user != "ana" {
		t.Fatalf("queued %+v", q)
	}
	b.resendStatuses()
	q := <-b.out
	if q.user != "bo" || q.status != awareness.StatusOffline {
		t.Fatalf("sent again %+v, want bo as this node sees them now (offline: not here)", q)
	}
	b.resendStatuses()
	select {
	case q := <-b.out:
		t.Fatalf("sent again twice: %+v", q)
	default:
	}
}
