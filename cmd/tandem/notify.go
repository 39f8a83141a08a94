package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/tandemhq/tandem/doc/mention"
	"github.com/tandemhq/tandem/transport/redisbus"
	"github.com/tandemhq/tandem/web/notify"
	"github.com/tandemhq/tandem/web/webhook"
)

// notifications opens the notification pipeline: in PostgreSQL when the
// node has one, else in an SQLite file beside the embedded document store;
// pushes cross nodes over Redis when the node is in a cluster.
type notifications struct {
	*notify.Service
	db       *sql.DB
	pusher   *redisbus.NotifyPusher
	mentions *notify.Mentions // the bounds on mentions, posting to the service
	// hooks sends webhooks, its deliveries on the service's River queue;
	// nil without --webhook-url.
	hooks *webhook.Hooks
}

// author names the user behind a peer without a token, for the webhooks'
// document.changed.
func openNotifications(ctx context.Context, cfg config, log *slog.Logger, reg prometheus.Registerer, rc redis.UniversalClient,
	author func(documentID string, p interface{ ID() string }) (string, string)) (*notifications, error) {
	var db *sql.DB
	var err error
	if cfg.PostgresURL != "" {
		db, err = notify.OpenPostgres(cfg.PostgresURL)
	} else {
		if err = os.MkdirAll(cfg.DataDir, 0o750); err == nil {
			db, err = notify.OpenSQLite(cfg.DataDir)
		}
	}
	if err != nil {
		return nil, err
	}
	n := &notifications{db: db}
	nc := notify.Config{
		DB: db, Postgres: cfg.PostgresURL != "", Window: cfg.NotifyWindow, Logger: log, Metrics: notify.NewMetrics(reg),
	}
	if len(cfg.WebhookURLs) > 0 {
		n.hooks, err = webhook.New(ctx, webhook.Config{
			Endpoints: cfg.WebhookURLs, Secret: cfg.WebhookSecret, Events: splitList(cfg.WebhookEvents),
			Debounce: cfg.WebhookDebounce, MaxWait: cfg.WebhookMaxWait,
			DB: db, Postgres: cfg.PostgresURL != "", Author: author, Logger: log, Registerer: reg,
		})
		if err != nil {
			db.Close()
			return nil, fmt.Errorf("webhooks: %w", err)
		}
		nc.Jobs, nc.Stored = n.hooks.Register, n.hooks.NotificationStored
	}
	if rc != nil {
		if n.pusher, err = redisbus.NewNotifyPusher(rc, log); err != nil {
			db.Close()
			return nil, err
		}
		nc.Pusher = n.pusher
	}
	if n.Service, err = notify.New(ctx, nc); err != nil {
		db.Close()
		return nil, fmt.Errorf("notifications: %w", err)
	}
	if n.pusher != nil {
		n.pusher.Attach(n.Deliver, n.Resync)
	}
	if n.hooks != nil {
		n.hooks.UseQueue(n.Queue())
	}
	n.mentions = notify.NewMentions(n.PostMany, log)
	return n, nil
}

// Run runs the workers and, in a cluster, the push receiver, until ctx
// ends or Close. The webhooks run apart (runHooks): they stop earlier.
func (n *notifications) Run(ctx context.Context) error {
	if n.pusher == nil {
		return n.Service.Run(ctx)
	}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return n.pusher.Run(ctx) })
	g.Go(func() error { return n.Service.Run(ctx) })
	return g.Wait()
}

// runHooks runs the webhooks, if the node sends any, until ctx ends or
// closeHooks.
func (n *notifications) runHooks(ctx context.Context) error {
	if n.hooks == nil {
		return nil
	}
	return n.hooks.Run(ctx)
}

// closeHooks stops the webhooks after they wrote what the observers and
// the presence recorder handed them: after the document hub and presence
// close, before the queue does.
func (n *notifications) closeHooks(ctx context.Context) error {
	if n.hooks == nil {
		return nil
	}
	return n.hooks.Close(ctx)
}

// Close stops the webhooks, the push receiver and the workers (letting
// running jobs finish), then closes the database. Safe to call twice.
func (n *notifications) Close(ctx context.Context) error {
	err := n.closeHooks(ctx)
	if n.pusher != nil {
		err = errors.Join(err, n.pusher.Close(ctx))
	}
	err = errors.Join(err, n.Service.Close(ctx))
	n.db.Close() // a second Close of a *sql.DB is harmless
	return err
}

// mentionSink hands the mention tracker's reports to the notifications'
// policy (notify.Mentions), which posts them.
func mentionSink(ctx context.Context, p *notify.Mentions) func(mention.Report) error {
	return func(m mention.Report) error {
		return p.Report(ctx, notify.Mention{
			DocumentID: m.DocumentID, Key: m.Key, Actor: m.Actor, ActorName: m.ActorName, Title: m.Title, Users: m.Users,
		})
	}
}
