package redisbus

// Subscriptions and receiving: the document channels follow the documents
// this node's clients watch (subscriber.go keeps them subscribed); each
// message goes to its layer (BUS.md, "Receiving").

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/fxamacker/cbor/v2"
)

// Join counts a local connection on a document; the first one makes the
// node subscribe to the document's channel. It never blocks on Redis.
func (b *Bus) Join(documentID string) {
	b.mu.Lock()
	b.watched[documentID]++
	b.changed[documentID] = true
	b.mu.Unlock()
	b.poke()
}

// Leave undoes Join; after the last one the node unsubscribes.
func (b *Bus) Leave(documentID string) {
	b.mu.Lock()
	if b.watched[documentID]--; b.watched[documentID] <= 0 {
		delete(b.watched, documentID)
	}
	b.changed[documentID] = true
	b.mu.Unlock()
	b.poke()
}

func (b *Bus) poke() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// subscribeLoop brings the subscriptions in line with the watched
// documents and followed users, and acts on the subscriptions Redis
// confirms; off the callers' goroutines (Redis may be slow or away).
func (b *Bus) subscribeLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.wake:
		}
		b.mu.Lock()
		var sub, unsub []string
		for id := range b.changed {
			want := b.watched[id] > 0
			if want && !b.subscribed[id] {
				sub = append(sub, docChannel(id))
				b.subscribed[id] = true
			} else if !want && b.subscribed[id] {
				unsub = append(unsub, docChannel(id))
				delete(b.subscribed, id)
			}
		}
		clear(b.changed)
		for id := range b.usersDirty {
			if b.users[id] && !b.usersSub[id] {
				sub = append(sub, userChannel(id))
				b.usersSub[id] = true
			} else if !b.users[id] && b.usersSub[id] {
				unsub = append(unsub, userChannel(id))
				delete(b.usersSub, id)
			}
		}
		clear(b.usersDirty)
		ready := b.ready
		b.ready = nil
		b.mu.Unlock()
		b.sub.remove(unsub...)
		b.sub.add(sub...)
		if len(ready) > 0 {
			b.catchUp(ctx, ready)
		}
	}
}

// Hears implements awareness.Replicator: the document's channel has been
// subscribed for three roster intervals, so a live node's roster would
// have come.
func (b *Bus) Hears(documentID string) bool {
	since, ok := b.sub.heardSince(docChannel(documentID))
	return ok && time.Since(since) >= 3*b.cfg.GossipInterval
}

// confirmed is the subscriber's word that a channel is subscribed: for
// subscribeLoop to act on.
func (b *Bus) confirmed(channel string, resumed bool) {
	b.mu.Lock()
	b.ready = append(b.ready, confirmation{channel, resumed})
	b.mu.Unlock()
	b.poke()
}

// catchUp acts on confirmed subscriptions. A document channel greets the
// other nodes (hello) once it hears their answers, and sends this node's
// state and heads; after a loss the documents in memory also read the
// store. A user's channel reads the statuses the other nodes last wrote.
func (b *Bus) catchUp(ctx context.Context, ready []confirmation) {
	var docs []confirmation // of document ids
	var users []string
	resumed := 0
	for _, c := range ready {
		if c.resumed {
			resumed++
		}
		if id, ok := strings.CutPrefix(c.channel, "tandem:doc:"); ok {
			docs = append(docs, confirmation{id, c.resumed})
		} else if id, ok := strings.CutPrefix(c.channel, "tandem:user:"); ok {
			users = append(users, id)
		}
	}
	if resumed > 0 {
		b.log.Info("bus: Redis subscriptions are back; catching up", "channels", resumed)
		b.docs.Missed()
	}
	b.mu.Lock()
	users = slices.DeleteFunc(users, func(id string) bool { return !b.usersSub[id] })
	b.mu.Unlock()
	b.readUsers(ctx, users)
	for _, d := range docs {
		b.mu.Lock()
		watched := b.watched[d.channel] > 0
		b.mu.Unlock()
		if !watched {
			continue
		}
		// Its own state and heads too: what it published before the
		// others' subscriptions were made (or while its own was lost) went
		// unheard, and a hello of theirs may have come before its own
		// subscription did.
		b.send(d.channel, busMsg{Kind: kindHello})
		b.presence.SendState(d.channel)
		b.docs.AnnounceHeads(d.channel)
	}
}

