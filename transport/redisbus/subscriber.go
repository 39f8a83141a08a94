package redisbus

// A subscriber keeps channels subscribed across whatever befalls the
// connections that carry them: on one Redis, one connection; on a Redis
// Cluster, one connection per master, each holding the sharded channels
// of its slots (BUS.md, "Subscriptions").

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// How the subscriber paces itself.
const (
	subTick = 100 * time.Millisecond
	// topologyEvery is how often the cluster's shards are read when
	// nothing suggests a change; topologyRetry how soon again when
	// something does (a lost connection, a moved slot).
	topologyEvery = 5 * time.Second
	topologyRetry = 250 * time.Millisecond
	// confirmWithin is how long a subscription may go unconfirmed before
	// it is asked for again.
	confirmWithin = 3 * time.Second
	// redialAfter spaces the attempts to connect to one address.
	redialAfter = 250 * time.Millisecond
)

type subscriber struct {
	single  *redis.Client        // one Redis: the caller's client
	cluster *redis.ClusterClient // or a Redis Cluster
	log     *slog.Logger
	// probeEvery is how often each connection publishes to its own probe
	// channel; a connection that hears none of its probes for three of
	// these is taken for broken and replaced.
	probeEvery time.Duration
	probeName  string // the probe channel's name (a cluster's add a hash tag)
	// everyShard are channels held on every connection: on a cluster one
	// per master, named with a hash tag of its slots (onEvery).
	everyShard []string
	deliver    func(channel, payload string)
	// ready is told when a wanted channel's subscription is confirmed:
	// the first time, or again after it was lost (resumed: messages
	// published meanwhile were lost).
	ready   func(channel string, resumed bool)
	redone  *prometheus.CounterVec // connections and channels redone, by reason; may be nil
	stopped context.CancelFunc
	ctx     context.Context
	wg      sync.WaitGroup
	wake    chan struct{}

	mu      sync.Mutex
	want    map[string]*subState
	leaving []leaving // unsubscriptions to send
	shards  map[string]*shard
	topo    *topology // nil for one Redis, or until first read
	stale   bool      // read the topology again soon
	readAt  time.Time
	retryAt map[string]time.Time // no new connection to this address before then
	dirty   bool                 // some channel may need a command
	warned  bool                 // said that the topology cannot be read
	scanAt  time.Time
}

// subState is a wanted channel.
type subState struct {
	slot      int
	on        *shard // the connection it was asked on; nil: not asked
	sentAt    time.Time
	confirmed bool
	since     time.Time // when confirmed
	lost      bool      // confirmed once, then lost: tell ready so when confirmed again
}

type leaving struct {
	on      *shard
	slot    int
	channel string
}

// shard is one subscription connection.
type shard struct {
	addr   string
	client *redis.Client
	own    bool // client made here, closed here
	ps     *redis.PubSub
	tag    string // a hash tag of its slots; "" on one Redis
	probe  string
	// heard is when the connection last brought something (unix ns):
	// its probe, any message, or its connection; busy is set while the
	// reader hands a message over, when silence proves nothing.
	heard atomic.Int64
	busy  atomic.Bool
	// Guarded by subscriber.mu:
	dead         bool
	probedAt     time.Time
	probing      bool
	unsubscribed map[string]int // unsubscriptions sent, not yet confirmed
}

type subscriberConfig struct {
	client     redis.UniversalClient
	everyShard []string
	log        *slog.Logger
	probeEvery time.Duration
	deliver    func(channel, payload string)
	ready      func(channel string, resumed bool)
	redone     *prometheus.CounterVec
}

