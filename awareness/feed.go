package awareness

import (
	"maps"
	"runtime"
	"slices"
	"sync"
)

// The feed: how presence reaches a room's members.
//
// What the hub forwards in a peer's name is appended to its room's feed,
// encoded once, under the next relay count (message.go). Every local
// member reads the feed from where it last stopped: the hub tells the
// member's peer that something is there (Peer.PresenceReady), and the
// peer takes it (Feed.Take) when it can send it: a connection, the moment
// its writer is free. Nothing waits for company. A member that keeps up
// takes each message as it comes; what piles up while a member cannot
// take (a write in progress, a full socket, a busy core) is taken
// together, as one batch for a peer that takes batches. So batches grow
// with the load, and latency does not.
//
// Newest wins here, and only here (replaces): of what a member takes at
// once, a message that a later one replaces is left out. A member that
// falls further behind than the feed holds (maxFeedEntries, maxFeedBytes)
// is not sent what it missed, nor is a newcomer sent the feed's past:
// either is sent the room (Hub.sendRoom), a goodbye for each peer that left
// since it last took and a snapshot of every live peer, when it can take
// it. The feed holds what some member has yet to take, and nothing once
// every member has taken everything.

// What a feed holds at most. A member further behind is sent the room.
const (
	maxFeedEntries = 4096
	maxFeedBytes   = 512 << 10
)

// entry is one message in a feed, and what it replaces of its sender's
// older messages (replaces).
type entry struct {
	msg      Message
	one      []Message // msg alone, for every member that takes just it
	typ      string    // the presence message's type, for the sent metric
	channel  string    // an update's channel; a heartbeat's pseudo-channel
	channels []string  // the channels of a snapshot of some of the sender's channels
	whole    bool      // a goodbye, or a snapshot of every channel of the sender
	goodbye  bool
	alone    *Batch // the entry as a batch of its own, made when first taken as one
}

// size is what an entry holds, for maxFeedBytes.
func (e *entry) size() int {
	n := 128 + len(e.msg.Data) + len(e.msg.SenderID)
	for _, ch := range e.channels {
		n += 16 + len(ch)
	}
	return n
}

// reader is one member's place in a feed.
type reader struct {
	peer Peer
	next uint64 // the first entry it has not taken
	// signaled is set while the member has something to take that it
	// was told of (PresenceReady) and has not taken; first is the first
	// entry it was told of then. A signaled member whose first entry the
	// feed dropped has fallen behind and is sent the room.
	signaled bool
	first    uint64
	greet    bool // it is sent the room at its next take
	heard    bool // it has spoken presence here (Feed.heard)
}

// Feed is a room's outgoing presence: what the hub forwards there, for
// each local member to take.
type Feed struct {
	hub     *Hub
	room    *room  // guarded by hub.mu: the state a member is sent as the room
	session string // the session of its messages (forward.go)

	mu      sync.Mutex // guards what follows; taken after hub.mu, never before
	base    uint64     // the sequence number of entries[0]
	entries []entry
	bytes   int // of entries, and of gone
	// readers are the room's local members, by peer id. They change
	// under hub.mu and f.mu both, so either lock reads them.
	readers map[string]*reader
	waiting int // readers signaled and not yet taken
	// compactAt is the length at which post next drops what no member
	// needs (trim): twice what was left the last time, so that the
	// readers it looks over cost little per post.
	compactAt int
	// gone holds the senders whose goodbye the feed has held since every
	// member last took everything: the sequence number of the newest one.
	gone map[string]uint64
	// shared is the batch of the range taken last by a member that takes
	// batches: members that take the same range share it, and its frame.
	shared struct {
		from, to uint64
		batch    *Batch
	}
	// What deliver works in, kept from take to take: what it met of a
	// range (replaced) and which entries are live.
	met  replaced
	live []bool
}

// readyPeer is a peer to tell that a feed has something for it.
type readyPeer struct {
	peer Peer
	feed *Feed
}

func newFeed(h *Hub, r *room, session string) *Feed {
	return &Feed{hub: h, room: r, session: session, readers: make(map[string]*reader), compactAt: minCompact}
}

// Document is the id of the feed's document.
func (f *Feed) Document() string { return f.room.id }

// end is the sequence number of the next entry. The caller holds f.mu.
func (f *Feed) end() uint64 { return f.base + uint64(len(f.entries)) }

