package main

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/tandemhq/tandem/awareness"
	"github.com/tandemhq/tandem/doc"
	"github.com/tandemhq/tandem/doc/notify"
	"github.com/tandemhq/tandem/transport"
)

// notifications opens the notification pipeline: in PostgreSQL when the
// node has one, else in an SQLite file beside the embedded document store;
// pushes cross nodes over Redis when the node is in a cluster.
type notifications struct {
	*notify.Service
	db     *sql.DB
	pusher *transport.NotifyPusher
}

func openNotifications(ctx context.Context, cfg config, log *slog.Logger, reg prometheus.Registerer, rc *redis.Client) (*notifications, error) {
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
	if rc != nil {
		n.pusher = transport.NewNotifyPusher(rc, log)
		nc.Pusher = n.pusher
	}
	if n.Service, err = notify.New(ctx, nc); err != nil {
		db.Close()
		return nil, fmt.Errorf("notifications: %w", err)
	}
	return n, nil
}

// start runs the workers and, in a cluster, the push receiver, until bgCtx ends.
func (n *notifications) start(bgCtx context.Context, run func(func())) error {
	if n.pusher != nil {
		run(func() { n.pusher.Run(bgCtx, n.Deliver, n.Resync) })
	}
	return n.Start(bgCtx)
}

// close stops the workers (letting running jobs finish) and the database.
func (n *notifications) close(ctx context.Context) error {
	err := n.Close(ctx)
	n.db.Close()
	return err
}

// mentionSink turns the mentions the document hub reports into events:
// the actor is the token's user, or in open mode the user the peer's
// presence names. Mentioning yourself notifies nobody.
func mentionSink(ctx context.Context, n *notify.Service, presence func() *awareness.Hub, log *slog.Logger) func(doc.Mention) {
	return func(m doc.Mention) {
		var actor, name string
		if id, ok := m.Peer.(awareness.Identified); ok {
			i := id.Identity()
			actor, name = i.UserID, i.Name
		}
		if actor == "" {
			if p := presence(); p != nil {
				for _, pv := range p.DocumentPresence(m.DocumentID) {
					if pv.PeerID == m.Peer.ID() {
						actor = pv.UserID
						name, _ = pv.Name.(string)
					}
				}
			}
		}
		if actor == "" {
			actor = m.Peer.ID()
		}
		for _, u := range m.Users {
			if u == actor {
				continue
			}
			e := notify.Event{Recipient: u, Kind: notify.KindMention, Document: m.DocumentID, Title: m.Title, Actor: actor, ActorName: name}
			if err := n.Post(ctx, e); err != nil {
				log.Warn("queueing a mention", "document", m.DocumentID, "recipient", u, "err", err)
			}
		}
	}
}