func newSubscriber(cfg subscriberConfig) (*subscriber, error) {
	s := &subscriber{
		log: cfg.log, probeEvery: cfg.probeEvery, everyShard: cfg.everyShard, deliver: cfg.deliver, ready: cfg.ready, redone: cfg.redone,
		probeName: "tandem:probe:" + claimToken(), // this subscriber's own
		wake:      make(chan struct{}, 1),
		want:      map[string]*subState{},
		shards:    map[string]*shard{},
		retryAt:   map[string]time.Time{},
	}
	switch c := cfg.client.(type) {
	case *redis.Client:
		s.single = c
	case *redis.ClusterClient:
		s.cluster = c
		s.stale = true
	default:
		return nil, fmt.Errorf("redisbus: a %T is neither one Redis nor a Redis Cluster", cfg.client)
	}
	if s.probeEvery <= 0 {
		s.probeEvery = time.Second
	}
	s.ctx, s.stopped = context.WithCancel(context.Background())
	s.wg.Add(2)
	go func() { defer s.wg.Done(); s.run() }()
	go func() { defer s.wg.Done(); s.probeLoop() }()
	return s, nil
}

// sharded reports whether channels are sharded channels (a Redis Cluster).
func (s *subscriber) sharded() bool { return s.cluster != nil }

// close ends every subscription and waits for the loops.
func (s *subscriber) close() {
	s.stopped()
	s.wg.Wait()
}

func (s *subscriber) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// suspect tells that Redis failed a command: in a cluster, who serves what
// is read again soon.
func (s *subscriber) suspect() {
	if s.cluster == nil {
		return
	}
	s.cluster.ReloadState(s.ctx) // the cluster client's own view, for publishing
	s.mu.Lock()
	s.stale = true
	s.mu.Unlock()
	s.poke()
}

// add wants channels subscribed; it never waits for Redis.
func (s *subscriber) add(channels ...string) {
	s.mu.Lock()
	for _, c := range channels {
		if _, ok := s.want[c]; !ok {
			s.want[c] = &subState{slot: slotOf(c)}
			s.dirty = true
		}
	}
	s.mu.Unlock()
	s.poke()
}

// remove undoes add; it never waits for Redis.
func (s *subscriber) remove(channels ...string) {
	s.mu.Lock()
	for _, c := range channels {
		st, ok := s.want[c]
		if !ok {
			continue
		}
		delete(s.want, c)
		if st.on != nil && !st.on.dead {
			s.leaving = append(s.leaving, leaving{st.on, st.slot, c})
			s.dirty = true
		}
	}
	s.mu.Unlock()
	s.poke()
}

func (s *subscriber) run() {
	t := time.NewTicker(subTick)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			s.mu.Lock()
			for _, sh := range s.shards {
				s.dropLocked(sh, "")
			}
			s.mu.Unlock()
			return
		case <-s.wake:
		case <-t.C:
		}
		s.reconcile()
	}
}

// reconcile brings the connections and subscriptions in line with what
// is wanted and with who serves what.
func (s *subscriber) reconcile() {
	now := time.Now()
	if s.cluster != nil {
		s.mu.Lock()
		due := s.topo == nil || now.Sub(s.readAt) >= topologyEvery || (s.stale && now.Sub(s.readAt) >= topologyRetry)
		var ask []string
		if due {
			s.readAt = now
			ask = s.askOrder()
		}
		s.mu.Unlock()
		if due {
			t, err := readTopology(s.ctx, s.dial, ask, s.cluster.Options().TLSConfig != nil)
			s.mu.Lock()
			if err != nil {
				s.stale = true
				if s.topo == nil && !s.warned {
					// Never read: most likely not a cluster at all.
					s.warned = true
					s.log.Warn("bus: cannot read the Redis Cluster's shards; nothing is subscribed until it can (is --redis-url a Redis Cluster's?)", "err", err)
				} else {
					s.log.Debug("bus: reading the Redis Cluster's shards", "err", err)
				}
			} else {
				s.applyTopologyLocked(t)
			}
			s.mu.Unlock()
		}
	}
	s.connect(now)
	s.subscribe(time.Now())
}

