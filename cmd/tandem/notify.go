package main

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"github.com/tandemhq/tandem/awareness"
	"github.com/tandemhq/tandem/doc"
	"github.com/tandemhq/tandem/transport/redisbus"
	"github.com/tandemhq/tandem/web/notify"
)

// notifications opens the notification pipeline: in PostgreSQL when the
// node has one, else in an SQLite file beside the embedded document store;
// pushes cross nodes over Redis when the node is in a cluster.
type notifications struct {
	*notify.Service
	db     *sql.DB
	pusher *redisbus.NotifyPusher
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
		n.pusher = redisbus.NewNotifyPusher(rc, log)
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

// Bounds on what mentions may cost: one report (the changes of a burst of
// typing) notifies at most maxMentionedPerReport distinct users, and one
// author causes at most mentionsPerMinute events a minute (a burst of as
// many); past either, mentions are dropped and logged. A 34 KB change
// naming 5,000 ids made 5,000 notifications before.
const (
	maxMentionedPerReport = 50
	mentionsPerMinute     = 120
	maxMentionAuthors     = 10_000 // authors whose budget is remembered
)

// mentionAuthor names the user behind a peer that mentions someone: the
// token's user, or in open mode the user its presence names.
func mentionAuthor(presence func() *awareness.Hub) func(string, doc.Peer) (string, string) {
	return func(documentID string, p doc.Peer) (string, string) {
		if id, ok := p.(awareness.Identified); ok {
			if i := id.Identity(); i.UserID != "" {
				return i.UserID, i.Name
			}
		}
		if h := presence(); h != nil {
			for _, pv := range h.DocumentPresence(documentID) {
				if pv.PeerID == p.ID() {
					name, _ := pv.Name.(string)
					return pv.UserID, name
				}
			}
		}
		return "", ""
	}
}

// mentionSink turns the mentions the document hub reports into events
// posted with post, in one batch per report, each keyed by the report's
// key and its recipient so that a report offered again notifies nobody
// twice. Mentioning yourself notifies nobody. An error leaves the report
// with the hub, which offers it again.
func mentionSink(ctx context.Context, post func(context.Context, []notify.Event) error, log *slog.Logger) func(doc.Mention) error {
	var mu sync.Mutex
	budgets := make(map[string]*rate.Limiter)
	allow := func(actor string, n int) int {
		mu.Lock()
		defer mu.Unlock()
		b := budgets[actor]
		if b == nil {
			if len(budgets) >= maxMentionAuthors {
				clear(budgets)
			}
			b = rate.NewLimiter(rate.Limit(mentionsPerMinute)/60, mentionsPerMinute)
			budgets[actor] = b
		}
		granted := 0
		for granted < n && b.Allow() {
			granted++
		}
		return granted
	}
	return func(m doc.Mention) error {
		actor := m.Actor
		var users []string
		seen := make(map[string]bool, len(m.Users))
		for _, u := range m.Users {
			if u != actor && !seen[u] {
				seen[u] = true
				users = append(users, u)
			}
		}
		if len(users) > maxMentionedPerReport {
			log.Warn("a change mentions too many users: the rest are not notified",
				"document", m.DocumentID, "actor", actor, "mentioned", len(users), "notified", maxMentionedPerReport)
			users = users[:maxMentionedPerReport]
		}
		if granted := allow(actor, len(users)); granted < len(users) {
			log.Warn("an author mentions faster than allowed: the rest are not notified",
				"document", m.DocumentID, "actor", actor, "mentioned", len(users), "notified", granted)
			users = users[:granted]
		}
		if len(users) == 0 {
			return nil
		}
		events := make([]notify.Event, len(users))
		for i, u := range users {
			events[i] = notify.Event{Recipient: u, Kind: notify.KindMention, Document: m.DocumentID, Title: m.Title,
				Actor: actor, ActorName: m.ActorName, Key: m.Key + ":" + u}
		}
		if err := post(ctx, events); err != nil {
			return fmt.Errorf("queue %d mentions in %s: %w", len(events), m.DocumentID, err)
		}
		return nil
	}
}
