package redisbus

// Publishing (BUS.md, "Loss and order"): what the layers hand the bus
// waits in a bounded queue, then in its shard's lane, sent in pipelines.
// Both are bounded in messages (Queue each) and together in bytes
// (QueueBytes): a message's bytes are charged before it is queued and
// given back once it is published or dropped. Leaves are never dropped
// for a full queue or the byte bound, and only past their own bound
// (maxLeaves) in a lane.

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tandemhq/tandem/awareness"
)

type busOut struct {
	channel string
	payload []byte
	// leave marks a peer's goodbye or a user's offline status: never
	// dropped for a full queue.
	leave bool
	// A user's status on this node, written to its hash at once as well.
	user   string
	status awareness.Status
}

// size is what a message weighs in the byte bound (QueueBytes).
func (o busOut) size() int64 { return int64(len(o.channel) + len(o.payload) + len(o.user)) }

// PublishDocument implements doc.Cluster: the bytes go to the document's
// channel as they are.
func (b *Bus) PublishDocument(documentID string, payload []byte) {
	b.send(documentID, busMsg{Kind: kindDoc, Data: payload})
}

// PublishPresence implements awareness.Replicator: the bytes go to the
// document's channel as they are; a leave is never dropped for a full
// queue.
func (b *Bus) PublishPresence(documentID string, payload []byte, leave bool) {
	b.sendMarked(documentID, busMsg{Kind: kindPresence, Data: payload}, leave)
}

// AskState implements awareness.Replicator: a hello asks every node that
// watches the document for its state there (presence and heads).
func (b *Bus) AskState(documentID string) {
	b.send(documentID, busMsg{Kind: kindHello})
}

func (b *Bus) send(documentID string, m busMsg) { b.sendMarked(documentID, m, false) }

func (b *Bus) sendMarked(documentID string, m busMsg, leave bool) {
	payload, err := b.encode(m)
	if err != nil {
		b.log.Error("bus: encode", "err", err)
		return
	}
	b.enqueue(busOut{channel: docChannel(documentID), payload: payload, leave: leave})
}

// maxLeaves bounds the leaves waiting past a full queue (one per peer
// that left while Redis was away, say); past it the rosters repair.
const maxLeaves = 1 << 16

func (b *Bus) enqueue(o busOut) {
	if b.lose != nil && b.lose(o) {
		return
	}
	if b.queued.Add(o.size()) > b.cfg.QueueBytes && !o.leave {
		b.drop(o) // a leave passes the byte bound: it weighs little, and maxLeaves bounds it
		return
	}
	select {
	case b.out <- o:
		return
	default:
	}
	if o.leave {
		// Make room at the tail by dropping the oldest message, so that
		// the leave goes after everything queued before it: an "offline"
		// must not overtake an older "online" of the same user (statuses
		// carry no clock). Only if the oldest is a leave too does one
		// wait in the list of leaves, sent before the queue.
		select {
		case old := <-b.out:
			if !old.leave || !b.holdLeave(old) {
				b.drop(old)
			}
		default:
		}
		select {
		case b.out <- o:
			return
		default:
		}
		if b.holdLeave(o) {
			return
		}
	}
	b.drop(o)
}

// drop counts a message lost and gives back its bytes. A user's status
// is owed: the next beat sends the user's status here as it is then
// (resendStatuses), since no roster repairs statuses.
func (b *Bus) drop(m busOut) {
	b.release(m)
	b.dropped.Inc()
	if m.user != "" {
		b.mu.Lock()
		b.owed[m.user] = true
		b.mu.Unlock()
	}
}

// release gives back the bytes of messages that left the queue and the
// lanes, published or lost.
func (b *Bus) release(ms ...busOut) {
	var n int64
	for _, m := range ms {
		n += m.size()
	}
	b.queued.Add(-n)
}

// resendStatuses publishes again the statuses of the users whose last
// status message was lost.
func (b *Bus) resendStatuses() {
	b.mu.Lock()
	owed := b.owed
	if len(owed) > 0 {
		b.owed = make(map[string]bool)
	}
	b.mu.Unlock()
	if len(owed) == 0 {
		return
	}
	statuses := b.presence.LocalUserStatuses()
	for user := range owed {
		st, ok := statuses[user]
		if !ok {
			st = awareness.StatusOffline
		}
		b.PublishUserStatus(user, st)
	}
}

// holdLeave keeps a leave that found no room in the queue; it reports
// false past maxLeaves.
func (b *Bus) holdLeave(o busOut) bool {
	b.lmu.Lock()
	kept := len(b.leaves) < maxLeaves
	if kept {
		b.leaves = append(b.leaves, o)
	}
	b.lmu.Unlock()
	if kept {
		select {
		case b.leavesWaiting <- struct{}{}:
		default:
		}
	}
	return kept
}

// takeLeaves returns the leaves waiting past the queue, oldest first.
func (b *Bus) takeLeaves() []busOut {
	b.lmu.Lock()
	defer b.lmu.Unlock()
	ls := b.leaves
	b.leaves = nil
	return ls
}

// publishLoop hands the queue to the shards' lanes, many messages at a
// time; it never waits for Redis.
func (b *Bus) publishLoop(ctx context.Context) {
	defer b.lanesDone.Wait()
	for {
		batch := b.takeLeaves()
		if len(batch) == 0 {
			select {
			case <-ctx.Done():
				return
			case m := <-b.out:
				batch = append(batch, m)
			case <-b.leavesWaiting:
				continue
			}
		}
	more:
		for len(batch) < 256 {
			select {
			case m := <-b.out:
				batch = append(batch, m)
			default:
				break more
			}
		}
		b.route(ctx, batch)
	}
}