// probeLoop probes the connections on a loop of its own: a dial or a
// topology read that waits on a dead node never makes a healthy
// connection look silent.
func (s *subscriber) probeLoop() {
	t := time.NewTicker(subTick)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
			s.probe(time.Now())
		}
	}
}

// askOrder is whom to ask for the topology: the masters last known, the
// configured addresses, then every other node last known.
func (s *subscriber) askOrder() []string {
	var addrs, failed []string
	seen := map[string]bool{}
	now := time.Now()
	addAll := func(list []string) {
		for _, a := range list {
			if seen[a] {
				continue
			}
			seen[a] = true
			if now.Before(s.retryAt[a]) {
				failed = append(failed, a) // just failed us: ask it last
			} else {
				addrs = append(addrs, a)
			}
		}
	}
	if s.topo != nil {
		addAll(s.topo.nodes)
	}
	addAll(s.cluster.Options().Addrs)
	return append(addrs, failed...)
}

// dial makes a client of one cluster node, configured as the cluster
// client's own are.
func (s *subscriber) dial(addr string) *redis.Client {
	o := s.cluster.Options()
	return redis.NewClient(&redis.Options{
		Addr: addr, ClientName: o.ClientName, Dialer: o.Dialer, OnConnect: o.OnConnect,
		Protocol: o.Protocol, Username: o.Username, Password: o.Password,
		CredentialsProvider: o.CredentialsProvider, CredentialsProviderContext: o.CredentialsProviderContext,
		DialTimeout: min(o.DialTimeout, time.Second), ReadTimeout: o.ReadTimeout, WriteTimeout: o.WriteTimeout,
		TLSConfig: o.TLSConfig, PoolSize: 2, MaxRetries: -1,
		DialerRetries: 1, // the subscriber retries, on the topology of the moment
	})
}

// applyTopologyLocked takes a newly read topology: connections to nodes
// that serve no slot any more go, and channels whose slot moved are asked
// for again where it is now.
func (s *subscriber) applyTopologyLocked(t *topology) {
	s.stale = !t.complete() // a failed master not yet replaced: read again soon
	if !t.same(s.topo) && s.topo != nil {
		// The cluster client finds out on its own only on a MOVED reply;
		// publishing to a dead master would fail until then.
		s.cluster.ReloadState(s.ctx)
		s.log.Info("bus: the Redis Cluster's shards changed", "masters", len(t.shards))
	}
	s.topo = t
	masters := map[string]bool{}
	for _, sh := range t.shards {
		masters[sh.addr] = true
	}
	for addr, sh := range s.shards {
		if !masters[addr] {
			s.dropLocked(sh, "moved")
			continue
		}
		// Its first slot is another now (a rebalance): the probe and the
		// nodes channel go by the new tag, so the connection is made anew.
		for _, info := range t.shards {
			if info.addr == addr && sh.tag != "" && tagFor(info.slots[0][0]) != sh.tag {
				s.dropLocked(sh, "moved")
			}
		}
	}
	for c, st := range s.want {
		if st.on != nil && t.owner[st.slot] != st.on.addr {
			s.leaving = append(s.leaving, leaving{st.on, st.slot, c})
			s.unaskLocked(st, "moved")
		}
	}
	s.dirty = true
}

// unaskLocked marks a channel as asked on no connection.
func (s *subscriber) unaskLocked(st *subState, reason string) {
	if st.confirmed {
		st.lost = true
		s.count(reason)
	}
	st.on, st.confirmed = nil, false
}

func (s *subscriber) count(reason string) {
	if s.redone != nil {
		s.redone.WithLabelValues(reason).Inc()
	}
}

