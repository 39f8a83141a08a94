package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/tandemhq/tandem/awareness"
	"github.com/tandemhq/tandem/doc"
	"github.com/tandemhq/tandem/doc/amdoc"
	"github.com/tandemhq/tandem/doc/guard"
	"github.com/tandemhq/tandem/doc/mention"
	"github.com/tandemhq/tandem/internal/auth"
	"github.com/tandemhq/tandem/internal/cmalloc"
	"github.com/tandemhq/tandem/internal/gctune"
	"github.com/tandemhq/tandem/internal/lifecycle"
	"github.com/tandemhq/tandem/transport"
	"github.com/tandemhq/tandem/transport/redisbus"
	"github.com/tandemhq/tandem/web"
)

// shutdownTimeout bounds a graceful stop: closing sockets and flushing
// every document.
const shutdownTimeout = 10 * time.Second

// tandemNode is one node's components, built in dependency order: the
// stores, then Redis and the bus, the notifications, the document hub, the
// mentions in its documents and presence, the WebSocket server, the HTTP
// server. Each runs under one errgroup (serve) and stops in the reverse
// order (stop), so that what a component still has to say reaches the one
// after it: the sockets' goodbyes reach presence and the bus, the last
// mentions reach the notification queue (and what is left of them the
// hub's last flush), the bus's bye goes out before Redis closes.
type tandemNode struct {
	log *slog.Logger

	stores   *stores
	redis    redis.UniversalClient // nil alone
	bus      *redisbus.Bus         // nil alone
	notes    *notifications
	docs     *doc.Hub
	mentions *mention.Tracker
	presence *awareness.Hub
	ws       *transport.Server
	gcTune   *gctune.Config // nil: the collector is left alone
	http     *http.Server
	// endRequests cancels every HTTP request's context: long-lived
	// streams (presence watch, notifications) end instead of holding up
	// the shutdown.
	endRequests context.CancelFunc
	// endMentions ends the context mention reports are posted in: at the
	// stop's deadline, so that a stuck notification database cannot hold
	// the stop (what is not posted stays in the mention journal, written
	// by the hub's last flush, for the next start).
	endMentions context.CancelFunc
}

