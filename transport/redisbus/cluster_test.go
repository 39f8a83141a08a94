package redisbus

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/automerge/automerge-go"
	"github.com/fxamacker/cbor/v2"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tandemhq/tandem/awareness"
	"github.com/tandemhq/tandem/doc"
	"github.com/tandemhq/tandem/internal/testenv"
)

// These tests run the bus on a Redis Cluster of their own: three masters,
// a replica each (internal/testenv).

// onCluster makes a node's bus speak to the cluster.
func onCluster(t *testing.T, c *testenv.RedisCluster) func(*Config, *awareness.Config) {
	return func(b *Config, p *awareness.Config) {
		b.Client = c.Client(t)
		b.GossipInterval = 300 * time.Millisecond
		b.ProbeInterval = 200 * time.Millisecond
		p.RemoteTTL = 3 * b.GossipInterval // as cmd/tandem sets it
	}
}

// docOn finds a document id whose channel lives on the master that
// serves want's slot.
func docOn(t *testing.T, c *testenv.RedisCluster, prefix string, master *testenv.ClusterNode) string {
	t.Helper()
	for i := range 10000 {
		id := fmt.Sprintf("%s-%d-%d", prefix, time.Now().UnixNano(), i)
		if c.MasterOf(t, slotOf(docChannel(id))) == master {
			return id
		}
	}
	t.Fatalf("no document id falls on %s", master.Addr())
	return ""
}

// masters is the cluster's masters, in the order of the slots they serve.
func masters(t *testing.T, c *testenv.RedisCluster) []*testenv.ClusterNode {
	t.Helper()
	var ms []*testenv.ClusterNode
	for slot := 0; slot < slotCount; slot += 512 {
		if m := c.MasterOf(t, slot); m != nil && !slices.Contains(ms, m) {
			ms = append(ms, m)
		}
	}
	return ms
}

// confirmedOn is the address of the connection on which the bus's
// subscription to a channel is confirmed; "" when it is not.
func confirmedOn(b *Bus, channel string) string {
	s := b.sub
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.want[channel]
	if st == nil || !st.confirmed || st.on == nil {
		return ""
	}
	return st.on.addr
}

// writer is a client that edits a document through a node's hub.
type writer struct {
	rec   *recorder
	d     *automerge.Doc
	state *automerge.SyncState
	seen  int
}

func newWriter(id string) *writer {
	d := automerge.New()
	return &writer{rec: &recorder{id: id}, d: d, state: automerge.NewSyncState(d)}
}

// set commits one change and syncs it to the node, as a client would.
func (w *writer) set(t *testing.T, n *node, docID, key, value string) {
	t.Helper()
	if err := w.d.RootMap().Set(key, value); err != nil {
		t.Fatal(err)
	}
	w.d.Commit(key)
	for range 10 { // the hub answers synchronously
		if m, ok := w.state.GenerateMessage(); ok {
			n.hub.Sync(context.Background(), w.rec, doc.SyncMessage{DocumentID: docID, Data: m.Bytes()})
		}
		replies := w.rec.syncs()
		for _, b := range replies[w.seen:] {
			w.state.ReceiveMessage(b)
		}
		w.seen = len(replies)
	}
}

// sameHeads reports whether every node holds the writer's heads.
func sameHeads(w *writer, docID string, nodes ...*node) bool {
	want := w.d.Heads()
	for _, n := range nodes {
		heads, ok := n.hub.Heads(docID)
		if !ok || len(heads) != len(want) {
			return false
		}
		for i := range heads {
			if !bytes.Equal(heads[i], want[i][:]) {
				return false
			}
		}
	}
	return true
}

// watch makes a peer of n watch the document, as a connection's first
// message would.
func watch(t *testing.T, n *node, docID, id string) *recorder {
	t.Helper()
	r := &recorder{id: id}
	n.bus.Join(docID)
	n.presence.Join(r, docID)
	n.hub.Sync(context.Background(), r, doc.SyncMessage{DocumentID: docID, Data: emptySync(t), Request: true})
	return r
}

// say makes a peer on n say a cursor in the document.
func say(n *node, speaker *recorder, docID string, count uint64, cursor string) {
	data, _ := cbor.Marshal(map[string]any{"__presence": map[string]any{"type": "update", "channel": "cursor", "value": cursor}})
	n.presence.Receive(speaker, docID, awareness.Message{SenderID: speaker.id, SessionID: "s", Count: count, Data: data})
}