// connect opens a connection to every master that has none (to the one
// Redis, without a cluster).
func (s *subscriber) connect(now time.Time) {
	var addrs []string
	s.mu.Lock()
	if s.single != nil {
		addrs = []string{s.single.Options().Addr}
	} else if s.topo != nil {
		for _, sh := range s.topo.shards {
			addrs = append(addrs, sh.addr)
		}
	}
	var todo []string
	for _, a := range addrs {
		if s.shards[a] == nil && !now.Before(s.retryAt[a]) {
			todo = append(todo, a)
		}
	}
	s.mu.Unlock()
	for _, addr := range todo {
		sh := &shard{addr: addr, unsubscribed: map[string]int{}}
		if s.single != nil {
			sh.client = s.single
			sh.probe = s.probeName
			sh.ps = s.single.Subscribe(s.ctx)
		} else {
			sh.client, sh.own = s.dial(addr), true
			sh.tag = tagFor(s.firstSlot(addr))
			sh.probe = onShard(s.probeName, sh.tag)
			sh.ps = sh.client.SSubscribe(s.ctx)
		}
		err := s.send(sh, true, append([]string{sh.probe}, s.shardNames(sh.tag)...))
		s.mu.Lock()
		if err != nil {
			s.retryAt[addr] = time.Now().Add(redialAfter)
			s.stale = true
			s.mu.Unlock()
			sh.ps.Close()
			if sh.own {
				sh.client.Close()
			}
			s.log.Debug("bus: connecting to Redis to subscribe", "addr", addr, "err", err)
			continue
		}
		sh.heard.Store(time.Now().UnixNano())
		sh.probedAt = time.Now()
		s.shards[addr] = sh
		s.dirty = true
		s.mu.Unlock()
		s.wg.Add(1)
		go func() { defer s.wg.Done(); s.read(sh) }()
	}
}

// heardSince is when a channel's subscription was last confirmed; false
// while it is not (not yet, or lost and not yet made again).
func (s *subscriber) heardSince(channel string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.want[channel]
	if st == nil || !st.confirmed {
		return time.Time{}, false
	}
	return st.since, true
}