// assemble builds a node. On an error it dismantles what it built.
func assemble(ctx context.Context, cfg config, log *slog.Logger, verifier *auth.Verifier) (n *tandemNode, err error) {
	built := &tandemNode{log: log}
	n = built
	defer func() {
		if err != nil {
			built.dismantle() // n is nil here: "return nil, err" set it
			n = nil
		}
	}()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if cfg.GCTune && cfg.GCMax > 0 {
		var percent atomic.Int64
		percent.Store(int64(cfg.GCMax))
		n.gcTune = &gctune.Config{
			Max: cfg.GCMax, Logger: log,
			OnChange: func(p int) { percent.Store(int64(p)) },
			// The C heap (automerge, reading a document stored in an
			// earlier version's format) keeps the pages it freed
			// until trimmed.
			Release: func() { cmalloc.Trim() },
		}
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tandem_gc_percent",
			Help: "The garbage collector's percent (GOGC) the tuner set: from GOGC on a busy node down to 10 on a quiet one (--gc-tune).",
		}, func() float64 { return float64(percent.Load()) }))
	}
	if _, _, ok := cmalloc.Stats(); ok {
		registerCHeap(reg)
	}

	if n.stores, err = openStores(ctx, cfg, log); err != nil {
		return nil, err
	}
	var checks []web.Check
	if n.stores.ping != nil {
		checks = append(checks, web.Check{Name: "postgres", Ping: n.stores.ping})
	}
	if cfg.RedisURL != "" {
		redisbus.LogTo(log)
		if n.redis, err = redisClient(cfg); err != nil {
			return nil, err
		}
		n.bus, err = redisbus.New(redisbus.Config{
			Client: n.redis, NodeID: cfg.NodeID, NodeTTL: cfg.NodeTTL, Logger: log, Registerer: reg,
			QueueBytes: cfg.RedisQueueBytes,
		})
		if err != nil {
			return nil, err
		}
		checks = append(checks, web.Check{Name: "redis", Ping: n.bus.Ping})
		log.Info("cluster: replicating over Redis", "node_id", cfg.NodeID, "node_ttl", cfg.NodeTTL, "redis_cluster", cfg.RedisCluster)
	}
	// Presence is made below, before the node serves, so before any change.
	author := func(documentID string, p interface{ ID() string }) (string, string) {
		return n.presence.UserOf(documentID, p)
	}
	if n.notes, err = openNotifications(ctx, cfg, log, reg, n.redis, author); err != nil {
		return nil, err
	}

	mentionsCtx, endMentions := context.WithCancel(context.Background())
	n.endMentions = endMentions
	mentionCfg := mention.Config{
		// Reports are offered until the tracker closes, and posting them
		// needs no running worker: only the stop's deadline ends them.
		Report: mentionSink(mentionsCtx, n.notes.mentions),
		// Set before the node serves, so before any mention.
		Author:   func(documentID string, p doc.Peer) (string, string) { return n.presence.UserOf(documentID, p) },
		Fields:   mention.Fields{Text: cfg.MentionTextField, Title: cfg.MentionTitleField},
		NodeID:   cfg.NodeID,
		Journals: n.stores.docs,
		Logger:   log, Registerer: reg,
	}
	docCfg := doc.Config{
		Store: n.stores.docs, Logger: log, Registerer: reg,
		UnavailableGrace: cfg.UnavailableGrace,
		SyncSpacing:      cfg.SyncSpacing,
		SyncGather:       cfg.SyncGather,
		// The hub makes no room before the node serves, so after the
		// tracker is made, below.
		Observe: func(r doc.Room) doc.Observer {
			if n.notes.hooks != nil {
				return observers{n.mentions.Observe(r), n.notes.hooks.Observe(r)}
			}
			return n.mentions.Observe(r)
		},
		Limits: guard.Limits{
			ChangeBytes:   cfg.MaxChangeBytes,
			DocumentBytes: cfg.MaxDocumentBytes, DocumentChanges: cfg.MaxDocumentChanges,
			WaitingBytes: cfg.MaxWaitingBytes,
		},
		RefusedChanges: cfg.MaxRefusedChanges, RefusedChangeBytes: cfg.MaxRefusedChangeBytes,
		SyncStateBytes: cfg.SyncStateBytes,
	}
	if cfg.SaveDocs {
		// Saves take at most half of one core over time: a document
		// written fast is saved again as it grows, paced by that.
		docCfg.SaveDocument = amdoc.NewSaver(0.5).Save
	}
	presenceCfg := awareness.Config{
		Tick:       cfg.PresenceTick,
		TTL:        cfg.PingInterval * 7 / 2, // three missed pings, as the socket's read deadline
		AwayAfter:  cfg.AwayAfter,
		MaxNesting: cfg.MaxPresenceDepth,

		MaxChannels:   cfg.MaxPresenceChans,
		MaxStateBytes: cfg.MaxPresenceBytes,
		LastSeen:      n.stores.lastSeen,
		Logger:        log,
		Registerer:    reg,
	}
	var hist web.History
	if n.stores.history != nil {
		presenceCfg.History, presenceCfg.HistoryNode, presenceCfg.HistoryRetention = n.stores.history, cfg.NodeID, cfg.PresenceHistory
		hist = n.stores.history
		if h := n.notes.hooks; h != nil {
			// The webhooks' presence events are made of what the history
			// recorder writes.
			presenceCfg.History = h.Tee(n.stores.history)
		}
	} else if n.notes.hooks != nil {
		log.Warn("webhooks: --presence-history 0 records no presence: no presence.entered, presence.left or user.status is sent")
	}
	transportCfg := transport.Config{
		PeerID:             "tandem-" + cfg.NodeID,
		StorageID:          n.stores.storageID,
		Logger:             log,
		Registerer:         reg,
		MaxMessageBytes:    cfg.MaxMessageBytes,
		SendQueueBytes:     cfg.SendQueueBytes,
		ReadBudgetBytes:    cfg.ReadBudgetBytes,
		MessageReadTimeout: cfg.MessageReadTimeout,
		PingInterval:       cfg.PingInterval,
		Auth:               verifier,
		AllowedOrigins:     splitList(cfg.AllowedOrigins),
		AllowedHosts:       splitList(cfg.AllowedHosts),

		MaxDocumentsPerConn: cfg.MaxDocsPerConn,
		MaxPeersPerDocument: cfg.MaxPeersPerDoc,
		MaxConnsPerIP:       cfg.MaxConnsPerIP,
		KeepReaders:         !cfg.ParkIdle,
		MaxEphemeralBytes:   cfg.MaxEphemeralBytes,
		MessageRate:         cfg.MessageRate,
		MessageBurst:        cfg.MessageBurst,
	}
	if n.bus != nil {
		// Three rosters missed in a row: the peer is gone.
		presenceCfg.RemoteTTL = 3 * n.bus.RosterInterval()
		docCfg.Cluster = n.bus
		docCfg.Finder = n.bus
		mentionCfg.NodeAlive = n.bus.NodeAlive
		presenceCfg.Replicator = n.bus
		presenceCfg.Directory = n.bus
		transportCfg.Bus = n.bus
		transportCfg.Claims = n.bus
	}
	if n.docs, err = doc.NewHub(docCfg); err != nil {
		return nil, err
	}
	mentionCfg.Documents = n.docs
	if n.mentions, err = mention.New(mentionCfg); err != nil {
		return nil, err
	}
	if n.presence, err = awareness.New(presenceCfg); err != nil {
		return nil, err
	}
	if n.bus != nil {
		n.bus.Attach(docReplica{n.docs, n.mentions}, n.presence)
	}
	transportCfg.Documents, transportCfg.Presence = n.docs, n.presence
	if n.ws, err = transport.NewServer(transportCfg); err != nil {
		return nil, err
	}
	requests, endRequests := context.WithCancel(context.Background())
	n.endRequests = endRequests
	n.http = &http.Server{
		Handler: web.NewRouter(web.Config{
			WebSocket: n.ws, Presence: n.presence, History: hist, Notifications: n.notes, Documents: n.docs, Auth: verifier,
			Gatherer: reg, Registerer: reg, Logger: log, Ready: checks,
			// Streams from one address are bounded as its sockets are (the
			// flags to raise behind a proxy, which is every client's
			// address), and so are the users its watches follow.
			Streams: web.StreamLimits{PerIP: cfg.MaxConnsPerIP, WatchedPerIP: cfg.MaxWatchedPerIP},
			// Bodies get a read deadline from the API's routes that read
			// them (web.RequestLimits.BodyTimeout): a ReadTimeout here
			// would end the streams and WebSockets too.
			Requests:       web.RequestLimits{PerIP: cfg.APIRatePerIP},
			DocumentLimits: web.DocumentLimits{ReadBytes: cfg.APIReadBytes},
			AllowsBrowser:  transportCfg.AllowsBrowser,
		}),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       cfg.HTTPIdleTimeout,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return requests },
	}
	return n, nil
}