// heard reports whether the watcher was sent the speaker's cursor, in an
// update or in a snapshot.
func heard(watcher *recorder, speaker, cursor string) bool {
	for _, m := range watcher.presence() {
		var env struct {
			P struct {
				Value string
				State struct{ Cursor string }
			} `cbor:"__presence"`
		}
		if m.SenderID == speaker && cbor.Unmarshal(m.Data, &env) == nil && (env.P.Value == cursor || env.P.State.Cursor == cursor) {
			return true
		}
	}
	return false
}

// twoNodes starts two nodes on the cluster with a document on master: a
// watcher on node 2, node 1 watching too, and a writer on node 1 whose
// first change node 2 already holds.
func twoNodes(t *testing.T, c *testenv.RedisCluster, name string, master *testenv.ClusterNode) (n1, n2 *node, docID string, watcher *recorder, w *writer) {
	t.Helper()
	n1, n2 = startNode(t, name+"-1", onCluster(t, c)), startNode(t, name+"-2", onCluster(t, c))
	docID = docOn(t, c, name, master)
	watcher = watch(t, n2, docID, "watcher")
	n1.bus.Join(docID)
	testenv.WaitFor(t, "both subscribed", func() bool {
		return confirmedOn(n1.bus, docChannel(docID)) != "" && confirmedOn(n2.bus, docChannel(docID)) != ""
	})
	w = newWriter("writer")
	w.set(t, n1, docID, "k0", "v")
	testenv.WaitFor(t, "the first change on node 2", func() bool { return sameHeads(w, docID, n2) })
	return n1, n2, docID, watcher, w
}

// Three nodes, a document on each shard: edits and presence cross every
// pair of nodes, each over its shard's sharded channel.
func TestRedisClusterCarriesEditsAndPresenceAcrossShards(t *testing.T) {
	c := testenv.StartRedisCluster(t, 3)
	nodes := []*node{
		startNode(t, "rc-a", onCluster(t, c)), startNode(t, "rc-b", onCluster(t, c)), startNode(t, "rc-c", onCluster(t, c)),
	}
	for i, m := range masters(t, c) {
		docID := docOn(t, c, "shards", m)
		from, to := nodes[i], nodes[(i+1)%3]
		watcher := watch(t, to, docID, fmt.Sprint("watcher-", i))
		from.bus.Join(docID)
		testenv.WaitFor(t, "every subscription on the document's shard", func() bool {
			return confirmedOn(from.bus, docChannel(docID)) == m.Addr() && confirmedOn(to.bus, docChannel(docID)) == m.Addr()
		})
		w := newWriter("writer")
		w.set(t, from, docID, "title", "across shards")
		testenv.WaitFor(t, "the change on the other node", func() bool { return sameHeads(w, docID, to) })
		speaker := &recorder{id: fmt.Sprint("speaker-", i)}
		from.presence.Join(speaker, docID)
		say(from, speaker, docID, 1, "3@a")
		testenv.WaitFor(t, "the cursor on the other node", func() bool { return heard(watcher, speaker.id, "3@a") })
	}
	// One connection per master, for every node: not one per channel.
	for _, n := range nodes {
		n.bus.sub.mu.Lock()
		conns := len(n.bus.sub.shards)
		n.bus.sub.mu.Unlock()
		if conns != 3 {
			t.Errorf("node has %d subscription connections, want one per master (3)", conns)
		}
	}
}

