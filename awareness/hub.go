package awareness

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fxamacker/cbor/v2"

	"github.com/tandemhq/tandem/internal/lifecycle"
	"github.com/tandemhq/tandem/internal/smallmap"
)

// Peer is one connection's peer as presence sees it. PresenceReady tells
// it that a document's feed has presence for it, which it takes
// (Feed.Take) as soon as it can send it (feed.go). PresenceReady is
// called outside the hub's lock, by the goroutine that posted, and must
// not block: it may take and send at once what it can send without
// waiting.
type Peer interface {
	ID() string
	PresenceReady(f *Feed)
}

// Flusher is a Peer that writes what it takes only once every peer told
// with it has been told. The hub tells peers in groups (the members a
// post concerns): it calls PresenceReady on each, then lets every
// goroutine waiting for a core run, then calls PresenceFlush on each
// Flusher of the group. A Flusher's PresenceReady only notes that it has
// something; its PresenceFlush takes and writes, without blocking. What
// the goroutines that ran meanwhile posted for the same peer joins that
// take: when no goroutine waits, nothing waits; when a node is busy, its
// peers' writes carry more each, and cost less each (feed.go).
type Flusher interface {
	Peer
	PresenceFlush()
}

// Hub holds the presence of every document in use on this node.
type Hub struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics
	dec     cbor.DecMode // presence payloads, bounded by MaxNesting
	loop    lifecycle.Loop
	asked   asking // when each document's state was last asked for (cluster.go)
	// hasReady is set while ready holds peers to tell (notify).
	hasReady atomic.Bool
	// tellAtOnce is how many peers notify tells on the caller's goroutine;
	// telling counts the goroutines that tell the rest, which Close waits for.
	tellAtOnce int
	telling    sync.WaitGroup
	// closeBy is the deadline Close was given (Unix nanoseconds, 0 for
	// none): the last history write ends before it, not after the store
	// it writes to was closed.
	closeBy atomic.Int64

	mu       sync.Mutex           // guards everything below
	rooms    map[string]*room     // by document id
	peers    map[string]*peerInfo // by peer id
	users    map[string]*userInfo // by user id
	watchers map[string]map[*watcher]struct{}
	rostered map[string]bool // nodes that sent a roster: their peers expire by RemoteTTL
	swept    time.Time       // when Tick last went over the peers (Config.Sweep)
	seen     *lastSeenWriter
	hist     *historyRecorder // nil: no history (its marks are under mu)
	// ready holds the peers a feed has something new for, to be told
	// once the lock is released (notify).
	ready    []readyPeer
	readyBuf *[]readyPeer // ready's array, from readyPool
	// relayCount is the count of the last message sent in a peer's
	// name, under any room's session (forward.go).
	relayCount uint64
	// rooms made, for their sessions' names
	roomsMade uint64
}

// effects are what a section under h.mu leaves to do once the lock is
// released (run): tell peers of what it posted to feeds, and store
// last-seen times.
type effects struct {
	lastSeen []UserStatus
	// moved holds users whose peer here went on as a connection on
	// another node: if this node loses sight of them, they were not seen
	// leaving, and no last-seen is stored.
	moved map[string]bool
}

func (fx *effects) move(userID string) {
	if fx.moved == nil {
		fx.moved = make(map[string]bool)
	}
	fx.moved[userID] = true
}

func (fx *effects) run(h *Hub) {
	h.notify()
	for _, us := range fx.lastSeen {
		h.seen.add(us) // stored by the last-seen writer (lastseen.go), off this path
	}
}

// peerInfo is one connected peer (a tab) across the documents it is in.
type peerInfo struct {
	id         string
	conn       Peer   // nil for a peer connected to another node
	node       string // the node of a remote peer
	user       string // user id: the user channel's id, else the peer id
	lastHeard  time.Time
	lastActive time.Time
	clientAway bool                           // the peer said status "away"
	status     Status                         // effective status
	identity   *Identity                      // verified identity, if the peer has one
	clock      Clock                          // the newest clock seen from the peer
	session    string                         // the session of its messages here
	era        int64                          // that session's era (Clock)
	serverSeq  uint64                         // writes the server made in the peer's name
	docs       smallmap.Map[string, struct{}] // the documents it is in
}

