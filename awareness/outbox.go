package awareness

import (
	"maps"
	"slices"
	"sync/atomic"
	"time"
)

// The outbox: how presence leaves the hub's lock.
//
// Merging a message into the room is quick; sending it to every other
// member (encode, queue on each connection) is the bulk of the work. So
// the hub only queues a delivery under its lock, and one dispatcher at a
// time sends the queue in order, outside the lock, assigning the relay
// counts as it goes: receivers see counts rise in the order they are sent.
//
// Under pressure the queue is where updates wait, so it is where newest
// wins: an update of a (document, peer, channel) still queued takes the
// newer value in place rather than queueing another. Readers never wait
// behind the fan-out, and what goes out is the newest value, not a
// backlog. A replacement never reorders a value past a message it must
// not pass: a snapshot or goodbye of the same peer, or a change of the
// room's members (a newcomer's room snapshot), ends replacement for what
// was queued before it.
//
// The dispatcher is whoever queued first when none was running: at light
// load the caller delivers before it returns (tests see sends at once).
// With a Config.SendWindow, it is a timer that fires that long after the
// first queueing instead: what is queued meanwhile goes out with it, so a
// document's updates of a few milliseconds share a frame and a write.
// One that has dispatched for dispatchTenure hands the rest to a goroutine
// of its own, so a connection's reader never stays away from its socket.

// maxOutbox bounds the deliveries waiting in the outbox. Updates coalesce
// (newest per document, peer and channel) and goodbyes are one per peer
// that leaves, so what can pile up is the room snapshots newcomers are
// sent, one per peer present: past the bound those wait for the
// newcomer's next message (sendRoomTo). A var for tests.
var maxOutbox = 1 << 16

// dispatchTenure is how long a caller dispatches before it hands over.
const dispatchTenure = 2 * time.Millisecond

// delivery is one presence message in a peer's name to some members of a
// document.
type delivery struct {
	doc    string
	sender string
	msg    *presenceMessage
	// to is the room's member list when the delivery was queued, shared
	// with the room and never changed (the sender, if a member, is
	// skipped when sending); or, with only set, the one newcomer.
	to     []Peer
	only   bool
	member bool   // the sender is in to
	epoch  uint64 // the room's epoch when queued
}

// docPeer names one peer in one document.
type docPeer struct{ doc, peer string }

// outbox is the hub's queue of deliveries. Guarded by Hub.mu.
type outbox struct {
	queue []*delivery
	spare []*delivery // the array of the queue sent last, reused
	// latest holds, per peer of a document, the queued updates by
	// channel that a newer value of the channel may still replace.
	latest map[docPeer]map[string]*delivery
	epoch  uint64 // the last epoch given to a room
	// dispatching is set while a dispatcher runs. It changes under
	// Hub.mu; queuers read it without the lock to leave at once.
	dispatching atomic.Bool
	// window is the send window's timer while it runs (dispatch), so
	// that a tick can end it early (dispatchNow).
	window *time.Timer
}

// enqueue queues m from peer to the other members of r. An update of one
// channel replaces the same channel's update still queued, if the room's
// members have not changed since.
func (h *Hub) enqueue(r *room, peer string, m *presenceMessage) {
	dp := docPeer{r.id, peer}
	var channel string
	switch m.Type {
	case TypeUpdate:
		channel = m.Channel
	case TypeHeartbeat:
		channel = heartbeatChannel
	default:
		// A snapshot or goodbye: nothing queued before it may take a
		// value newer than it carries.
		delete(h.out.latest, dp)
	}
	if channel != "" {
		if d := h.out.latest[dp][channel]; d != nil && d.epoch == r.epoch {
			d.msg = m
			h.metrics.updates.WithLabelValues("superseded").Inc()
			return
		}
	}
	_, member := r.members[peer]
	if len(r.members) == 0 || member && len(r.members) == 1 {
		return
	}
	d := &delivery{doc: r.id, sender: peer, msg: m, to: r.memberList(), member: member, epoch: r.epoch}
	h.out.queue = append(h.out.queue, d)
	if channel != "" {
		if h.out.latest == nil {
			h.out.latest = make(map[docPeer]map[string]*delivery)
		}
		byChannel := h.out.latest[dp]
		if byChannel == nil {
			byChannel = make(map[string]*delivery)
			h.out.latest[dp] = byChannel
		}
		byChannel[channel] = d
	}
}

// newEpoch starts a new epoch of r: what is queued for it keeps its value.
func (h *Hub) newEpoch(r *room) {
	h.out.epoch++
	r.epoch = h.out.epoch
}

// enqueueTo queues m from sender to one member of r only (the room's
// snapshot for a newcomer).
func (h *Hub) enqueueTo(r *room, sender string, to Peer, m *presenceMessage) {
	h.out.queue = append(h.out.queue, &delivery{doc: r.id, sender: sender, msg: m, to: []Peer{to}, only: true, epoch: r.epoch})
}