// signal marks rd as having something to take and queues the word to its
// peer. The caller holds h.mu and f.mu.
func (f *Feed) signal(rd *reader, first uint64) {
	if rd.signaled {
		return
	}
	rd.signaled, rd.first = true, first
	f.waiting++
	h := f.hub
	if h.readyBuf == nil {
		h.readyBuf = readyPool.Get().(*[]readyPeer)
		h.ready = (*h.readyBuf)[:0]
	}
	h.ready = append(h.ready, readyPeer{rd.peer, f})
	h.hasReady.Store(true)
}

// member returns the local member with the peer id, if any. The caller
// holds h.mu.
func (f *Feed) member(peer string) Peer {
	if rd := f.readers[peer]; rd != nil {
		return rd.peer
	}
	return nil
}

// empty reports whether the room has no local member. The caller holds
// h.mu.
func (f *Feed) empty() bool { return len(f.readers) == 0 }

// join makes p a member that reads the feed from now on, and sends it the
// room. A newer connection of a member's peer takes its place. The caller
// holds h.mu.
func (f *Feed) join(p Peer) {
	f.mu.Lock()
	rd := f.readers[p.ID()]
	if rd == nil || rd.peer != p {
		next := f.end()
		if rd != nil { // a newer connection of the peer: the room tells it who left since
			next = rd.next
			if rd.signaled {
				f.waiting--
			}
		}
		rd = &reader{peer: p, next: next}
		f.readers[p.ID()] = rd
	}
	rd.greet = true
	f.signal(rd, rd.next) // what it has yet to take begins there: the goodbyes since
	f.mu.Unlock()
}

// heard notes that member peer spoke presence here, and at its first
// message sends it the room again. This is the one place of the greeting
// race: a member is sent the room when it joins, but a stock client joins
// by syncing the document and starts listening to presence only once it
// has it, so that room may go unheard; its first presence message says
// that it listens now. The caller holds h.mu.
func (f *Feed) heard(peer string) {
	f.mu.Lock()
	if rd := f.readers[peer]; rd != nil && !rd.heard {
		rd.heard, rd.greet = true, true
		f.signal(rd, f.end())
	}
	f.mu.Unlock()
}

// leave forgets a member. The caller holds h.mu.
func (f *Feed) leave(peer string) {
	f.mu.Lock()
	if rd := f.readers[peer]; rd != nil {
		delete(f.readers, peer)
		if rd.signaled {
			f.waiting--
		}
		f.settle()
	}
	f.mu.Unlock()
}

// post appends m, sent in sender's name, for every member but the sender.
// The caller holds h.mu.
func (f *Feed) post(sender string, m *presenceMessage) {
	if len(f.readers) == 0 || len(f.readers) == 1 && f.readers[sender] != nil {
		return // nobody to read it
	}
	h := f.hub
	h.relayCount++
	e := entry{
		msg: Message{SenderID: sender, SessionID: f.session, Count: h.relayCount,
			Data: encodePresence(m), Shared: &Shared{}},
		typ: m.Type,
	}
	switch m.Type {
	case TypeUpdate:
		e.channel = m.Channel
	case TypeHeartbeat:
		e.channel = heartbeatChannel
	case TypeGoodbye:
		e.whole, e.goodbye = true, true
	case TypeSnapshot:
		if m.whole {
			e.whole = true
			break
		}
		e.channels = slices.Sorted(maps.Keys(m.State))
	}
	e.one = []Message{e.msg}
	f.mu.Lock()
	seq := f.end()
	f.entries = append(f.entries, e)
	f.bytes += e.size()
	if e.goodbye {
		if f.gone == nil {
			f.gone = make(map[string]uint64)
		}
		if _, ok := f.gone[sender]; !ok {
			f.bytes += 16 + len(sender)
		}
		f.gone[sender] = seq
	}
	for id, rd := range f.readers {
		if id != sender {
			f.signal(rd, seq)
		}
	}
	if len(f.entries) >= f.compactAt || f.bytes > maxFeedBytes {
		f.trim()
	}
	f.mu.Unlock()
}

// minCompact is the least compactAt.
const minCompact = 64

