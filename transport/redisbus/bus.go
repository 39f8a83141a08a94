package redisbus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/tandemhq/tandem/awareness"
	"github.com/tandemhq/tandem/internal/lifecycle"
)

// DocumentReplica is what the bus needs from the document layer.
// *doc.Hub implements it.
type DocumentReplica interface {
	// ReceiveRemote takes a document message another node published with
	// PublishDocument (doc/cluster.go is that protocol); it may block
	// while the document layer is far behind, not longer.
	ReceiveRemote(documentID string, payload []byte) error
	// AnnounceHeads publishes this node's heads of a document, if it has
	// them: the other nodes answer with what either side lacks.
	AnnounceHeads(documentID string)
	// Holds answers whether this node holds the document, stored; it
	// may answer later, and must not block.
	Holds(documentID string, answer func(held bool))
	// Missed tells that the bus may have lost messages (Redis was
	// unreachable): documents in memory catch up from the store.
	Missed()
}

// NodeWatcher is told when a node stops or goes silent past its TTL:
// what it still owed (its mention journals) is this node's to take. The
// bus tells the document layer if its DocumentReplica is one.
type NodeWatcher interface {
	NodeGone(node string)
}

// PresenceReplica is what the bus needs from the presence layer.
// *awareness.Hub implements it.
type PresenceReplica interface {
	// ReceiveRemote takes a presence message another node published
	// with PublishPresence (awareness/cluster.go is that protocol).
	ReceiveRemote(node, documentID string, payload []byte) error
	// SendState publishes the whole presence of this node's peers in a
	// document: another node started watching it, or lost messages.
	SendState(documentID string)
	// AnnounceRoster publishes this node's peers visible in a document.
	AnnounceRoster(documentID string)
	ApplyUserStatus(node, userID string, s awareness.Status)
	LocalUserStatuses() map[string]awareness.Status
	NodeAlive(node string)
	NodeGone(node string)
}