// A master dies while a writer types: its replica takes over, every
// subscription moves to it within the cluster's node timeout plus 5 s,
// and every change the writer made reaches the other node, those made
// while the shard was down included; presence flows again.
func TestRedisClusterMasterKilledMidEdit(t *testing.T) {
	c := testenv.StartRedisCluster(t, 3)
	n1, n2, docID, watcher, w := twoNodes(t, c, "failover", masters(t, c)[0])
	slot := slotOf(docChannel(docID))
	// A peer of node 1 in the document whose shard fails: its rosters
	// stop while the shard is down, but node 2 does not hear the channel
	// then, so it keeps the peer rather than expiring it.
	stayer := &recorder{id: "stayer"}
	n1.presence.Join(stayer, docID)
	say(n1, stayer, docID, 1, "2@a")
	testenv.WaitFor(t, "the stayer's cursor on node 2", func() bool { return heard(watcher, "stayer", "2@a") })
	// A peer of node 1 in a document on a shard that stays up: node 2
	// must not take node 1 for dead while the other shard fails over.
	other := docOn(t, c, "bystander", masters(t, c)[1])
	otherWatcher := watch(t, n2, other, "other-watcher")
	n1.bus.Join(other)
	bystander := &recorder{id: "bystander"}
	n1.presence.Join(bystander, other)
	say(n1, bystander, other, 1, "1@a")
	testenv.WaitFor(t, "the bystander's cursor on node 2", func() bool { return heard(otherWatcher, "bystander", "1@a") })

	var typing sync.WaitGroup
	stop := make(chan struct{})
	var edits atomic.Int64
	typing.Add(1)
	go func() { // types on, while the shard fails over
		defer typing.Done()
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			w.set(t, n1, docID, fmt.Sprint("k", i), "v")
			edits.Add(1)
			time.Sleep(20 * time.Millisecond) // a typist's pace, not synchronisation
		}
	}()
	killed := time.Now()
	now := c.KillMaster(t, slot)
	t.Logf("the replica took over %v after the kill", time.Since(killed).Round(time.Millisecond))
	testenv.WaitWithin(t, "both subscriptions on the new master", 2*time.Second+5*time.Second-time.Since(killed), func() bool {
		return confirmedOn(n1.bus, docChannel(docID)) == now.Addr() && confirmedOn(n2.bus, docChannel(docID)) == now.Addr()
	})
	t.Logf("subscriptions on the new master %v after the kill", time.Since(killed).Round(time.Millisecond))
	start := edits.Load()
	testenv.WaitFor(t, "the writer typing on past the failover", func() bool { return edits.Load() >= start+10 })
	close(stop)
	typing.Wait()
	testenv.WaitFor(t, "every change on node 2", func() bool { return sameHeads(w, docID, n2) })
	for _, m := range otherWatcher.presence() {
		if m.SenderID == "bystander" && presenceType(m) == "goodbye" {
			t.Fatal("node 2 said goodbye for a peer of node 1 while a shard failed over: it took node 1 for dead")
		}
	}
	for _, m := range watcher.presence() {
		if m.SenderID == "stayer" && presenceType(m) == "goodbye" {
			t.Fatal("node 2 said goodbye for a peer in the failed shard's document: its silence was taken for absence")
		}
	}
	if got := testutil.ToFloat64(n1.bus.resubscribed.WithLabelValues("lost")); got < 1 {
		t.Errorf("resubscribed{lost} = %v, want the document's channel counted", got)
	}

	speaker := &recorder{id: "speaker"}
	n1.presence.Join(speaker, docID)
	say(n1, speaker, docID, 1, "7@b")
	testenv.WaitFor(t, "a cursor after the failover", func() bool { return heard(watcher, "speaker", "7@b") })
}

// A slot moves to another master while a writer types (a reshard): Redis
// unsubscribes the channel on the old master, the bus subscribes it on
// the new one, and the edits keep flowing.
func TestRedisClusterSlotMovedMidEdit(t *testing.T) {
	c := testenv.StartRedisCluster(t, 3)
	ms := masters(t, c)
	n1, n2, docID, _, w := twoNodes(t, c, "moved", ms[0])
	slot := slotOf(docChannel(docID))
	c.MoveSlot(t, slot, ms[1])
	moved := time.Now()
	w.set(t, n1, docID, "k1", "v")
	testenv.WaitWithin(t, "both subscriptions on the slot's new master", 10*time.Second, func() bool {
		return confirmedOn(n1.bus, docChannel(docID)) == ms[1].Addr() && confirmedOn(n2.bus, docChannel(docID)) == ms[1].Addr()
	})
	t.Logf("subscriptions on the slot's new master %v after every node knew", time.Since(moved).Round(time.Millisecond))
	w.set(t, n1, docID, "k2", "v")
	testenv.WaitFor(t, "every change on node 2", func() bool { return sameHeads(w, docID, n2) })
	if got := testutil.ToFloat64(n2.bus.resubscribed.WithLabelValues("moved")); got < 1 {
		t.Errorf("resubscribed{moved} = %v, want the document's channel counted", got)
	}
}

// The whole Redis Cluster restarts (its keys gone): the nodes subscribe
// again and catch up, and edits and presence flow as before.
func TestRedisClusterRestarted(t *testing.T) {
	c := testenv.StartRedisCluster(t, 3)
	n1, n2, docID, watcher, w := twoNodes(t, c, "restart", masters(t, c)[2])

	c.Restart(t)
	w.set(t, n1, docID, "k1", "v") // may be published into the void: the heads exchange repairs it
	testenv.WaitWithin(t, "the change made across the restart on node 2", 30*time.Second, func() bool { return sameHeads(w, docID, n2) })
	speaker := &recorder{id: "speaker"}
	n1.presence.Join(speaker, docID)
	say(n1, speaker, docID, 1, "5@c")
	testenv.WaitFor(t, "a cursor after the restart", func() bool { return heard(watcher, "speaker", "5@c") })
}
