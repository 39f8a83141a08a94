package redisbus

// Subscriptions and receiving: the document channels follow the documents
// this node's clients watch; one loop receives every channel and hands each
// message to its layer (BUS.md, "Receiving").

import (
	"context"
	"strings"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/redis/go-redis/v9"
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
// documents, off the callers' goroutines (Redis may be slow or away).
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
				sub = append(sub, id)
			} else if !want && b.subscribed[id] {
				unsub = append(unsub, id)
			}
		}
		clear(b.changed)
		var usub, uunsub []string
		for id := range b.usersDirty {
			if b.users[id] && !b.usersSub[id] {
				usub = append(usub, id)
				b.usersSub[id] = true
			} else if !b.users[id] && b.usersSub[id] {
				uunsub = append(uunsub, id)
				delete(b.usersSub, id)
			}
		}
		clear(b.usersDirty)
		b.mu.Unlock()
		b.followUsers(ctx, usub, uunsub)
		if len(unsub) > 0 {
			chans := make([]string, len(unsub))
			for i, id := range unsub {
				chans[i] = docChannel(id)
			}
			b.ps.Unsubscribe(ctx, chans...)
			b.mu.Lock()
			for _, id := range unsub {
				delete(b.subscribed, id)
			}
			b.mu.Unlock()
		}
		if len(sub) > 0 {
			chans := make([]string, len(sub))
			for i, id := range sub {
				chans[i] = docChannel(id)
			}
			if err := b.ps.Subscribe(ctx, chans...); err != nil {
				b.log.Warn("bus: subscribe", "documents", len(sub), "err", err)
			}
			b.mu.Lock()
			for _, id := range sub {
				b.subscribed[id] = true // go-redis resubscribes it after a reconnect
			}
			b.mu.Unlock()
			for _, id := range sub {
				b.send(id, busMsg{Kind: kindHello})
			}
		}
	}
}

// receiveLoop dispatches what other nodes publish. After a lost
// connection, go-redis resubscribes; this loop then greets every watched
// document again so that all nodes catch up.
func (b *Bus) receiveLoop(ctx context.Context) {
	broken := false
	for {
		msg, err := b.ps.Receive(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if !broken {
				b.log.Warn("bus: Redis connection lost; serving local clients only", "err", err)
			}
			broken = true
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		if broken {
			broken = false
			b.log.Info("bus: Redis is back; catching up")
			b.catchUp(ctx)
		}
		if m, ok := msg.(*redis.Message); ok {
			b.dispatch(m)
		}
	}
}

// catchUp has the documents in memory read the store, greets every
// watched document again (go-redis has resubscribed) and rereads the
// statuses of followed users.
func (b *Bus) catchUp(ctx context.Context) {
	b.docs.Missed()
	b.mu.Lock()
	docs := make([]string, 0, len(b.watched))
	for id := range b.watched {
		docs = append(docs, id)
	}
	users := make([]string, 0, len(b.usersSub))
	for id := range b.usersSub {
		users = append(users, id)
	}
	b.mu.Unlock()
	b.readUsers(ctx, users)
	for _, id := range docs {
		b.send(id, busMsg{Kind: kindHello})
		b.presence.SendState(id)
		b.docs.AnnounceHeads(id)
	}
}

func (b *Bus) dispatch(rm *redis.Message) {
	var m busMsg
	if err := cbor.Unmarshal([]byte(rm.Payload), &m); err != nil {
		b.log.Warn("bus: undecodable message", "channel", rm.Channel, "err", err)
		return
	}
	if m.Node == b.cfg.NodeID {
		return // our own, echoed by Redis
	}
	b.received.Inc()
	b.mu.Lock()
	_, known := b.nodes[m.Node]
	prev := b.runs[m.Node]
	restarted := prev != "" && m.Run != "" && m.Run != prev
	if m.Kind == kindBye {
		delete(b.nodes, m.Node)
		delete(b.runs, m.Node)
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
		if rm.Channel == inboxChannel(b.cfg.NodeID) {
			b.answered(m.Node, m.Ask, m.Doc, m.Found)
		}
		return
	}
	if user, ok := strings.CutPrefix(rm.Channel, "tandem:user:"); ok {
		if m.Kind == kindUser && m.User == user {
			b.presence.ApplyUserStatus(m.Node, user, m.Status)
		}
		return
	}
	docID, ok := strings.CutPrefix(rm.Channel, "tandem:doc:")
	if !ok {
		return
	}
	switch m.Kind {
	case kindDoc:
		// The document layer queues what takes its rooms' locks: presence
		// does not wait for it.
		if err := b.docs.Receive(docID, m.Data); err != nil {
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