// serve runs every component and the HTTP server on ln until ctx ends or
// one of them fails, then stops them all in order. It returns the first
// failure, or what the stop met.
func (n *tandemNode) serve(ctx context.Context, ln net.Listener) error {
	g, gctx := errgroup.WithContext(ctx)
	// Components stop by Close, in order (stop), not all at once with
	// gctx: their contexts end only with the node.
	bg := context.WithoutCancel(gctx)
	if n.gcTune != nil {
		g.Go(func() error { gctune.Run(gctx, *n.gcTune); return nil })
	}
	runs := []func(context.Context) error{n.docs.Run, n.mentions.Run, n.presence.Run, n.notes.Run, n.notes.runHooks}
	if n.bus != nil {
		runs = append(runs, n.bus.Run)
	}
	for _, run := range runs {
		g.Go(func() error {
			if err := run(bg); !errors.Is(err, lifecycle.ErrClosed) {
				return err
			}
			return nil // stopped before it began: a stop, not a failure
		})
	}
	g.Go(func() error {
		if err := n.http.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done() // the node stops, or a component failed
		if ctx.Err() == nil {
			n.log.Error("a component failed: stopping the node")
		}
		n.log.Info("shutting down")
		sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		if err := n.stop(sctx); err != nil {
			return fmt.Errorf("shutdown: %w", err)
		}
		return nil
	})
	return g.Wait()
}