// shardOf is the address of the master that serves a channel, as last
// read; "" on one Redis, or while no master serves it.
func (s *subscriber) shardOf(channel string) string {
	if s.single != nil {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.topo == nil {
		return ""
	}
	return s.topo.owner[slotOf(channel)]
}

// onShard names a channel's copy on the shard whose slot has tag: the tag
// comes first, so that no brace in the name (a node id's) can take its
// place.
func onShard(name, tag string) string { return "{" + tag + "}" + name }

// shardNames is the everyShard channels as named on a shard with tag.
func (s *subscriber) shardNames(tag string) []string {
	names := make([]string, len(s.everyShard))
	for i, n := range s.everyShard {
		names[i] = n
		if tag != "" {
			names[i] = onShard(n, tag)
		}
	}
	return names
}

// onEvery is the names of an everyShard channel on each master: publish
// to all of them, and every node hears it unless every shard fails.
func (s *subscriber) onEvery(name string) []string {
	if s.single != nil {
		return []string{name}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.topo == nil || len(s.topo.shards) == 0 {
		return []string{onShard(name, tagFor(0))}
	}
	names := make([]string, len(s.topo.shards))
	for i, sh := range s.topo.shards {
		names[i] = onShard(name, tagFor(sh.slots[0][0]))
	}
	return names
}

// firstSlot is a slot the master at addr serves.
func (s *subscriber) firstSlot(addr string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sh := range s.topo.shards {
		if sh.addr == addr && len(sh.slots) > 0 {
			return sh.slots[0][0]
		}
	}
	return 0
}

// send subscribes (or unsubscribes) channels on a connection: sharded
// channels of one slot per command, as Redis requires.
func (s *subscriber) send(sh *shard, on bool, channels []string) error {
	ctx, cancel := context.WithTimeout(s.ctx, 2*time.Second)
	defer cancel()
	switch {
	case s.single != nil && on:
		return sh.ps.Subscribe(ctx, channels...)
	case s.single != nil:
		return sh.ps.Unsubscribe(ctx, channels...)
	case on:
		return sh.ps.SSubscribe(ctx, channels...)
	default:
		return sh.ps.SUnsubscribe(ctx, channels...)
	}
}

// batch is the channels of one command.
type batch struct {
	on       *shard
	slot     int
	channels []string
}

// subscribe sends the unsubscriptions queued and the subscriptions
// missing, and asks again for those unconfirmed too long.
func (s *subscriber) subscribe(now time.Time) {
	s.mu.Lock()
	if !s.dirty && now.Sub(s.scanAt) < time.Second {
		s.mu.Unlock()
		return
	}
	s.dirty, s.scanAt = false, now
	group := func(list []batch, sh *shard, slot int, c string) []batch {
		for i := range list {
			if list[i].on == sh && list[i].slot == slot && len(list[i].channels) < 512 {
				list[i].channels = append(list[i].channels, c)
				return list
			}
		}
		return append(list, batch{sh, slot, []string{c}})
	}
	var offs, ons []batch
	for _, l := range s.leaving {
		if !l.on.dead {
			l.on.unsubscribed[l.channel]++
			offs = group(offs, l.on, l.slot, l.channel)
		}
	}
	s.leaving = nil
	for c, st := range s.want {
		if st.on != nil && (st.confirmed || now.Sub(st.sentAt) < confirmWithin) {
			continue
		}
		if st.on != nil {
			s.count("unconfirmed")
		}
		addr := ""
		if s.single != nil {
			addr = s.single.Options().Addr
		} else if s.topo != nil {
			addr = s.topo.owner[st.slot]
		}
		sh := s.shards[addr]
		if st.on != nil && st.on != sh && !st.on.dead {
			// Asked on a connection that no longer serves it: leave it
			// there, or it would deliver on unasked.
			st.on.unsubscribed[c]++
			offs = group(offs, st.on, st.slot, c)
		}
		if sh == nil || sh.dead {
			st.on = nil
			continue
		}
		st.on, st.sentAt = sh, now
		slot := st.slot
		if s.single != nil {
			slot = 0 // one Redis takes any channels in one command
		}
		ons = group(ons, sh, slot, c)
	}
	s.mu.Unlock()
	for _, b := range offs {
		if err := s.send(b.on, false, b.channels); err != nil {
			s.lose(b.on, "lost", err)
		}
	}
	for _, b := range ons {
		if err := s.send(b.on, true, b.channels); err != nil {
			s.lose(b.on, "lost", err)
		}
	}
}

// probe publishes each connection's probe, and replaces a connection
// that has not heard its own for three probe intervals.
func (s *subscriber) probe(now time.Time) {
	var due []*shard
	s.mu.Lock()
	for _, sh := range s.shards {
		if now.Sub(time.Unix(0, sh.heard.Load())) > 3*s.probeEvery && !sh.busy.Load() {
			s.log.Warn("bus: a Redis subscription went silent; subscribing again", "addr", sh.addr)
			s.dropLocked(sh, "silent")
			s.poke()
			continue
		}
		if !sh.probing && now.Sub(sh.probedAt) >= s.probeEvery {
			sh.probing, sh.probedAt = true, now
			due = append(due, sh)
		}
	}
	s.mu.Unlock()
	for _, sh := range due {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			ctx, cancel := context.WithTimeout(s.ctx, s.probeEvery)
			publishTo(ctx, sh.client, s.sharded(), sh.probe, "p")
			cancel()
			s.mu.Lock()
			sh.probing = false
			s.mu.Unlock()
		}()
	}
}

// read receives what one connection brings, until it fails.
func (s *subscriber) read(sh *shard) {
	for {
		msg, err := sh.ps.Receive(s.ctx)
		if err != nil {
			if s.ctx.Err() != nil {
				return
			}
			var reply redis.Error
			if errors.As(err, &reply) {
				s.refused(sh, err)
				continue
			}
			s.lose(sh, "lost", err)
			return
		}
		switch m := msg.(type) {
		case *redis.Message:
			if m.Channel != sh.probe {
				sh.busy.Store(true)
				s.deliver(m.Channel, m.Payload)
			}
			sh.heard.Store(time.Now().UnixNano())
			sh.busy.Store(false) // after heard: never judged on a stale heard
		case *redis.Subscription:
			s.confirmed(sh, m)
		}
	}
}

// confirmed takes Redis's word on a subscription.
func (s *subscriber) confirmed(sh *shard, m *redis.Subscription) {
	s.mu.Lock()
	if sh.dead {
		s.mu.Unlock()
		return
	}
	if m.Channel == sh.probe {
		sh.heard.Store(time.Now().UnixNano())
		s.mu.Unlock()
		return
	}
	st := s.want[m.Channel]
	switch m.Kind {
	case "subscribe", "ssubscribe":
		if st == nil || st.on != sh || st.confirmed {
			s.mu.Unlock()
			return
		}
		st.confirmed, st.since = true, time.Now()
		resumed := st.lost
		st.lost = false
		s.mu.Unlock()
		s.ready(m.Channel, resumed)
		return
	case "unsubscribe", "sunsubscribe":
		if n := sh.unsubscribed[m.Channel]; n > 0 {
			if n == 1 {
				delete(sh.unsubscribed, m.Channel)
			} else {
				sh.unsubscribed[m.Channel] = n - 1
			}
		} else if st != nil && st.on == sh {
			// Not asked for: the slot left this master (a reshard).
			s.unaskLocked(st, "moved")
			s.stale, s.dirty = true, true
			s.poke()
		}
	}
	s.mu.Unlock()
}

// refused takes an error reply: a slot served elsewhere (MOVED) has its
// channels asked for again once the topology is read; any other refusal
// (CLUSTERDOWN, say) has this connection's unconfirmed channels asked for
// again on the next round.
func (s *subscriber) refused(sh *shard, err error) {
	slot := movedSlot(err)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.want {
		if st.on != sh || st.confirmed {
			continue
		}
		if st.slot == slot {
			st.on = nil // refused: asked nowhere
		} else if slot < 0 {
			// Which command was refused is not said: ask again now, on
			// whoever serves the slot then (subscribe leaves this one
			// first if that is another).
			st.sentAt = time.Time{}
		}
	}
	if slot >= 0 {
		// An unsubscription for the slot was refused too: none of ours
		// is still to be confirmed there.
		for c := range sh.unsubscribed {
			if slotOf(c) == slot {
				delete(sh.unsubscribed, c)
			}
		}
	}
	s.stale, s.dirty = true, true
	s.log.Debug("bus: Redis refused a subscription", "addr", sh.addr, "err", err)
}

// lose drops a connection that failed.
func (s *subscriber) lose(sh *shard, reason string, err error) {
	s.mu.Lock()
	if !sh.dead {
		s.log.Warn("bus: lost a Redis subscription connection; subscribing again", "addr", sh.addr, "err", err)
		s.dropLocked(sh, reason)
	}
	s.mu.Unlock()
	s.poke()
}

// dropLocked closes a connection and marks its channels as asked nowhere.
func (s *subscriber) dropLocked(sh *shard, reason string) {
	if sh.dead {
		return
	}
	sh.dead = true
	if s.shards[sh.addr] == sh {
		delete(s.shards, sh.addr)
	}
	for _, st := range s.want {
		if st.on == sh {
			s.unaskLocked(st, reason)
		}
	}
	s.stale, s.dirty = true, true
	s.retryAt[sh.addr] = time.Now().Add(redialAfter)
	s.wg.Add(1)
	go func() { // not under mu: a command being written holds the PubSub
		defer s.wg.Done()
		sh.ps.Close()
		if sh.own {
			sh.client.Close()
		}
	}()
}
