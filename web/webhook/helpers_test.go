package webhook

import (
	"context"
	"database/sql"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/tandemhq/tandem/internal/testenv"
	"github.com/tandemhq/tandem/web/notify"
)

// clock is a time the test moves by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.UnixMilli(1_700_000_000_000)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Set(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = time.UnixMilli(1_700_000_000_000).Add(d)
}

// captured is a Queue that keeps what is queued once its transaction
// commits; it stands for River where the test is about deciding events.
type captured struct {
	mu   sync.Mutex
	jobs []deliveryArgs
}

func (c *captured) InsertManyTx(_ context.Context, tx *sql.Tx, params []river.InsertManyParams) ([]*rivertype.JobInsertResult, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range params {
		c.jobs = append(c.jobs, p.Args.(deliveryArgs))
	}
	return nil, nil
}

// events returns the events queued, decoded, each once (every endpoint
// gets a delivery of each).
func (c *captured) events(t testing.TB) []Event {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := map[string]bool{}
	var out []Event
	for _, j := range c.jobs {
		if seen[j.ID] {
			continue
		}
		seen[j.ID] = true
		out = append(out, decode(t, j.Body))
	}
	return out
}

func decode(t testing.TB, body string) Event {
	t.Helper()
	var e Event
	var raw struct {
		Type      string          `json:"type"`
		Timestamp time.Time       `json:"timestamp"`
		Data      json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &raw); err != nil {
		t.Fatalf("event body %q: %v", body, err)
	}
	e.Type, e.Timestamp = raw.Type, raw.Timestamp
	var data any
	switch raw.Type {
	case DocumentCreated:
		data = &DocumentCreatedData{}
	case DocumentChanged:
		data = &DocumentChangedData{}
	case PresenceEntered, PresenceLeft:
		data = &PresenceData{}
	case UserStatus:
		data = &UserStatusData{}
	default:
		data = &map[string]any{}
	}
	if err := json.Unmarshal(raw.Data, data); err != nil {
		t.Fatal(err)
	}
	e.Data = data
	return e
}

func ofType(es []Event, typ string) []Event {
	var out []Event
	for _, e := range es {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

// backend is a fresh notification database for one test.
type backend struct {
	name string
	open func(t *testing.T) (open func() *sql.DB, postgres bool)
}

var sqliteBackend = backend{"sqlite", func(t *testing.T) (func() *sql.DB, bool) {
	dir := t.TempDir()
	return func() *sql.DB {
		db, err := notify.OpenSQLite(dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}, false
}}

var postgresBackend = backend{"postgres", func(t *testing.T) (func() *sql.DB, bool) {
	u := testenv.PostgresSchema(t)
	return func() *sql.DB {
		db, err := notify.OpenPostgres(u)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}, true
}}

var backends = []backend{sqliteBackend, postgresBackend}

// newHooks makes Hooks on db that queue into q, with cfg's other fields.
func newHooks(t testing.TB, db *sql.DB, pg bool, q Queue, cfg Config) *Hooks {
	t.Helper()
	if cfg.Endpoints == nil {
		cfg.Endpoints = []string{"http://127.0.0.1:1/hook"}
	}
	cfg.Secret, cfg.DB, cfg.Postgres = testSecret, db, pg
	if cfg.Logger == nil {
		cfg.Logger = testenv.QuietLogger()
	}
	h, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.UseQueue(q)
	return h
}

// node is Hooks delivering through a notification service's River
// client, as cmd/tandem wires them.
type node struct {
	*Hooks
	notes *notify.Service
}

func startNode(t testing.TB, db *sql.DB, pg bool, cfg Config) *node {
	t.Helper()
	if cfg.Secret == "" {
		cfg.Secret = testSecret
	}
	cfg.DB, cfg.Postgres = db, pg
	if cfg.Logger == nil {
		cfg.Logger = testenv.QuietLogger()
	}
	ctx := context.Background()
	h, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	s, err := notify.New(ctx, notify.Config{
		DB: db, Postgres: pg, Window: 50 * time.Millisecond, SweepInterval: 50 * time.Millisecond,
		Jobs: h.Register, Stored: h.NotificationStored, Logger: cfg.Logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	h.UseQueue(s.Queue())
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := h.Close(ctx); err != nil {
			t.Errorf("closing hooks: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("hooks ran: %v", err)
		}
		if err := s.Close(ctx); err != nil {
			t.Errorf("closing notifications: %v", err)
		}
	})
	return &node{h, s}
}