// New validates cfg and returns a Hub. Run drives its ticks and its
// last-seen writes; Close stops them.
func New(cfg Config) (*Hub, error) {
	cfg.setDefaults()
	if cfg.MaxNesting < MinNesting || cfg.MaxNesting > MaxNesting {
		return nil, fmt.Errorf("awareness: Config.MaxNesting %d is out of range (%d to %d)", cfg.MaxNesting, MinNesting, MaxNesting)
	}
	dec, err := newDecMode(cfg.MaxNesting)
	if err != nil {
		return nil, fmt.Errorf("awareness: %w", err)
	}
	h := &Hub{
		cfg:        cfg,
		dec:        dec,
		log:        cfg.Logger,
		metrics:    newMetrics(cfg.Registerer),
		rooms:      make(map[string]*room),
		peers:      make(map[string]*peerInfo),
		users:      make(map[string]*userInfo),
		watchers:   make(map[string]map[*watcher]struct{}),
		rostered:   make(map[string]bool),
		tellAtOnce: tellAtOnce,
	}
	h.seen = newLastSeenWriter(cfg.LastSeen, cfg.Logger, h.metrics)
	if cfg.History != nil {
		h.hist = newHistoryRecorder(cfg, h.metrics)
	}
	return h, nil
}

// Run ticks until ctx ends or Close: it forwards coalesced updates and
// applies typing expiry, status changes and TTLs.
func (h *Hub) Run(ctx context.Context) error {
	return h.loop.Run(ctx, h.run)
}

// Close stops Run, which writes the last-seen times still queued and
// ends presence history's open intervals (within ctx's deadline), and
// waits for it and for the goroutines telling peers of presence (notify),
// or ctx. Safe to call twice.
func (h *Hub) Close(ctx context.Context) error {
	if dl, ok := ctx.Deadline(); ok {
		h.closeBy.Store(dl.UnixNano())
	}
	_, err := h.loop.Stop(ctx)
	done := make(chan struct{})
	go func() { h.telling.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return err
}

func (h *Hub) run(ctx context.Context) error {
	t := time.NewTicker(h.cfg.Tick)
	defer t.Stop()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); h.seen.run(ctx) }()
	if h.hist != nil {
		wg.Add(1)
		go func() { defer wg.Done(); h.runHistory(ctx) }()
	}
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			h.Tick()
		}
	}
}

// Join makes p a peer of the document, if it is not yet, and sends it the
// state of every live peer there at once, as ephemerals in their names.
func (h *Hub) Join(p Peer, documentID string) {
	var fx effects
	h.mu.Lock()
	h.join(p, documentID, &fx)
	h.mu.Unlock()
	fx.run(h)
}

func (h *Hub) join(p Peer, documentID string, fx *effects) (*peerInfo, *room) {
	now := h.cfg.Now()
	pi := h.peers[p.ID()]
	switch {
	case pi == nil:
		pi = newLocalPeer(p, now)
		h.peers[pi.id] = pi
		h.userOf(pi.user).peers.Set(pi.id, pi)
		h.refreshUser(pi.user, fx)
	case pi.conn == nil:
		pi = h.adopt(pi, p, now, fx) // known as another node's peer
	}
	if old := pi.conn; old != p {
		pi.conn = p // a newer connection of the same peer
		pi.lastHeard = now
		// The old connection's place in documents the new one has not
		// joined goes: the old one takes nothing more, and what it left
		// untaken would stay in those feeds.
		for id := range pi.docs.Keys() {
			if r := h.rooms[id]; r != nil && old != nil && r.feed.member(pi.id) == old {
				r.feed.leave(pi.id)
			}
		}
	}
	r := h.rooms[documentID]
	if r == nil {
		h.roomsMade++
		r = newRoom(h, documentID, h.cfg.RelaySession+"."+strconv.FormatUint(h.roomsMade, 36))
		h.rooms[documentID] = r
	}
	if r.feed.member(pi.id) != p {
		pi.docs.Set(documentID, struct{}{})
		r.feed.join(p)
	}
	return pi, r
}

