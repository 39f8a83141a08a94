// Command tandem runs a Tandem node: an automerge-repo sync server with
// presence, serving its demo page and WebSocket endpoint on one address.
// Alone it keeps documents in an embedded store; with --redis-url and
// --postgres-url it is one node of a cluster.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"github.com/tandemhq/tandem/awareness"
	"github.com/tandemhq/tandem/doc"
	"github.com/tandemhq/tandem/internal/auth"
	"github.com/tandemhq/tandem/transport"
	"github.com/tandemhq/tandem/transport/redisbus"
	"github.com/tandemhq/tandem/web"
)

func main() {
	doc.RunSandboxWorkerIfAsked() // a sandbox worker process ends here
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Getenv, os.Stderr, nil)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tandem:", err)
		os.Exit(1)
	}
}

// shutdownTimeout bounds a graceful stop: closing sockets and flushing
// every document.
const shutdownTimeout = 10 * time.Second

// run serves until ctx ends, then shuts down gracefully. If ready is not
// nil it receives the listening address once the node serves.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer, ready chan<- net.Addr) error {
	cfg, err := parseConfig(args, getenv, stderr)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	if cfg.NodeID == "" {
		cfg.NodeID = defaultNodeID()
	}

	st, err := openStores(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer st.close()
	verifier, err := newVerifier(cfg)
	if err != nil {
		return err
	}
	if verifier == nil {
		log.Warn("AUTH DISABLED: anyone who can reach this server can read and write every document " +
			"and appear as anyone. Fine for local use; set --auth-secret or --auth-public-key otherwise.")
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	// Background parts (presence ticks, the cluster bus) run until
	// stopBackground; the deferred call waits for them, and only then
	// closes the Redis client: the bus says its goodbye to the cluster
	// (the queued leaves, then the node's bye) as it stops. Deferred calls
	// run last first, so this runs after everything registered below: the
	// sockets are closed and the documents flushed by then.
	bgCtx, stopBackground := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	var redisClient *redis.Client
	defer func() {
		stopBackground()
		bg.Wait()
		if redisClient != nil {
			redisClient.Close()
		}
	}()

	var bus *redisbus.Bus
	var checks []web.Check
	if st.ping != nil {
		checks = append(checks, web.Check{Name: "postgres", Ping: st.ping})
	}
	if cfg.RedisURL != "" {
		opts, err := redis.ParseURL(cfg.RedisURL)
		if err != nil {
			return fmt.Errorf("--redis-url: %w", err)
		}
		redisClient = redis.NewClient(opts)
		bus, err = redisbus.New(redisbus.Config{
			Client: redisClient, NodeID: cfg.NodeID, NodeTTL: cfg.NodeTTL, Logger: log, Registerer: reg,
		})
		if err != nil {
			return err
		}
		bus.Start(bgCtx)
		checks = append(checks, web.Check{Name: "redis", Ping: bus.Ping})
		log.Info("cluster: replicating over Redis", "node_id", cfg.NodeID, "node_ttl", cfg.NodeTTL)
	}

	notes, err := openNotifications(ctx, cfg, log, reg, redisClient)
	if err != nil {
		return err
	}
	var presence *awareness.Hub // set below; mentions arrive only once serving
	docCfg := doc.Config{
		Store: st.docs, Logger: log, Registerer: reg,
		UnavailableGrace: cfg.UnavailableGrace,
		SyncWindow:       cfg.SyncWindow,
		Mentions:         mentionSink(bgCtx, notes.PostMany, log),
		MentionAuthor:    mentionAuthor(func() *awareness.Hub { return presence }),
		NodeID:           cfg.NodeID,
		Limits: doc.Limits{
			ChangeOps: cfg.MaxChangeOps, MessageOps: cfg.MaxMessageOps,
			DocumentOps: cfg.MaxDocumentOps, ChangeBytes: cfg.MaxChangeBytes,
		},
	}
	if cfg.SandboxWorkers > 0 {
		sandbox, err := doc.NewSandbox(doc.SandboxConfig{
			Command: doc.SandboxCommand, Workers: cfg.SandboxWorkers, Logger: log, Registerer: reg,
		})
		if err != nil {
			return err
		}
		defer sandbox.Close()
		docCfg.Sandbox = sandbox
	}
	presenceCfg := awareness.Config{
		Tick:       cfg.PresenceTick,
		TTL:        cfg.PingInterval * 7 / 2, // three missed pings, as the socket's read deadline
		AwayAfter:  cfg.AwayAfter,
		MaxNesting: cfg.MaxPresenceDepth,

		MaxChannels:   cfg.MaxPresenceChans,
		MaxStateBytes: cfg.MaxPresenceBytes,
		LastSeen:      st.lastSeen,
		Logger:        log,
		Registerer:    reg,
	}
	transportCfg := transport.Config{
		PeerID:          "tandem-" + cfg.NodeID,
		StorageID:       st.storageID,
		Logger:          log,
		Registerer:      reg,
		MaxMessageBytes: cfg.MaxMessageBytes,
		PingInterval:    cfg.PingInterval,
		Auth:            verifier,
		AllowedOrigins:  splitList(cfg.AllowedOrigins),
		AllowedHosts:    splitList(cfg.AllowedHosts),

		MaxDocumentsPerConn: cfg.MaxDocsPerConn,
		MaxPeersPerDocument: cfg.MaxPeersPerDoc,
		MaxConnsPerIP:       cfg.MaxConnsPerIP,
		MaxEphemeralBytes:   cfg.MaxEphemeralBytes,
		MessageRate:         cfg.MessageRate,
		MessageBurst:        cfg.MessageBurst,
	}
	if bus != nil {
		// Three rosters missed in a row: the peer is gone.
		presenceCfg.RemoteTTL = 3 * bus.RosterInterval()
		docCfg.Cluster = bus
		docCfg.Finder = bus
		docCfg.NodeAlive = bus.NodeAlive
		presenceCfg.Replicator = bus
		presenceCfg.Directory = bus
		transportCfg.Bus = bus
		transportCfg.Claims = bus
	}
	hub, err := doc.NewHub(docCfg)
	if err != nil {
		return err
	}
	presence = awareness.New(presenceCfg)
	bg.Add(1)
	go func() { defer bg.Done(); presence.Run(bgCtx) }()
	err = notes.start(bgCtx, func(f func()) {
		bg.Add(1)
		go func() { defer bg.Done(); f() }()
	})
	if err != nil {
		notes.close(context.Background())
		return err
	}
	// Stopped after the hub has flushed (deferred calls run last first):
	// running jobs finish, queued ones wait for the next start.
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		if err := notes.close(cctx); err != nil {
			log.Warn("stopping notifications", "err", err)
		}
	}()
	if bus != nil {
		bg.Add(1)
		go func() { defer bg.Done(); bus.Run(bgCtx, hub, presence) }()
	}

	transportCfg.Documents, transportCfg.Presence = hub, presence
	ws, err := transport.NewServer(transportCfg)
	if err != nil {
		return err
	}
	// Requests derive from serveCtx, cancelled when shutdown begins, so
	// that long-lived streams (presence watch) end instead of holding it up.
	serveCtx, endRequests := context.WithCancel(context.Background())
	defer endRequests()
	srv := &http.Server{
		Handler: web.NewRouter(web.Config{
			WebSocket: ws, Presence: presence, Notifications: notes, Auth: verifier, Gatherer: reg, Logger: log, Ready: checks,
			// Streams from one address are bounded as its sockets are: one
			// flag to raise behind a proxy, which is every client's address.
			Streams: web.StreamLimits{PerIP: cfg.MaxConnsPerIP},
		}),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       cfg.HTTPIdleTimeout,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return serveCtx },
	}
	if cfg.DebugAddr != "" {
		stopDebug, err := serveDebug(cfg.DebugAddr, log)
		if err != nil {
			return err
		}
		defer stopDebug()
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	log.Info("tandem serving", "addr", ln.Addr().String(), "node_id", cfg.NodeID, "storage_id", st.storageID)
	if ready != nil {
		ready <- ln.Addr()
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

	select {
	case err := <-serveErr:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down")
	endRequests()
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	err = errors.Join(
		srv.Shutdown(sctx),
		ws.Shutdown(sctx), // peers leave: goodbye in their names
		hub.Close(sctx),   // flushes every document
	)
	if err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("stopped cleanly")
	return nil
}

// newVerifier builds the token verifier; nil means the node runs open.
func newVerifier(cfg config) (*auth.Verifier, error) {
	ac := auth.Config{Secret: []byte(cfg.AuthSecret), Audience: cfg.AuthAudience, Issuer: cfg.AuthIssuer, AllowNoExpiry: cfg.AuthAllowNoExp}
	if cfg.AuthPublicKey != "" {
		key, err := auth.LoadPublicKey(cfg.AuthPublicKey)
		if err != nil {
			return nil, fmt.Errorf("--auth-public-key: %w", err)
		}
		ac.PublicKey = key
	}
	if len(ac.Secret) == 0 && ac.PublicKey == nil {
		return nil, nil
	}
	return auth.NewVerifier(ac)
}

func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

// defaultNodeID is the host name plus a random suffix, so that two nodes
// on one host (or a restarted node) never share an id.
func defaultNodeID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "node"
	}
	var b [3]byte
	rand.Read(b[:])
	return host + "-" + hex.EncodeToString(b[:])
}
