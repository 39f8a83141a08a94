package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/tandemhq/tandem/awareness"
	"github.com/tandemhq/tandem/web/webhook"
)

// config is the command line of cmd/tandem. Every flag has a TANDEM_*
// environment equivalent (--data-dir is TANDEM_DATA_DIR); a flag given on
// the command line wins over the environment.
type config struct {
	Addr            string
	DataDir         string
	LogLevel        slog.Level
	PingInterval    time.Duration
	MaxMessageBytes int64
	SendQueueBytes  int64
	// ReadBudgetBytes bounds the bytes of inbound messages being read,
	// node-wide; MessageReadTimeout the time one may take to arrive.
	ReadBudgetBytes    int64
	MessageReadTimeout time.Duration
	// SyncStateBytes bounds the sync states kept for one connection.
	SyncStateBytes int64
	// RedisQueueBytes bounds the bytes waiting to be published to Redis.
	RedisQueueBytes int64
	PresenceTick    time.Duration
	AwayAfter       time.Duration
	// PresenceHistory keeps presence history this long; 0 keeps none.
	PresenceHistory time.Duration

	DebugAddr string
	RedisURL  string
	// RedisCluster makes RedisURL a Redis Cluster's.
	RedisCluster bool
	PostgresURL  string
	NodeID       string
	SyncSpacing  time.Duration
	SyncGather   time.Duration
	SaveDocs     bool
	NodeTTL      time.Duration

	UnavailableGrace time.Duration
	HTTPIdleTimeout  time.Duration

	NotifyWindow time.Duration
	// Webhooks: the endpoints, the secret that signs, the events sent
	// (empty: all) and document.changed's debounce and maximum wait.
	WebhookURLs       []string
	WebhookSecret     string
	WebhookEvents     string
	WebhookDebounce   time.Duration
	WebhookMaxWait    time.Duration
	MentionTextField  string
	MentionTitleField string

	AuthSecret     string
	AuthPublicKey  string
	AuthAudience   string
	AuthIssuer     string
	AuthAllowNoExp bool
	AllowedOrigins string
	AllowedHosts   string
	MaxDocsPerConn int
	MaxPeersPerDoc int
	MaxConnsPerIP  int
	// MaxWatchedPerIP bounds the user ids the presence watch streams of
	// one address follow (web.StreamLimits.WatchedPerIP).
	MaxWatchedPerIP int
	APIRatePerIP    float64
	ParkIdle        bool
	GCTune          bool
	// GCMax is the most headroom the tuner gives: GOGC, else 100; 0
	// when GOGC is off or negative, or --gc-tune is false, which leave
	// the collector alone.
	GCMax             int
	MaxEphemeralBytes int
	MaxPresenceDepth  int
	MaxPresenceChans  int
	MaxPresenceBytes  int
	MessageRate       float64
	MessageBurst      int

	// APIReadBytes bounds what the document API's requests hold together
	// (web.DocumentLimits.ReadBytes).
	APIReadBytes int64

	MaxChangeBytes     int64
	MaxDocumentBytes   int64
	MaxDocumentChanges int64
	MaxWaitingBytes    int64
	// Refused changes remembered by hash, node-wide (doc/refused.go).
	MaxRefusedChanges     int
	MaxRefusedChangeBytes int64
}

