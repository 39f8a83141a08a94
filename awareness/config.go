package awareness

import (
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Config configures a Hub. Zero fields take the documented defaults.
type Config struct {
	// Tick is the coalescing period: per peer and channel at most one
	// update is forwarded per tick, the newest; default 50ms.
	Tick time.Duration
	// RoomTickPeers lengthens a room's coalescing period by one Tick for
	// every so many peers in it (default 50), up to MaxRoomTick (default
	// 500ms): a big room sends less often per peer, so what it sends
	// grows with its size rather than with its square. A peer whose
	// period of more than one tick ends with a value gone stale in its
	// last tick is held: its next change goes at once, or the stale value
	// after two ticks (forward.go).
	RoomTickPeers int
	MaxRoomTick   time.Duration
	// TTL removes a peer not heard from (no pong, no message) for this
	// long; default 17.5s (3.5 pings at the default ping interval).
	TTL time.Duration
	// Sweep is how often the hub goes over all its peers for the TTLs and
	// for the status changes time makes; default 1s. A tick (20 a second)
	// over 10,000 idle peers took a fifth of a core.
	Sweep time.Duration
	// AwayAfter makes a peer away after this long without activity;
	// default 5 minutes.
	AwayAfter time.Duration
	// TypingTimeout clears a typing flag not renewed for this long;
	// default 3s.
	TypingTimeout time.Duration
	// RelaySession names the ephemeral sessions under which the hub sends
	// presence in peers' names, one per room (forward.go); default random
	// per hub.
	RelaySession string
	// MaxNesting bounds how deeply a presence payload may nest: 0 for
	// DefaultMaxNesting (16), else MinNesting to MaxNesting (4 to 64);
	// New refuses anything else.
	MaxNesting int
	// MaxChannels bounds the channels one peer may hold in a document's
	// presence (the server's own included); default 32.
	MaxChannels int
	// MaxStateBytes bounds the bytes one peer holds in a document's
	// presence: the names of its channels, their values and the sessions
	// of their clocks (each up to 256 bytes, 279 for a write the server
	// made in the peer's name); default 64 KiB.
	MaxStateBytes int
	// Replicator, when set, receives this node's peers' presence for the
	// other nodes of a cluster.
	Replicator Replicator
	// RemoteTTL removes a peer of another node not heard of (a delta, or
	// its node's roster naming it) for this long, once that node has sent
	// a roster: a leave lost on the way cannot leave a ghost. Zero: remote
	// peers live as long as their node.
	RemoteTTL time.Duration
	// Directory, in a cluster, answers for users this node does not
	// follow: their status on the other nodes.
	Directory Directory
	// LastSeen stores when users went offline; nil keeps it in memory only.
	LastSeen LastSeenStore
	// History, when set, records presence history (history.go): each
	// stretch of a user's presence in a document here and of its status,
	// written in batches off the presence path. HistoryNode names this
	// node in it; HistoryRetention deletes intervals that ended longer ago
	// (zero keeps them).
	History          HistoryStore
	HistoryNode      string
	HistoryRetention time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Logger receives the hub's logs; default slog.Default().
	Logger *slog.Logger
	// Registerer receives the hub's metrics; nil registers none.
	Registerer prometheus.Registerer
}

func (c *Config) setDefaults() {
	if c.Tick <= 0 {
		c.Tick = 50 * time.Millisecond
	}
	if c.RoomTickPeers <= 0 {
		c.RoomTickPeers = 50
	}
	if c.MaxRoomTick < c.Tick {
		c.MaxRoomTick = max(c.Tick, 500*time.Millisecond)
	}
	if c.TTL <= 0 {
		c.TTL = 17500 * time.Millisecond
	}
	if c.Sweep <= 0 {
		c.Sweep = time.Second
	}
	if c.AwayAfter <= 0 {
		c.AwayAfter = 5 * time.Minute
	}
	if c.TypingTimeout <= 0 {
		c.TypingTimeout = 3 * time.Second
	}
	if c.RelaySession == "" {
		var b [8]byte
		rand.Read(b[:])
		c.RelaySession = "tandem-" + hex.EncodeToString(b[:])
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.MaxNesting == 0 {
		c.MaxNesting = DefaultMaxNesting
	}
	if c.MaxChannels <= 0 {
		c.MaxChannels = 32
	}
	if c.MaxStateBytes <= 0 {
		c.MaxStateBytes = 64 << 10
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}
