package redisbus

// Node membership: heartbeats and the node key, silent nodes expired,
// and the periodic heads and rosters of every watched document.

import (
	"context"
	"strings"
	"time"
)

// nodesChannel carries what every node hears: on a Redis Cluster there is
// one per master (subscriber.onEvery), and every node publishes to each,
// so that a shard failing over silences no node.
const nodesChannel = "tandem:nodes"

// toNodes publishes a message to every node.
func (b *Bus) toNodes(payload []byte) {
	for _, ch := range b.sub.onEvery(nodesChannel) {
		b.enqueue(busOut{channel: ch, payload: payload})
	}
}

// inboxChannel carries what is meant for one node only: the answers to
// its questions. On a Redis Cluster, like the nodes channel, it is one per
// master (subscriber.onEvery), and each answer goes to every one.
func inboxChannel(node string) string { return "tandem:inbox:" + node }

// isInbox reports whether a channel is this node's inbox, on any shard.
func (b *Bus) isInbox(channel string) bool {
	inbox := inboxChannel(b.cfg.NodeID)
	if channel == inbox {
		return true
	}
	// "{tag}" then the name (onShard)
	_, name, ok := strings.Cut(channel, "}")
	return ok && strings.HasPrefix(channel, "{") && name == inbox
}

// RosterInterval is how often the node lists its peers of each watched
// document to the others (with the document's heads).
func (b *Bus) RosterInterval() time.Duration { return b.cfg.GossipInterval }

// NodeAlive reports whether a node's key is in Redis: it beat within
// its TTL (a node that stopped cleanly deleted it).
func (b *Bus) NodeAlive(ctx context.Context, node string) (bool, error) {
	n, err := b.cfg.Client.Exists(ctx, "tandem:node:"+node).Result()
	return n > 0, err
}

// beatLoop announces this node, renews its peer id claims, gossips heads,
// and expires silent nodes.
func (b *Bus) beatLoop(ctx context.Context) {
	beat := time.NewTicker(b.cfg.NodeTTL / 5)
	defer beat.Stop()
	defer b.writes.Wait()
	gossip := time.NewTicker(b.cfg.GossipInterval)
	defer gossip.Stop()
	alive, _ := b.encode(busMsg{Kind: kindAlive})
	b.beat(ctx, alive) // at once: a node restarted under its id is told apart now
	for {
		select {
		case <-ctx.Done():
			return
		case <-beat.C:
			b.beat(ctx, alive)
		case peer := <-b.recheck:
			b.renewClaims(ctx, b.claimsOf(peer))
		case <-gossip.C:
			b.gossip()
		}
	}
}

// beat announces this node, renews its key, its users' statuses and its
// peer id claims, and expires silent nodes. The heartbeat goes through the
// lanes and the writes on a goroutine of their own: a shard that does not
// answer delays neither the next beat nor the other shards.
func (b *Bus) beat(ctx context.Context, alive []byte) {
	b.toNodes(alive)
	b.resendStatuses()
	b.expireNodes()
	if !b.writing.CompareAndSwap(false, true) {
		return // the last beat's writes still wait for Redis
	}
	b.writes.Add(1)
	go func() {
		defer b.writes.Done()
		defer b.writing.Store(false)
		pipe := b.cfg.Client.Pipeline()
		pipe.Set(ctx, "tandem:node:"+b.cfg.NodeID, time.Now().UnixMilli(), b.cfg.NodeTTL)
		for user, st := range b.presence.LocalUserStatuses() {
			b.writeUserStatus(ctx, pipe, user, st)
		}
		claims := b.claimsOf("")
		renewals := b.queueRenewals(ctx, pipe, claims)
		pipe.Exec(ctx) // while Redis is away the others will expire us; nothing to do here
		b.actOnRenewals(ctx, claims, renewals, true)
	}()
}

func (b *Bus) expireNodes() {
	now := time.Now()
	var gone []string
	b.mu.Lock()
	for n, seen := range b.nodes {
		if now.Sub(seen) > b.cfg.NodeTTL {
			gone = append(gone, n)
			delete(b.nodes, n)
			delete(b.runs, n)
		}
	}
	for run, at := range b.ended {
		if now.Sub(at) > 2*b.cfg.NodeTTL {
			delete(b.ended, run)
		}
	}
	for q, at := range b.asked {
		if now.Sub(at) > 2*b.cfg.AskTimeout {
			delete(b.asked, q)
		}
	}
	b.mu.Unlock()
	for _, n := range gone {
		b.log.Warn("bus: node silent past its TTL; removing its peers", "node", n)
		b.nodeGone(n)
	}
}

// gossip publishes the heads of every watched document.
func (b *Bus) gossip() {
	b.mu.Lock()
	docs := make([]string, 0, len(b.watched))
	for id := range b.watched {
		docs = append(docs, id)
	}
	b.mu.Unlock()
	for _, id := range docs {
		b.docs.AnnounceHeads(id)
		b.presence.AnnounceRoster(id)
	}
}