func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("tandem", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.Addr, "addr", ":8080", "address to listen on")
	fs.StringVar(&c.DataDir, "data-dir", "./tandem-data", "directory of the embedded document store")
	fs.TextVar(&c.LogLevel, "log-level", slog.LevelInfo, "log level: debug, info, warn or error")
	fs.DurationVar(&c.PingInterval, "ping-interval", 5*time.Second,
		"mean WebSocket ping interval (±10% jitter); a socket missing 3 pongs is closed")
	fs.Int64Var(&c.MaxMessageBytes, "max-message-bytes", 16<<20, "largest inbound WebSocket frame")
	fs.Int64Var(&c.SendQueueBytes, "send-queue-bytes", 0,
		"bytes of document sync one connection may have waiting to be written before it is closed as a slow consumer; 0 is 4 × --max-message-bytes (a single larger reply still goes out)")
	fs.Int64Var(&c.ReadBudgetBytes, "read-budget-bytes", 0,
		"bytes of inbound messages the node's connections may hold while they arrive, together; 0 is 8 × --max-message-bytes (at least twice it)")
	fs.DurationVar(&c.MessageReadTimeout, "message-read-timeout", time.Minute,
		"time a message may take to arrive whole once its first byte has; past it the connection is closed (4005)")
	fs.Int64Var(&c.SyncStateBytes, "sync-state-bytes", 4<<20,
		"bytes of sync state (heads named, changes owed, filters made) the node may keep for one connection over its documents; a message that would pass it is refused")
	fs.Int64Var(&c.RedisQueueBytes, "redis-queue-bytes", 64<<20,
		"bytes of messages waiting to be published to Redis; past it ordinary messages are dropped (goodbyes never)")
	fs.DurationVar(&c.PresenceTick, "presence-tick", 50*time.Millisecond,
		"presence coalescing period: per peer and channel at most one update per tick, newest wins")
	fs.BoolVar(&c.ParkIdle, "park-idle", true,
		"a connection with nothing to read gives up its reader goroutine and waits on an epoll set, whose poller reads it, takes pongs and drops what the client passes back, and starts a reader for the rest (Linux); false keeps a reader per connection")
	fs.BoolVar(&c.GCTune, "gc-tune", true,
		"the garbage collector's headroom follows the load: the least GOGC, from 10 up to GOGC (default 100), at which collections take at most 2% of a core at the allocation rate of the moment; a quiet node gives back the memory idle connections do not need")
	fs.DurationVar(&c.AwayAfter, "away-after", 5*time.Minute, "a connected peer without activity for this long is away")
	c.PresenceHistory = 30 * 24 * time.Hour
	fs.Var((*days)(&c.PresenceHistory), "presence-history",
		"keep who was present in each document, and each user's status, this long (a Go duration, or days: 30d, 365d); 0 keeps no history")
	fs.StringVar(&c.DebugAddr, "debug-addr", "", "serve Go pprof profiles at this address (e.g. 127.0.0.1:6060); off when empty")
	fs.StringVar(&c.RedisURL, "redis-url", "", "Redis URL (redis://host:6379/0): replicate documents and presence with other nodes")
	fs.BoolVar(&c.RedisCluster, "redis-cluster", false,
		"--redis-url is a Redis Cluster's (redis://host1:port1?addr=host2:port2&addr=host3:port3): channels are sharded channels")
	fs.StringVar(&c.PostgresURL, "postgres-url", "", "PostgreSQL URL: keep documents and last-seen there instead of --data-dir")
	fs.StringVar(&c.NodeID, "node-id", "", "this node's name in a cluster (default: host name plus a random suffix)")
	fs.DurationVar(&c.NodeTTL, "node-ttl", 5*time.Second, "a node silent this long is dead: its peers are removed everywhere")
	fs.DurationVar(&c.UnavailableGrace, "unavailable-grace", 200*time.Millisecond,
		"how long a request for a document nobody has waits for it to arrive before doc-unavailable")
	fs.DurationVar(&c.SyncSpacing, "sync-spacing", 100*time.Millisecond,
		"the least time between two sync messages that bring a peer changes of a document, each sent once the peer answered the one before: the first change after a quiet spell goes at once, the next ones within the spacing together at its end; 0 sends each as soon as the peer answered the last")
	fs.DurationVar(&c.SyncGather, "sync-gather", 25*time.Millisecond,
		"while more than one peer writes a document (two peers' changes within ten seconds), how long the first change after a quiet spell waits for the changes that come with it before it goes to a reader (a stock client pays far more for each message that brings changes than for each change in it); a lone writer's changes, the answer to a peer that sent changes and a reader's first sync go at once; 0 sends it at once")
	fs.BoolVar(&c.SaveDocs, "save-documents", true,
		"send a new reader of a large document (1,000 changes or 256 KiB or more) the document as automerge saves it, written in Go from its changes, instead of its changes; automerge 3 loads it several times faster")
	fs.DurationVar(&c.HTTPIdleTimeout, "http-idle-timeout", 2*time.Minute,
		"an idle keep-alive HTTP connection is closed after this long (WebSockets are kept alive by pings instead)")
	fs.DurationVar(&c.NotifyWindow, "notify-window", time.Minute, "events for one recipient, kind and document within this window become one notification")
	fs.Var((*urlList)(&c.WebhookURLs), "webhook-url",
		"post signed events to this URL (repeat the flag, or separate URLs with commas); none sends no webhooks")
	fs.StringVar(&c.WebhookSecret, "webhook-secret", "", "the secret that signs webhooks (Standard Webhooks): whsec_ and the base64 of 24 to 64 random bytes; two separated by a space both sign, to rotate it")
	fs.StringVar(&c.WebhookEvents, "webhook-events", "",
		"comma-separated event types to send: "+strings.Join(webhook.AllEvents, ", ")+"; empty sends all")
	fs.DurationVar(&c.WebhookDebounce, "webhook-debounce", 2*time.Second, "a document's changes become one document.changed once they pause this long")
	fs.DurationVar(&c.WebhookMaxWait, "webhook-max-wait", 10*time.Second, "but at most this long after the first of them")
	fs.StringVar(&c.MentionTextField, "mention-text-field", "text", "the document field searched for @mentions: a root key, or keys through nested maps joined by dots")
	fs.StringVar(&c.MentionTitleField, "mention-title-field", "title", "the document field that names it in a mention's notification (else the text's first line)")
	fs.StringVar(&c.AuthSecret, "auth-secret", "", "HS256 secret (32+ bytes) that signs client tokens; empty with no public key runs open")
	fs.StringVar(&c.AuthPublicKey, "auth-public-key", "", "PEM file of the RS256 or ES256 public key that verifies client tokens")
	fs.StringVar(&c.AuthAudience, "auth-audience", "", "when set, a client token's aud must name it")
	fs.StringVar(&c.AuthIssuer, "auth-issuer", "", "when set, a client token's iss must be it")
	fs.BoolVar(&c.AuthAllowNoExp, "auth-allow-no-exp", false, "accept client tokens without exp (by default a token must expire)")
	fs.StringVar(&c.AllowedHosts, "allowed-hosts", "", "comma-separated host names whose same-host browser Origins a node without auth trusts (localhost and IP addresses always)")
	fs.StringVar(&c.AllowedOrigins, "allowed-origins", "", "comma-separated browser Origins allowed to connect besides this host's own; * for any")
	fs.IntVar(&c.MaxDocsPerConn, "max-docs-per-conn", 256, "documents one connection may open")
	fs.IntVar(&c.MaxPeersPerDoc, "max-peers-per-doc", 1000, "connections one document may have on this node")
	fs.IntVar(&c.MaxConnsPerIP, "max-conns-per-ip", 64, "open connections from one IP address")
	fs.IntVar(&c.MaxWatchedPerIP, "max-watched-per-ip", 10_000,
		"user ids the presence watch streams (/api/presence/watch) from one IP address may follow, of the node's 100,000")
	fs.Int64Var(&c.APIReadBytes, "api-read-bytes", 2<<30,
		"memory the document API's requests may hold together for the documents they read, edit or save (400 bytes per op, plus twice the changes' bytes), the edits they make (200 bytes per byte of JSON) and the changes they are sent, each charged before it is held; one request may take a quarter, and a larger one gets 413; at least 1 GiB")
	fs.Float64Var(&c.APIRatePerIP, "api-rate-per-ip", 100,
		"HTTP API (/api) requests per second from one IP address, in bursts of twice as many; over it a request gets 429")
	fs.IntVar(&c.MaxEphemeralBytes, "max-ephemeral-bytes", 64<<10, "largest ephemeral (presence) payload")
	fs.IntVar(&c.MaxPresenceChans, "max-presence-channels", 32, "channels one peer may hold in a document's presence")
	fs.IntVar(&c.MaxPresenceBytes, "max-presence-bytes", 64<<10, "bytes one peer may hold in a document's presence: its channels' names, values and clock sessions")
	fs.IntVar(&c.MaxPresenceDepth, "max-presence-depth", 16, "deepest CBOR nesting allowed in a presence payload (at least 4)")
	fs.Float64Var(&c.MessageRate, "message-rate", 100, "messages per second per connection; excess ephemerals are dropped, over twice this the connection closes")
	fs.IntVar(&c.MessageBurst, "message-burst", 200, "burst allowed above --message-rate")
	fs.Int64Var(&c.MaxChangeBytes, "max-change-bytes", 64<<20, "bytes one change may cost: what it expands to, plus 16 per operation (a 1 MiB paste costs about 20 MiB)")
	fs.Int64Var(&c.MaxDocumentBytes, "max-document-bytes", 256<<20, "bytes one document's changes may cost together, counted as for --max-change-bytes")
	fs.Int64Var(&c.MaxDocumentChanges, "max-document-changes", 1_000_000, "changes one document may hold")
	fs.Int64Var(&c.MaxWaitingBytes, "max-waiting-bytes", 64<<20, "bytes of changes waiting for a dependency, counted as for --max-change-bytes and summed over the node's documents")
	fs.IntVar(&c.MaxRefusedChanges, "max-refused-changes", 10_000, "refused changes the node remembers by hash, so that a client sending one again is refused without it being checked again")
	fs.Int64Var(&c.MaxRefusedChangeBytes, "max-refused-change-bytes", 4<<20, "memory those remembered refused changes may take")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: tandem [flags]\n\nEvery flag can also be set as TANDEM_<NAME>, e.g. TANDEM_DATA_DIR.\n\n")
		fs.PrintDefaults()
	}

	// The environment sets defaults; the command line overrides them.
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		name := "TANDEM_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v := getenv(name); v != "" && envErr == nil {
			if err := f.Value.Set(v); err != nil {
				envErr = fmt.Errorf("%s=%q: %w", name, v, err)
			}
		}
	})
	if envErr != nil {
		return c, envErr
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if c.GCTune {
		// As the runtime reads GOGC: off or negative turns the collector
		// off, which the tuner leaves alone.
		switch v := getenv("GOGC"); v {
		case "":
			c.GCMax = 100
		case "off":
		default:
			n, err := strconv.Atoi(v)
			if err != nil {
				return c, fmt.Errorf("GOGC=%q: not a percent", v)
			}
			c.GCMax = max(n, 0)
		}
	}
	if c.PingInterval < 100*time.Millisecond {
		return c, fmt.Errorf("--ping-interval %v is too short (minimum 100ms)", c.PingInterval)
	}
	if c.PresenceTick < time.Millisecond || c.PresenceTick > 10*time.Second {
		return c, fmt.Errorf("--presence-tick %v is out of range (1ms to 10s)", c.PresenceTick)
	}
	if c.AwayAfter < time.Second {
		return c, fmt.Errorf("--away-after %v is too short (minimum 1s)", c.AwayAfter)
	}
	if c.PresenceHistory != 0 && c.PresenceHistory < time.Hour {
		return c, fmt.Errorf("--presence-history %v is too short (0 for none, else at least 1h)", c.PresenceHistory)
	}
	for name, v := range map[string]int{
		"--max-docs-per-conn": c.MaxDocsPerConn, "--max-peers-per-doc": c.MaxPeersPerDoc,
		"--max-conns-per-ip": c.MaxConnsPerIP, "--max-watched-per-ip": c.MaxWatchedPerIP, "--max-ephemeral-bytes": c.MaxEphemeralBytes,
		"--message-burst":       c.MessageBurst,
		"--max-refused-changes": c.MaxRefusedChanges, "--max-refused-change-bytes": int(min(c.MaxRefusedChangeBytes, 1<<30)),
	} {
		if v < 1 {
			return c, fmt.Errorf("%s must be at least 1", name)
		}
	}
	if c.RedisCluster && c.RedisURL == "" {
		return c, fmt.Errorf("--redis-cluster needs --redis-url: a node of the Redis Cluster, or several")
	}
	if c.RedisURL != "" && c.PostgresURL == "" {
		return c, fmt.Errorf("--redis-url needs --postgres-url: the nodes of a cluster must share one durable store")
	}
	for name, v := range map[string]string{"--mention-text-field": c.MentionTextField, "--mention-title-field": c.MentionTitleField} {
		if v == "" || strings.HasPrefix(v, ".") || strings.HasSuffix(v, ".") || strings.Contains(v, "..") {
			return c, fmt.Errorf("%s %q: want a key, or keys joined by dots", name, v)
		}
	}
	if c.NotifyWindow < 100*time.Millisecond || c.NotifyWindow > 24*time.Hour {
		return c, fmt.Errorf("--notify-window %v must be between 100ms and 24h", c.NotifyWindow)
	}
	if len(c.WebhookURLs) > 0 && c.WebhookSecret == "" {
		return c, fmt.Errorf("--webhook-url needs --webhook-secret")
	}
	if c.WebhookDebounce < 10*time.Millisecond || c.WebhookMaxWait < c.WebhookDebounce {
		return c, fmt.Errorf("--webhook-debounce %v must be at least 10ms, and --webhook-max-wait %v at least it", c.WebhookDebounce, c.WebhookMaxWait)
	}
	if c.UnavailableGrace < time.Millisecond || c.UnavailableGrace > 10*time.Second {
		return c, fmt.Errorf("--unavailable-grace %v is out of range (1ms to 10s)", c.UnavailableGrace)
	}
	if c.SyncSpacing < 0 || c.SyncSpacing > time.Second {
		return c, fmt.Errorf("--sync-spacing %v is out of range (0 to 1s)", c.SyncSpacing)
	}
	if c.SyncGather < 0 || c.SyncGather > 100*time.Millisecond {
		return c, fmt.Errorf("--sync-gather %v is out of range (0 to 100ms)", c.SyncGather)
	}
	if c.HTTPIdleTimeout <= 0 {
		return c, fmt.Errorf("--http-idle-timeout must be positive")
	}
	if c.NodeTTL < 500*time.Millisecond {
		return c, fmt.Errorf("--node-ttl %v is too short (minimum 500ms)", c.NodeTTL)
	}
	if c.MaxPresenceChans < 4 || c.MaxPresenceBytes < 1024 {
		return c, fmt.Errorf("--max-presence-channels must be at least 4 and --max-presence-bytes at least 1024")
	}
	if c.MaxPresenceDepth < awareness.MinNesting || c.MaxPresenceDepth > awareness.MaxNesting {
		return c, fmt.Errorf("--max-presence-depth %d is out of range (%d to %d)", c.MaxPresenceDepth, awareness.MinNesting, awareness.MaxNesting)
	}
	if c.MessageRate <= 0 {
		return c, fmt.Errorf("--message-rate must be positive")
	}
	if c.APIRatePerIP <= 0 {
		return c, fmt.Errorf("--api-rate-per-ip must be positive")
	}
	if c.MaxChangeBytes < 1024 {
		return c, fmt.Errorf("--max-change-bytes must be at least 1024")
	}
	if c.APIReadBytes < 1<<30 {
		// A request may take a quarter, and a PATCH of the largest body
		// (1 MiB of JSON) is charged 200 MiB.
		return c, fmt.Errorf("--api-read-bytes must be at least 1 GiB")
	}
	if c.MaxDocumentBytes < c.MaxChangeBytes || c.MaxDocumentChanges < 1 || c.MaxWaitingBytes < c.MaxChangeBytes {
		return c, fmt.Errorf("--max-document-bytes and --max-waiting-bytes must be at least --max-change-bytes, and --max-document-changes at least 1")
	}
	if c.MaxDocumentChanges > math.MaxInt32 {
		return c, fmt.Errorf("--max-document-changes %d is too large (at most %d)", c.MaxDocumentChanges, math.MaxInt32)
	}
	if c.MaxMessageBytes < 1024 {
		return c, fmt.Errorf("--max-message-bytes %d is too small (minimum 1024)", c.MaxMessageBytes)
	}
	if c.SendQueueBytes < 0 {
		return c, fmt.Errorf("--send-queue-bytes must not be negative")
	}
	if c.ReadBudgetBytes != 0 && c.ReadBudgetBytes < 2*c.MaxMessageBytes {
		return c, fmt.Errorf("--read-budget-bytes %d is less than twice --max-message-bytes", c.ReadBudgetBytes)
	}
	if c.MessageReadTimeout < time.Second {
		return c, fmt.Errorf("--message-read-timeout %v is too short (minimum 1s)", c.MessageReadTimeout)
	}
	if c.SyncStateBytes < 64<<10 || c.RedisQueueBytes < 1<<20 {
		return c, fmt.Errorf("--sync-state-bytes must be at least 65536 and --redis-queue-bytes at least 1048576")
	}
	return c, nil
}

// urlList is a flag of URLs: repeated, or comma-separated, or both.
type urlList []string

func (l *urlList) String() string { return strings.Join(*l, ",") }

func (l *urlList) Set(s string) error {
	*l = append(*l, splitList(s)...)
	return nil
}

// days is a duration flag that also takes whole days ("30d").
type days time.Duration

func (d *days) String() string {
	v := time.Duration(*d)
	if v != 0 && v%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(v/(24*time.Hour)), 10) + "d"
	}
	return v.String()
}

func (d *days) Set(s string) error {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		v, err := strconv.ParseUint(n, 10, 32)
		if err != nil || v > 100*365 {
			return fmt.Errorf("%q: whole days, up to 36500d", s)
		}
		*d = days(time.Duration(v) * 24 * time.Hour)
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 {
		return fmt.Errorf("%q: a duration (720h) or days (30d)", s)
	}
	*d = days(v)
	return nil
}