// lane is what waits for one shard (the one Redis, or a cluster's
// master), sent one pipeline at a time: a shard that fails or is slow
// holds up its own channels only.
type lane struct {
	busy    bool
	waiting []busOut
}

// held is where a channel's messages wait, and how many: a channel's next
// message joins them there even if its shard changed meanwhile (a
// failover), so that it never overtakes them.
type held struct {
	in *lane
	n  int
}

// sentLocked forgets messages that left their lane (published or lost).
func (b *Bus) sentLocked(ms []busOut) {
	for _, m := range ms {
		if h := b.held[m.channel]; h != nil {
			if h.n--; h.n <= 0 {
				delete(b.held, m.channel)
			}
		}
	}
}

// route appends messages to their shards' lanes and starts the idle ones.
// A lane holds at most Queue messages, and maxLeaves leaves more; past
// that what comes is dropped.
func (b *Bus) route(ctx context.Context, batch []busOut) {
	b.pmu.Lock()
	defer b.pmu.Unlock()
	for _, m := range batch {
		h := b.held[m.channel]
		if h == nil {
			addr := b.sub.shardOf(m.channel)
			l := b.lanes[addr]
			if l == nil {
				l = &lane{}
				b.lanes[addr] = l
			}
			h = &held{in: l}
		}
		l := h.in
		if n := len(l.waiting); (n >= b.cfg.Queue && !m.leave) || n >= b.cfg.Queue+maxLeaves {
			b.drop(m) // a leave only past maxLeaves more
			continue
		}
		l.waiting = append(l.waiting, m)
		h.n++
		b.held[m.channel] = h
		if !l.busy {
			l.busy = true
			b.lanesDone.Add(1)
			go func() { defer b.lanesDone.Done(); b.sendLane(ctx, l) }()
		}
	}
}

// sendLane publishes a lane's messages until it is empty or ctx ends.
// Leaves that fail go back to the lane's head, in order; other messages
// that fail are lost, repaired by the heads exchange and rosters.
func (b *Bus) sendLane(ctx context.Context, l *lane) {
	var retry time.Duration // after a failed round trip, wait this long
	for {
		if retry > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(retry):
			}
		}
		b.pmu.Lock()
		n := min(len(l.waiting), 256)
		if n == 0 || ctx.Err() != nil {
			l.busy = false // what is left is the goodbye's (serve)
			b.pmu.Unlock()
			return
		}
		// Resliced, not shifted: a backlog is not copied for every batch
		// (appends past its end reallocate it without what was sent).
		batch := l.waiting[:n:n]
		l.waiting = l.waiting[n:]
		b.pmu.Unlock()

		pipe := b.cfg.Client.Pipeline()
		cmds := make([]*redis.IntCmd, len(batch))
		for i, m := range batch {
			cmds[i] = b.queue(ctx, pipe, m)
		}
		_, err := pipe.Exec(ctx)
		if err == nil {
			retry = 0
			b.published.Add(float64(len(batch)))
			b.pmu.Lock()
			b.sentLocked(batch)
			b.pmu.Unlock()
			b.release(batch...)
			continue
		}
		var kept, gone, lost []busOut
		for i, c := range cmds {
			switch {
			case c.Err() == nil:
				gone = append(gone, batch[i])
			case batch[i].leave:
				kept = append(kept, batch[i])
			default:
				lost = append(lost, batch[i])
			}
		}
		failed := len(kept) + len(lost)
		b.pmu.Lock()
		l.waiting = append(kept, l.waiting...)
		lost = append(lost, trimLane(l, b.cfg.Queue+maxLeaves)...)
		b.sentLocked(gone)
		b.sentLocked(lost)
		b.pmu.Unlock()
		b.release(gone...)
		for _, m := range lost {
			b.drop(m)
		}
		b.published.Add(float64(len(batch) - failed))
		b.log.Debug("bus: publish failed", "messages", failed, "dropped", len(lost), "err", err)
		b.sub.suspect()
		retry = min(max(2*retry, 50*time.Millisecond), time.Second)
	}
}

// trimLane cuts a lane to limit messages, the newest other than leaves
// first, then the newest leaves, and returns what it cut. What stays keeps
// its order.
func trimLane(l *lane, limit int) []busOut {
	over := len(l.waiting) - limit
	if over <= 0 {
		return nil
	}
	var cut []busOut
	for pass := 0; pass < 2 && over > 0; pass++ {
		for i := len(l.waiting) - 1; i >= 0 && over > 0; i-- {
			if pass == 0 && l.waiting[i].leave {
				continue
			}
			cut = append(cut, l.waiting[i])
			l.waiting = append(l.waiting[:i], l.waiting[i+1:]...)
			over--
		}
	}
	return cut
}

// laneLeft takes what the lanes still hold, for the goodbye.
func (b *Bus) laneLeft() []busOut {
	b.pmu.Lock()
	defer b.pmu.Unlock()
	var left []busOut
	for _, l := range b.lanes {
		left = append(left, l.waiting...)
		l.waiting = nil
	}
	clear(b.held)
	return left
}

// queue adds one outgoing message to a pipeline; the publish's command
// tells whether it went out.
func (b *Bus) queue(ctx context.Context, pipe redis.Pipeliner, m busOut) *redis.IntCmd {
	cmd := b.publish(ctx, pipe, m.channel, m.payload)
	if m.user == "" {
		return cmd
	}
	if m.status == awareness.StatusOffline {
		pipe.HDel(ctx, userKey(m.user), b.cfg.NodeID)
		return cmd
	}
	b.writeUserStatus(ctx, pipe, m.user, m.status)
	return cmd
}