// trim makes room in a feed that grew to compactAt or past its bounds.
// First what no member needs goes: the entries and goodbyes before the
// first entry any member has yet to take (a member that is not signaled
// has only its own messages left). If that is not enough, the oldest half
// goes, and the members that had not taken it are sent the room instead,
// when they take. The caller holds f.mu.
func (f *Feed) trim() {
	need := f.end()
	for _, rd := range f.readers {
		if rd.signaled {
			need = min(need, rd.first)
		}
	}
	f.drop(int(min(need, f.end()) - min(need, f.base)))
	for sender, seq := range f.gone {
		if seq < need {
			delete(f.gone, sender)
			f.bytes -= 16 + len(sender)
		}
	}
	if len(f.entries) > maxFeedEntries || f.bytes > maxFeedBytes {
		n := max(len(f.entries)/2, 1)
		f.drop(n)
		f.hub.metrics.updates.WithLabelValues("behind").Add(float64(n))
	}
	f.compactAt = max(minCompact, 2*len(f.entries))
}

// drop drops the oldest n entries. The caller holds f.mu.
func (f *Feed) drop(n int) {
	n = min(n, len(f.entries))
	for i := range f.entries[:n] {
		f.bytes -= f.entries[i].size()
	}
	clear(f.entries[:n])
	f.entries = f.entries[n:]
	f.base += uint64(n)
}

// settle drops what the feed holds once no member has anything left to
// take. The caller holds f.mu.
func (f *Feed) settle() {
	if f.waiting > 0 {
		return
	}
	f.base = f.end()
	if cap(f.entries) > 64 {
		f.entries = nil // a burst's array goes with it
	} else {
		clear(f.entries)
		f.entries = f.entries[:0]
	}
	f.gone, f.bytes = nil, 0
	f.shared.batch = nil
}

// Delivery is what a member takes from a feed at once: Messages, in order,
// never in the member's own name. For a member that takes batches, Batch
// holds them too, to be sent as one frame; it may hold messages in the
// member's own name besides, so that members that take the same messages
// at once share it.
type Delivery struct {
	Messages []Message
	Batch    *Batch
}

// Take returns what the feed holds for p since p last took: the newest
// value of each peer's channels, in the order sent; or the room, for a
// newcomer or for a member that fell behind further than the feed holds.
// A peer calls it when it can send, after PresenceReady; it is empty for a
// peer that is not (or no longer) a member.
func (f *Feed) Take(p Peer) Delivery {
	f.mu.Lock()
	rd := f.readers[p.ID()]
	if rd == nil || rd.peer != p {
		f.mu.Unlock()
		return Delivery{}
	}
	if rd.greet || rd.signaled && rd.first < f.base {
		f.mu.Unlock()
		return f.hub.sendRoom(f, p)
	}
	from, to := max(rd.next, f.base), f.end()
	rd.next = to
	if rd.signaled {
		rd.signaled = false
		f.waiting--
	}
	var d Delivery
	if to-from == 1 {
		d = f.deliverOne(p, &f.entries[from-f.base])
	} else if to > from {
		d = f.deliver(p, from, to)
	}
	f.settle()
	f.mu.Unlock()
	return d
}

// deliverOne returns e for p: the common case of a member that keeps up,
// which takes each message as it comes. The caller holds f.mu.
func (f *Feed) deliverOne(p Peer, e *entry) Delivery {
	if e.msg.SenderID == p.ID() {
		return Delivery{}
	}
	f.hub.metrics.sentBy(e.typ).Inc()
	if !takesBatches(p) {
		return Delivery{Messages: e.one}
	}
	if e.alone == nil {
		e.alone = &Batch{Messages: e.one, Shared: &Shared{}}
	}
	return Delivery{Messages: e.one, Batch: e.alone}
}