// dispatch sends what is queued, unless another dispatcher is at it. Call
// it without the lock, after queueing.
func (h *Hub) dispatch() {
	// A running dispatcher looks at the queue under the lock before it
	// stops, so what was queued before this call is sent.
	if h.out.dispatching.Load() {
		return
	}
	h.mu.Lock()
	if h.out.dispatching.Load() || len(h.out.queue) == 0 {
		h.mu.Unlock()
		return
	}
	h.out.dispatching.Store(true)
	if w := h.cfg.SendWindow; w > 0 && !h.closing {
		// Wait for what else comes within the window: it goes out with
		// this, in the same batches and the same writes.
		h.handoffs.Add(1) // under h.mu, so before Close waits, or never
		h.out.window = time.AfterFunc(w, func() {
			defer h.handoffs.Done()
			h.mu.Lock()
			h.out.window = nil
			h.drain(time.Time{})
		})
		h.mu.Unlock()
		return
	}
	h.drain(time.Now().Add(dispatchTenure))
}

// dispatchNow sends what is queued at once, ending a send window that
// runs: a tick's trailing edges have waited their period already, and
// the window would only add to it. Call it without the lock.
func (h *Hub) dispatchNow() {
	h.mu.Lock()
	if h.out.window != nil && h.out.window.Stop() {
		// The window had not fired: this call dispatches in its place,
		// and dispatching stays set.
		h.out.window = nil
		h.handoffs.Done()
		h.drain(time.Now().Add(dispatchTenure))
		return
	}
	if h.out.dispatching.Load() || len(h.out.queue) == 0 {
		h.mu.Unlock()
		return // a dispatcher runs, or its window's timer has fired
	}
	h.out.dispatching.Store(true)
	h.drain(time.Now().Add(dispatchTenure))
}

// drain sends the queue until it is empty. It is called with the lock held
// and dispatching set, and returns without the lock. Past until (if set),
// it hands over to a goroutine of its own.
func (h *Hub) drain(until time.Time) {
	for len(h.out.queue) > 0 {
		if !until.IsZero() && time.Now().After(until) && !h.closing {
			h.handoffs.Add(1) // under h.mu, so before Close waits, or never
			h.mu.Unlock()
			go func() {
				defer h.handoffs.Done()
				h.mu.Lock()
				h.drain(time.Time{})
			}()
			return
		}
		batch := h.out.queue
		h.out.queue = h.out.spare[:0]
		clear(h.out.latest)
		h.mu.Unlock()
		h.sendAll(batch)
		clear(batch)
		h.mu.Lock()
		h.out.spare = batch[:0]
	}
	h.out.dispatching.Store(false)
	h.mu.Unlock()
}

// sendAll sends one drained queue. The order within a document is kept;
// across documents it need not be, as every message is given its relay
// count as it is sent. Consecutive deliveries of a document to the same
// member list form a run, sent to a member that takes batches as one
// frame, encoded once for all of them, and to any other member as one
// message each. Only the dispatcher calls it.
func (h *Hub) sendAll(queue []*delivery) {
	var order []string
	byDoc := make(map[string][]*delivery)
	for _, d := range queue {
		if _, ok := byDoc[d.doc]; !ok {
			order = append(order, d.doc)
		}
		byDoc[d.doc] = append(byDoc[d.doc], d)
	}
	for _, doc := range order {
		ds := byDoc[doc]
		for i := 0; i < len(ds); {
			j := i + 1
			for j < len(ds) && sameRecipients(ds[i], ds[j]) {
				j++
			}
			h.sendRun(ds[i:j])
			i = j
		}
	}
}

// sameRecipients reports whether two deliveries go to the same peers: the
// same newcomer, or the same member list (the room shares one until its
// members change).
func sameRecipients(a, b *delivery) bool {
	if a.only || b.only {
		return a.only && b.only && a.to[0] == b.to[0]
	}
	return len(a.to) == len(b.to) && &a.to[0] == &b.to[0]
}

// sendRun sends deliveries of one document to one list of recipients.
func (h *Hub) sendRun(run []*delivery) {
	doc, to := run[0].doc, run[0].to
	msgs := make([]Message, len(run))
	for i, d := range run {
		msgs[i] = h.message(d)
	}
	var batch *Batch
	for _, p := range to {
		id := p.ID()
		if b, ok := p.(Batcher); ok && b.PresenceBatches() {
			if batch == nil {
				batch = &Batch{Messages: msgs, Shared: &Shared{}}
			}
			if !onlyFrom(msgs, id) {
				b.SendPresenceBatch(doc, batch)
			}
			continue
		}
		for _, m := range msgs {
			if run[0].only || m.SenderID != id {
				p.SendPresence(doc, m)
			}
		}
	}
	for _, d := range run {
		n := len(to)
		if d.member {
			n--
		}
		h.metrics.sentBy(d.msg.Type).Add(float64(n))
	}
}

// onlyFrom reports whether every message is in peer's own name: a batch
// of them would tell the peer nothing.
func onlyFrom(msgs []Message, peer string) bool {
	for _, m := range msgs {
		if m.SenderID != peer {
			return false
		}
	}
	return true
}

// message encodes a delivery under the next relay count.
func (h *Hub) message(d *delivery) Message {
	h.relayCount++
	m := Message{
		SenderID: d.sender, SessionID: h.cfg.RelaySession, Count: h.relayCount,
		Data: encodePresence(d.msg), Shared: &Shared{},
	}
	switch d.msg.Type {
	case TypeUpdate:
		m.Channel = d.msg.Channel
	case TypeHeartbeat:
		m.Channel = heartbeatChannel
	case TypeGoodbye:
		m.Whole, m.Goodbye = true, true
	case TypeSnapshot:
		if d.msg.whole {
			m.Whole = true
			break
		}
		m.Channels = slices.Sorted(maps.Keys(d.msg.State))
	}
	return m
}