// Config configures a Bus. Zero fields take the documented defaults.
type Config struct {
	// Client is one Redis (*redis.Client) or a Redis Cluster
	// (*redis.ClusterClient): then every channel is a sharded channel.
	Client redis.UniversalClient // required
	NodeID string                // required
	// NodeTTL is how long a silent node keeps its peers; default 5s.
	NodeTTL time.Duration
	// GossipInterval is how often each watched document's heads are
	// compared across nodes, to repair anything a message loss missed;
	// default 3s.
	GossipInterval time.Duration
	// Queue bounds the messages waiting to be published; default 8192.
	Queue int
	// QueueBytes bounds their bytes, in the queue and the shards' lanes
	// together, pipelines in flight included; default 64 MiB. A message
	// that would pass it is dropped; a leave is not (publish.go).
	QueueBytes int64
	// ProbeInterval is how often each subscription connection publishes
	// a probe to itself; one that hears none for three intervals is
	// replaced. Default 1s.
	ProbeInterval time.Duration
	// AskTimeout bounds the wait for the other nodes' answers when this
	// node looks for a document it lacks (FindDocument); default 1s.
	AskTimeout time.Duration
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// Bus replicates documents and presence between nodes over Redis
// Pub/Sub. Each watched document has a channel, subscribed while this
// node has peers on it; one more carries node heartbeats, and word of a
// peer id claim taken over from another node. Live node state also sits in
// Redis keys with a TTL (tandem:node:<id>), and so do the peer ids of
// authenticated connections (claims.go).
//
// BUS.md, beside this file, is the protocol: channels, kinds of message,
// keys, and what is dropped when and how it is repaired.
type Bus struct {
	cfg      Config
	log      *slog.Logger
	loop     lifecycle.Loop
	docs     DocumentReplica // set by Attach
	presence PresenceReplica // set by Attach
	sub      *subscriber
	out      chan busOut
	dmu      sync.Mutex // serializes dispatch: each connection has a reader

	run string // this process's run (busMsg.Run)

	mu         sync.Mutex     // guards watched, subscribed, changed, nodes, runs and users
	watched    map[string]int // watched documents: local connections on each
	subscribed map[string]bool
	changed    map[string]bool // documents whose subscription may need a change
	nodes      map[string]time.Time
	runs       map[string]string // the run last heard of each node
	users      map[string]bool   // users whose status channel this node follows
	usersSub   map[string]bool   // of those, the subscribed ones
	usersDirty map[string]bool
	ready      []confirmation       // subscriptions confirmed, for subscribeLoop
	asked      map[string]time.Time // questions answered: node/number, when
	owed       map[string]bool      // users whose last status message was lost
	ended      map[string]time.Time // runs that said bye or were replaced, when
	wake       chan struct{}        // tells subscribeLoop that changed or ready has entries

	amu    sync.Mutex // guards asks and askSeq
	asks   map[uint64]*pendingAsk
	askSeq uint64

	cmu     sync.Mutex              // guards claims
	claims  map[string][]*peerClaim // this node's peer id claims (claims.go)
	recheck chan string             // peer ids another node may have taken a claim on

	// lose, set by tests before Run, makes the bus lose the messages it
	// reports true for, as a lossy network or a full queue would.
	lose func(busOut) bool

	attached atomic.Bool    // docs and presence are set: dispatch hands them messages
	writing  atomic.Bool    // a beat's writes wait for Redis
	writes   sync.WaitGroup // the beats' writes

	// The bytes of the messages in the queue, the leaves waiting past
	// it and the lanes, pipelines in flight included (QueueBytes).
	queued atomic.Int64

	pmu       sync.Mutex // guards lanes and held
	lanes     map[string]*lane
	held      map[string]*held
	lanesDone sync.WaitGroup

	lmu           sync.Mutex // guards leaves
	leaves        []busOut   // leaves that found the queue full, oldest first
	leavesWaiting chan struct{}

	published, dropped, received prometheus.Counter
	resubscribed                 *prometheus.CounterVec
}

// confirmation is a subscription Redis confirmed: the first time, or
// again after it was lost.
type confirmation struct {
	channel string
	resumed bool
}

// busKind names what a bus message is; BUS.md describes each.
type busKind string

// The kinds of bus message, by channel (BUS.md).
const (
	// tandem:nodes
	kindAlive busKind = "alive" // a node's heartbeat
	kindBye   busKind = "bye"   // a node stops cleanly: its peers are gone
	kindClaim busKind = "claim" // a node took over a peer id claim
	kindAsk   busKind = "ask"   // who holds this document?
	// tandem:inbox:<node>
	kindAnswer busKind = "answer" // the answer to an ask
	// tandem:doc:<id>: the document layer's own messages, as bytes ...
	kindDoc busKind = "doc" // a document message (doc/cluster.go)
	// ... and presence
	kindPresence busKind = "pres"  // a presence message (awareness/cluster.go)
	kindHello    busKind = "hello" // a node starts watching, or lost something: send your state
	// tandem:user:<id>
	kindUser busKind = "user" // a user's status on the sending node
)

// busMsg is one message on the bus, CBOR-encoded.
type busMsg struct {
	Kind busKind `cbor:"k"`
	Node string  `cbor:"n"`
	// Run is the sending node's run: random per process start, so that a
	// node restarted under the same id is told from its previous run.
	Run string `cbor:"i,omitempty"`
	// Data is a document ("doc") or presence ("pres") message, opaque to
	// the bus.
	Data []byte `cbor:"d,omitempty"`
	User string `cbor:"u,omitempty"`
	Peer string `cbor:"p,omitempty"` // a peer id claimed ("claim")
	// Status is a user's status on the sending node.
	Status awareness.Status `cbor:"s,omitempty"`
	// Finding a document ("ask" on the nodes channel, "answer" to the
	// asking node's inbox): which document, which question, the answer.
	Doc   string `cbor:"doc,omitempty"`
	Ask   uint64 `cbor:"a,omitempty"`
	Found bool   `cbor:"f,omitempty"`
}

func docChannel(id string) string { return "tandem:doc:" + id }

// New validates cfg. Run starts it.
func New(cfg Config) (*Bus, error) {
	if cfg.Client == nil || cfg.NodeID == "" {
		return nil, errors.New("redisbus: Config needs Client and NodeID")
	}
	if cfg.NodeTTL <= 0 {
		cfg.NodeTTL = 5 * time.Second
	}
	if cfg.GossipInterval <= 0 {
		cfg.GossipInterval = 3 * time.Second
	}
	if cfg.Queue <= 0 {
		cfg.Queue = 8192
	}
	if cfg.QueueBytes <= 0 {
		cfg.QueueBytes = 64 << 20
	}
	if cfg.AskTimeout <= 0 {
		cfg.AskTimeout = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	b := &Bus{
		cfg: cfg,
		log: cfg.Logger,
		out: make(chan busOut, cfg.Queue),

		leavesWaiting: make(chan struct{}, 1),
		watched:       make(map[string]int),
		subscribed:    make(map[string]bool),
		changed:       make(map[string]bool),
		nodes:         make(map[string]time.Time),
		runs:          make(map[string]string),
		ended:         make(map[string]time.Time),
		asked:         make(map[string]time.Time),
		owed:          make(map[string]bool),
		lanes:         make(map[string]*lane),
		held:          make(map[string]*held),
		run:           fmt.Sprintf("%016x", rand.Uint64()),
		users:         make(map[string]bool),
		usersSub:      make(map[string]bool),
		usersDirty:    make(map[string]bool),
		wake:          make(chan struct{}, 1),
		claims:        make(map[string][]*peerClaim),
		asks:          make(map[uint64]*pendingAsk),
		askSeq:        rand.Uint64() >> 1, // a restarted node does not take answers meant for its last run
		recheck:       make(chan string, 64),
		published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tandem_redis_published_total", Help: "Messages published to Redis."}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tandem_redis_dropped_total", Help: "Messages not published: queue full (in messages or bytes) or Redis unreachable."}),
		received: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tandem_redis_received_total", Help: "Messages received from other nodes over Redis."}),
		resubscribed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_redis_resubscribed_total",
			Help: "Channels subscribed again: their connection failed (lost) or went silent (silent), their slot moved (moved), or Redis did not confirm them (unconfirmed)."},
			[]string{"reason"}),
	}
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(b.published, b.dropped, b.received, b.resubscribed)
		cfg.Registerer.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tandem_redis_queue_bytes",
			Help: "Bytes of messages waiting to be published to Redis, in the queue and the shards' lanes; bounded by QueueBytes but for leaves.",
		}, func() float64 { return float64(b.queued.Load()) }))
	}
	var err error
	b.sub, err = newSubscriber(subscriberConfig{
		client: cfg.Client, log: cfg.Logger, probeEvery: cfg.ProbeInterval,
		// Subscribed from now: answers to this node's first questions are
		// heard even before Run.
		everyShard: []string{nodesChannel, inboxChannel(cfg.NodeID)},
		deliver:    b.dispatch, ready: b.confirmed, redone: b.resubscribed,
	})
	if err != nil {
		return nil, err
	}
	return b, nil
}