// dispatch hands a message another node published to its layer. Each
// subscription connection has a reader: dispatch takes them one at a time.
func (b *Bus) dispatch(channel, payload string) {
	var m busMsg
	if err := cbor.Unmarshal([]byte(payload), &m); err != nil {
		b.log.Warn("bus: undecodable message", "channel", channel, "err", err)
		return
	}
	if m.Node == b.cfg.NodeID {
		return // our own, echoed by Redis
	}
	if !b.attached.Load() {
		// Subscribed since New, not yet given its layers: only answers
		// to this node's questions can be taken.
		if m.Kind == kindAnswer && b.isInbox(channel) {
			b.answered(m.Node, m.Ask, m.Doc, m.Found)
		}
		return
	}
	b.dmu.Lock()
	defer b.dmu.Unlock()
	b.received.Inc()
	b.mu.Lock()
	if _, gone := b.ended[m.Run]; gone && m.Run != "" {
		// The run said bye, or its node was heard restarted: on a Redis
		// Cluster its last messages on other shards' channels may come
		// after that.
		b.mu.Unlock()
		return
	}
	_, known := b.nodes[m.Node]
	prev := b.runs[m.Node]
	restarted := prev != "" && m.Run != "" && m.Run != prev
	if restarted {
		b.ended[prev] = time.Now()
	}
	if m.Kind == kindBye {
		delete(b.nodes, m.Node)
		delete(b.runs, m.Node)
		if m.Run != "" {
			b.ended[m.Run] = time.Now()
		}
	} else {
		b.nodes[m.Node] = time.Now()
		if m.Run != "" {
			b.runs[m.Node] = m.Run
		}
	}
	b.mu.Unlock()
	if restarted {
		// Killed and started again under the same id before its TTL ran
		// out: what its last run held is gone, now.
		b.log.Warn("bus: a node restarted; removing the peers of its last run", "node", m.Node)
		b.nodeGone(m.Node)
		known = false
	}
	if m.Kind == kindBye {
		b.log.Info("bus: a node said goodbye", "node", m.Node)
		b.nodeGone(m.Node)
		return
	}
	if !known || m.Kind == kindAlive {
		b.presence.NodeAlive(m.Node)
	}
	switch m.Kind {
	case kindClaim:
		b.recheckClaims(m.Peer)
		return
	case kindAsk:
		b.answer(m)
		return
	case kindAnswer:
		if b.isInbox(channel) {
			b.answered(m.Node, m.Ask, m.Doc, m.Found)
		}
		return
	}
	if user, ok := strings.CutPrefix(channel, "tandem:user:"); ok {
		if m.Kind == kindUser && m.User == user {
			b.presence.ApplyUserStatus(m.Node, user, m.Status)
		}
		return
	}
	docID, ok := strings.CutPrefix(channel, "tandem:doc:")
	if !ok {
		return
	}
	switch m.Kind {
	case kindDoc:
		// The document layer queues what takes its rooms' locks: presence
		// does not wait for it.
		if err := b.docs.ReceiveRemote(docID, m.Data); err != nil {
			b.log.Warn("bus: a document message", "node", m.Node, "err", err)
		}
	case kindPresence:
		if len(m.Data) == 0 {
			return // an older node's delta (BUS.md): not readable here
		}
		if err := b.presence.ReceiveRemote(m.Node, docID, m.Data); err != nil {
			b.log.Warn("bus: a presence message", "node", m.Node, "err", err)
		}
	case kindHello:
		b.presence.SendState(docID)
		b.docs.AnnounceHeads(docID)
	}
}