// newLocalPeer is the record of a connection here: its identity, and so
// its user, come from the connection alone.
func newLocalPeer(p Peer, now time.Time) *peerInfo {
	pi := &peerInfo{id: p.ID(), conn: p, user: p.ID(), lastHeard: now, lastActive: now,
		status: StatusOnline, identity: identityOf(p)}
	if pi.identity != nil {
		pi.user = pi.identity.UserID
	}
	return pi
}

// dropRoom forgets a document that has no local member left, and the
// remote peers seen only there.
func (h *Hub) dropRoom(r *room, fx *effects) {
	delete(h.rooms, r.id)
	for id := range r.state {
		if pi := h.peers[id]; pi != nil && pi.conn == nil {
			pi.docs.Delete(r.id)
			if pi.docs.Len() == 0 {
				h.forget(pi, fx)
			}
		}
	}
}

// serverClock returns the clock of a new server write in pi's name.
func (h *Hub) serverClock(pi *peerInfo) Clock {
	pi.serverSeq++
	return pi.clock.Server(pi.serverSeq)
}

// Touch records that p is alive (a pong, say) without any activity.
// RelaySession returns the prefix of the sessions the hub sends presence
// under: every room's is it, a dot, and the room's own name.
func (h *Hub) RelaySession() string { return h.cfg.RelaySession + "." }

func (h *Hub) Touch(p Peer) {
	h.mu.Lock()
	if pi := h.peers[p.ID()]; pi != nil && pi.conn == p {
		pi.lastHeard = h.cfg.Now()
	}
	h.mu.Unlock()
}

// Leave removes p, whose connection closed, from every document: the other
// peers are told goodbye in its name at once. A connection that has been
// replaced by a newer one of the same peer is ignored.
func (h *Hub) Leave(p Peer) {
	var fx effects
	h.mu.Lock()
	if pi := h.peers[p.ID()]; pi != nil && pi.conn == p && p != nil {
		h.remove(pi, &fx)
	}
	h.mu.Unlock()
	fx.run(h)
}

// LeaveDocument removes p, still connected, from one document (the
// transport refused a change p sent there): the other peers there are told
// goodbye in its name at once; its other documents are untouched. A
// connection that has been replaced by a newer one of the same peer is
// ignored.
func (h *Hub) LeaveDocument(p Peer, documentID string) {
	var fx effects
	h.mu.Lock()
	if pi := h.peers[p.ID()]; pi != nil && pi.conn == p && p != nil && pi.docs.Has(documentID) {
		pi.docs.Delete(documentID)
		h.histMark(pi.user)
		if r := h.rooms[documentID]; r != nil {
			if r.state.Remove(pi.id, h.serverClock(pi)) {
				h.sendGoodbye(r, pi.id)
			}
			r.drop(pi.id)
			if r.feed.empty() {
				h.dropRoom(r, &fx)
			}
		}
	}
	h.mu.Unlock()
	fx.run(h)
}

// remove drops a peer everywhere and says goodbye for it.
func (h *Hub) remove(pi *peerInfo, fx *effects) {
	for id := range pi.docs.Keys() {
		r := h.rooms[id]
		if r == nil {
			continue // dropped with its last local member
		}
		if r.state.Remove(pi.id, h.serverClock(pi)) {
			h.sendGoodbye(r, pi.id)
		}
		r.drop(pi.id)
		if pi.conn == nil {
			r.guessed[pi.id] = true
		}
		if r.feed.empty() {
			h.dropRoom(r, fx)
		}
	}
	delete(h.peers, pi.id)
	pi.status = StatusOffline
	if u := h.users[pi.user]; u != nil {
		u.peers.Delete(pi.id)
	}
	h.refreshUser(pi.user, fx)
}