// Attach gives the bus the layers it replicates; call it before Run. (They
// are built with the bus as their replicator, hence not in Config.)
func (b *Bus) Attach(docs DocumentReplica, presence PresenceReplica) {
	b.docs, b.presence = docs, presence
	b.attached.Store(true)
}

// Run serves the bus until ctx ends or Close; then it says goodbye for this
// node: what is still queued (its peers' leaves), then its bye.
func (b *Bus) Run(ctx context.Context) error {
	if b.docs == nil || b.presence == nil {
		return errors.New("redisbus: Run before Attach")
	}
	return b.loop.Run(ctx, func(ctx context.Context) error {
		b.serve(ctx)
		return nil
	})
}

// Close stops Run, waiting for its goodbye or ctx, and unsubscribes. Safe
// to call twice. The Redis client is the caller's to close, after this.
func (b *Bus) Close(ctx context.Context) error {
	_, err := b.loop.Stop(ctx)
	b.sub.close() // Run closed it already if it ran; twice is harmless
	return err
}

func (b *Bus) serve(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); b.publishLoop(ctx) }()
	go func() { defer wg.Done(); b.subscribeLoop(ctx) }()
	go func() { defer wg.Done(); b.beatLoop(ctx) }()
	<-ctx.Done()
	b.sub.close()
	wg.Wait()
	// Tell the others at once rather than letting them wait out the TTL:
	// what is still queued (the leaves of the peers that just left), then
	// the node's bye, then its key.
	sctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	pipe := b.cfg.Client.Pipeline()
	var msgs []*redis.IntCmd
	left := append(b.laneLeft(), b.takeLeaves()...)
	for drained := false; !drained; {
		select {
		case m := <-b.out:
			left = append(left, m)
		default:
			drained = true
		}
	}
	for _, m := range left {
		msgs = append(msgs, b.queue(sctx, pipe, m))
	}
	bye, _ := b.encode(busMsg{Kind: kindBye})
	var byes []*redis.IntCmd
	for _, ch := range b.sub.onEvery(nodesChannel) {
		byes = append(byes, b.publish(sctx, pipe, ch, bye))
	}
	pipe.Del(sctx, "tandem:node:"+b.cfg.NodeID)
	_, err := pipe.Exec(sctx)
	// On a Redis Cluster one shard may fail while the others take theirs.
	failed := 0
	for _, c := range msgs {
		if c.Err() != nil {
			failed++
		}
	}
	b.dropped.Add(float64(failed))
	b.published.Add(float64(len(msgs) - failed))
	b.release(left...)
	heard := false
	for _, c := range byes {
		heard = heard || c.Err() == nil
	}
	if !heard {
		b.log.Warn("bus: the goodbye to the cluster failed; the other nodes will wait out the node TTL", "err", err)
	} else if failed > 0 {
		b.log.Warn("bus: some of the last messages to the cluster failed", "messages", failed, "err", err)
	}
}

// encode makes a message of this node's, CBOR-encoded.
func (b *Bus) encode(m busMsg) ([]byte, error) {
	m.Node, m.Run = b.cfg.NodeID, b.run
	return cbor.Marshal(m)
}

// publish adds a message to a pipeline.
func (b *Bus) publish(ctx context.Context, pipe redis.Pipeliner, channel string, payload []byte) *redis.IntCmd {
	return publishTo(ctx, pipe, b.sub.sharded(), channel, payload)
}

// publishTo publishes to a channel, or to a sharded channel (a Redis
// Cluster's), which a cluster client sends to the channel's shard.
func publishTo(ctx context.Context, c redis.Cmdable, sharded bool, channel string, payload any) *redis.IntCmd {
	if sharded {
		return c.SPublish(ctx, channel, payload)
	}
	return c.Publish(ctx, channel, payload)
}

// LogTo sends go-redis's own messages (a dial that failed, say) to log at
// debug level: the bus says what matters in its own words.
func LogTo(log *slog.Logger) { redis.SetLogger(goRedisLog{log}) }

type goRedisLog struct{ log *slog.Logger }

func (l goRedisLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, "redis: "+fmt.Sprintf(format, v...))
}

// Ping reports whether Redis answers.
func (b *Bus) Ping(ctx context.Context) error { return b.cfg.Client.Ping(ctx).Err() }