// deliver returns the entries from..to for p, of which there are more
// than one. The caller holds f.mu.
//
//go:noinline
func (f *Feed) deliver(p Peer, from, to uint64) Delivery {
	es := f.entries[from-f.base : to-f.base]
	f.live = f.met.newest(es, f.live)
	live := f.live
	var d Delivery
	superseded, n := 0, 0
	for i, e := range es {
		switch {
		case e.msg.SenderID == p.ID():
		case !live[i]:
			superseded++
		default:
			n++
		}
	}
	if n > 0 {
		d.Messages = make([]Message, 0, n) // the caller's: the one allocation of a take of several
	}
	for i, e := range es {
		if e.msg.SenderID != p.ID() && live[i] {
			d.Messages = append(d.Messages, e.msg)
			f.hub.metrics.sentBy(e.typ).Inc()
		}
	}
	if superseded > 0 {
		f.hub.metrics.updates.WithLabelValues("superseded").Add(float64(superseded))
	}
	if len(d.Messages) == 0 || !takesBatches(p) {
		return d
	}
	if f.shared.batch == nil || f.shared.from != from || f.shared.to != to {
		// The batch holds the messages in any member's name, so that
		// every member that takes this range shares it; each ignores
		// its own.
		b := &Batch{Shared: &Shared{}}
		for i, e := range es {
			if live[i] {
				b.Messages = append(b.Messages, e.msg)
			}
		}
		f.shared.from, f.shared.to, f.shared.batch = from, to, b
	}
	d.Batch = f.shared.batch
	return d
}

func takesBatches(p Peer) bool {
	b, ok := p.(Batcher)
	return ok && b.PresenceBatches()
}

// newest reports, for each of es, whether no later one of them replaces
// it (replaces), in live (appended to, from its length 0). r is reused
// from call to call: what it met before is forgotten first.
func (r *replaced) newest(es []entry, live []bool) []bool {
	r.seen, r.ended = r.seen[:0], r.ended[:0]
	r.seenM, r.endM = nil, nil
	live = slices.Grow(live[:0], len(es))[:len(es)]
	for i := len(es) - 1; i >= 0; i-- {
		live[i] = !r.stale(&es[i])
	}
	return live
}

// replaced is what newest has met, walking entries from the newest back:
// the (sender, channel) pairs with a newer value, and the senders whose
// newer whole message replaces all their older ones (bye: if that was a
// goodbye). Most takes hold a few entries: it looks them up in slices,
// and in maps only past manyKeys.
//
// The rule, its only statement: a message replaces an older one of the
// same sender whose channels it all carries: an update or heartbeat the
// same channel's, a partial snapshot its channels' and an older snapshot
// of the same channels, a whole message (a goodbye or a snapshot of every
// channel) everything; except that a goodbye is replaced by a goodbye
// only, as a peer that left and came back must be seen to leave.
type replaced struct {
	seen  []senderChannel
	ended []senderEnd
	seenM map[senderChannel]struct{}
	endM  map[string]bool
}

type senderChannel struct{ sender, channel string }

type senderEnd struct {
	sender string
	bye    bool
}

// manyKeys is how many keys replaced looks up in a slice.
const manyKeys = 32

// stale reports whether a newer entry met already replaces e, and records
// what e replaces of the older ones.
func (r *replaced) stale(e *entry) bool {
	sender := e.msg.SenderID
	if bye, ok := r.endOf(sender); ok {
		if e.goodbye && !bye {
			r.end(sender, true) // it left, then came back: the leave stays
			return false
		}
		return true
	}
	switch {
	case e.whole:
		r.end(sender, e.goodbye)
		return false
	case len(e.channels) > 0:
		all := true
		for _, ch := range e.channels {
			if !r.see(senderChannel{sender, ch}) {
				all = false
			}
		}
		return all
	}
	return r.see(senderChannel{sender, e.channel})
}

// see records k and reports whether it was met before.
func (r *replaced) see(k senderChannel) bool {
	if r.seenM != nil {
		_, ok := r.seenM[k]
		r.seenM[k] = struct{}{}
		return ok
	}
	for _, s := range r.seen {
		if s == k {
			return true
		}
	}
	r.seen = append(r.seen, k)
	if len(r.seen) > manyKeys {
		r.seenM = make(map[senderChannel]struct{}, 2*len(r.seen))
		for _, s := range r.seen {
			r.seenM[s] = struct{}{}
		}
	}
	return false
}

// endOf reports whether sender's older messages are replaced, and by a
// goodbye or not.
func (r *replaced) endOf(sender string) (bye, ok bool) {
	if r.endM != nil {
		bye, ok = r.endM[sender]
		return bye, ok
	}
	for _, e := range r.ended {
		if e.sender == sender {
			return e.bye, true
		}
	}
	return false, false
}