// stop closes the components, each after those that talk to it.
func (n *tandemNode) stop(ctx context.Context) error {
	n.endRequests()
	defer context.AfterFunc(ctx, n.endMentions)()
	errs := []error{
		n.http.Shutdown(ctx),
		n.ws.Close(ctx),         // peers leave: goodbyes in their names, to presence and the bus
		n.mentions.Close(ctx),   // hands the last mentions over
		n.docs.Close(ctx),       // flushes every document, and what is left of the mentions
		n.presence.Close(ctx),   // writes the queued last-seen times and ends history's intervals
		n.notes.closeHooks(ctx), // what the two above handed the webhooks, written and queued
	}
	if n.bus != nil {
		errs = append(errs, n.bus.Close(ctx)) // what is queued, then the node's bye
	}
	errs = append(errs, n.notes.Close(ctx)) // running jobs finish; queued ones wait for the next start
	return errors.Join(errs...)
}

// dismantle undoes assemble: it frees what the node holds once its
// components have stopped (or were never started): worker processes, the
// Redis client, the stores.
func (n *tandemNode) dismantle() {
	// Each Close is a no-op after stop; here they stop what assemble
	// built before it failed.
	ctx := context.Background()
	if n.endMentions != nil {
		n.endMentions() // nothing more is posted: Close reports to the journal
	}
	if n.mentions != nil {
		n.mentions.Close(ctx)
	}
	if n.docs != nil {
		n.docs.Close(ctx)
	}
	if n.bus != nil {
		n.bus.Close(ctx)
	}
	if n.notes != nil {
		n.notes.Close(ctx)
	}
	if n.redis != nil {
		n.redis.Close()
	}
	if n.stores != nil {
		n.stores.close()
	}
}

// registerCHeap exports what the C heap holds (automerge, while it reads
// a document stored in an earlier version's format), and the free space
// malloc keeps.
func registerCHeap(reg prometheus.Registerer) {
	for _, state := range []string{"in_use", "free"} {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "tandem_c_heap_bytes",
			Help:        "Bytes of the C heap (automerge, while it reads a document stored in an earlier version's format): in use, or free within malloc's arenas (trimmed or not).",
			ConstLabels: prometheus.Labels{"state": state},
		}, func() float64 {
			inUse, free, _ := cmalloc.Stats()
			if state == "free" {
				return float64(free)
			}
			return float64(inUse)
		}))
	}
}

// redisClient is the client of --redis-url: one Redis, or with
// --redis-cluster a Redis Cluster.
func redisClient(cfg config) (redis.UniversalClient, error) {
	if cfg.RedisCluster {
		opts, err := redis.ParseClusterURL(cfg.RedisURL)
		if err != nil {
			return nil, fmt.Errorf("--redis-url (a Redis Cluster's): %w", err)
		}
		return redis.NewClusterClient(opts), nil
	}
	opts, err := redis.ParseURL(cfg.RedisURL)
	if err != nil {
		return nil, fmt.Errorf("--redis-url: %w", err)
	}
	return redis.NewClient(opts), nil
}

// docReplica is the document layer the bus replicates: the hub, and the
// mention tracker, which takes over what a gone node owed.
type docReplica struct {
	*doc.Hub
	mentions *mention.Tracker
}

var _ redisbus.NodeWatcher = docReplica{}

// NodeGone sweeps the gone node's mention journals now.
func (d docReplica) NodeGone(node string) { d.mentions.NodeGone(node) }