// end records that sender's older messages are replaced.
func (r *replaced) end(sender string, bye bool) {
	if r.endM != nil {
		r.endM[sender] = bye
		return
	}
	for i := range r.ended {
		if r.ended[i].sender == sender {
			r.ended[i].bye = bye
			return
		}
	}
	r.ended = append(r.ended, senderEnd{sender, bye})
	if len(r.ended) > manyKeys {
		r.endM = make(map[string]bool, 2*len(r.ended))
		for _, e := range r.ended {
			r.endM[e.sender] = e.bye
		}
	}
}

// sendRoom sends p the room of f's document: a goodbye in the name of each
// peer that left since p last took, then a snapshot of every other live
// peer, and p reads on from there. It takes h.mu, for the room's state.
func (h *Hub) sendRoom(f *Feed, p Peer) Delivery {
	h.mu.Lock()
	defer h.mu.Unlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	rd := f.readers[p.ID()]
	if rd == nil || rd.peer != p {
		return Delivery{}
	}
	var d Delivery
	send := func(sender string, m *presenceMessage) {
		h.relayCount++
		d.Messages = append(d.Messages, Message{SenderID: sender, SessionID: f.session,
			Count: h.relayCount, Data: encodePresence(m)})
		h.metrics.sentBy(m.Type).Inc()
	}
	for _, sender := range slices.Sorted(maps.Keys(f.gone)) {
		if f.gone[sender] >= rd.next && sender != p.ID() {
			send(sender, &presenceMessage{Type: TypeGoodbye})
		}
	}
	for _, id := range slices.Sorted(maps.Keys(f.room.state)) {
		ps := f.room.state[id]
		if id == p.ID() || !ps.Visible() {
			continue
		}
		state := make(map[string][]byte, len(ps.Channels))
		for ch := range ps.Channels {
			if v, ok := ps.Get(ch); ok {
				state[ch] = v
			}
		}
		send(id, &presenceMessage{Type: TypeSnapshot, State: rawState(state)})
	}
	if !rd.greet {
		h.metrics.updates.WithLabelValues("resent_room").Inc()
	}
	rd.greet = false
	rd.next = f.end()
	if rd.signaled {
		rd.signaled = false
		f.waiting--
	}
	f.settle()
	if len(d.Messages) > 0 && takesBatches(p) {
		d.Batch = &Batch{Messages: d.Messages, Shared: &Shared{}}
	}
	return d
}

// notify tells the peers that a feed has something for them. Call it
// without h.mu, after a section that may have posted.
func (h *Hub) notify() {
	if !h.hasReady.Load() {
		return
	}
	h.mu.Lock()
	ready, buf := h.ready, h.readyBuf
	h.ready, h.readyBuf = nil, nil
	h.hasReady.Store(false)
	h.mu.Unlock()
	// Peers may send at once in PresenceReady: past h.tellAtOnce, the
	// rest are told on goroutines of their own, so that a big room's
	// fan-out neither holds up the caller (a connection's reader, the
	// cluster's receiver, the tick) nor runs on one core.
	now := ready
	if k := h.tellAtOnce; len(ready) > k {
		now = ready[:k]
		for rest := slices.Clone(ready[k:]); len(rest) > 0; {
			n := min(len(rest), k)
			h.telling.Add(1)
			go func(ready []readyPeer) {
				defer h.telling.Done()
				tell(ready)
			}(rest[:n])
			rest = rest[n:]
		}
	}
	tell(now)
	if buf != nil && cap(ready) <= 1024 {
		clear(ready)
		*buf = ready[:0]
		readyPool.Put(buf)
	}
}

// tellAtOnce is how many peers notify tells on the caller's goroutine
// (Hub.tellAtOnce, which tests raise).
const tellAtOnce = 32

// tell tells each peer that its feed has something for it, then lets
// the Flushers among them write (Flusher): after the goroutines that wait
// for a core have run, so that what they post for the same peers goes in
// the same write.
func tell(ready []readyPeer) {
	flush := false
	for _, r := range ready {
		r.peer.PresenceReady(r.feed)
		if _, ok := r.peer.(Flusher); ok {
			flush = true
		}
	}
	if !flush {
		return
	}
	runtime.Gosched()
	for _, r := range ready {
		if f, ok := r.peer.(Flusher); ok {
			f.PresenceFlush()
		}
	}
}

// readyPool holds the lists of peers to tell that notify is done with.
var readyPool = sync.Pool{New: func() any { return new([]readyPeer) }}
