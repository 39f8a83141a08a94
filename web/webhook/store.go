package webhook

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/tandemhq/tandem/internal/sqlargs"
)

// store is the webhook tables in the notification pipeline's database.
// Every method that decides events takes the transaction that queues them.
type store struct {
	db       *sql.DB
	postgres bool
}

// q writes query for the store's database (sqlargs).
func (s *store) q(query string) string {
	if !s.postgres {
		return query
	}
	return sqlargs.Numbered(query)
}

// Schema (times are Unix ms):
//
//	tandem_webhook_windows   one open debounce window per document
//	tandem_webhook_documents the documents document.created was sent for
//	tandem_webhook_present   the open presence intervals of every recorder
//	                         run (awareness's history), mirrored: a user is
//	                         in a document, or has a status, while a row says so
//	tandem_webhook_runs      each recorder run's last beat, to end a dead
//	                         run's rows as presence history does
func (s *store) migrate(ctx context.Context) error {
	big := "INTEGER"
	if s.postgres {
		big = "BIGINT"
	}
	stmts := []string{
		`CREATE TABLE IF NOT EXISTS tandem_webhook_windows (
			document TEXT PRIMARY KEY,
			opened_at ` + big + ` NOT NULL,
			last_at ` + big + ` NOT NULL,
			due_at ` + big + ` NOT NULL,
			state TEXT NOT NULL
		)`,
		`CREATE INDEX IF NOT EXISTS tandem_webhook_windows_due ON tandem_webhook_windows (due_at)`,
		`CREATE TABLE IF NOT EXISTS tandem_webhook_documents (
			document TEXT PRIMARY KEY,
			at ` + big + ` NOT NULL
		)`,
		`CREATE TABLE IF NOT EXISTS tandem_webhook_present (
			run ` + big + ` NOT NULL,
			seq ` + big + ` NOT NULL,
			doc TEXT NOT NULL,
			user_id TEXT NOT NULL,
			name TEXT NOT NULL,
			status TEXT NOT NULL,
			PRIMARY KEY (run, seq)
		)`,
		`CREATE INDEX IF NOT EXISTS tandem_webhook_present_user ON tandem_webhook_present (user_id, doc)`,
		`CREATE TABLE IF NOT EXISTS tandem_webhook_runs (
			run ` + big + ` PRIMARY KEY,
			node TEXT NOT NULL,
			beat_ms ` + big + ` NOT NULL
		)`,
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("webhook: migrate: %w", err)
	}
	defer tx.Rollback()
	if s.postgres {
		// Nodes starting together on a fresh database would race to
		// make the same tables, and all but one fail: the schema changes
		// one node at a time, under the lock every store's migration
		// takes (doc/store/postgres.go).
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(7354123001)`); err != nil {
			return fmt.Errorf("webhook: migrate: lock: %w", err)
		}
	}
	for _, st := range stmts {
		if _, err := tx.ExecContext(ctx, st); err != nil {
			return fmt.Errorf("webhook: migrate: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("webhook: migrate: %w", err)
	}
	return nil
}

// txStmts prepares each query a transaction runs once, the first time it
// is run: a loop over a batch of documents then runs prepared statements.
// SQLite would otherwise parse and plan every statement at every call,
// which cost more than the statements' own work (a flush of 1,000
// documents' windows: a statement or three each).
type txStmts struct {
	ctx context.Context
	tx  *sql.Tx
	s   *store
	byQ map[string]*sql.Stmt
}

// stmts returns the prepared statements of tx; close them before tx ends.
func (s *store) stmts(ctx context.Context, tx *sql.Tx) *txStmts {
	return &txStmts{ctx: ctx, tx: tx, s: s, byQ: map[string]*sql.Stmt{}}
}

func (p *txStmts) get(query string) (*sql.Stmt, error) {
	if st := p.byQ[query]; st != nil {
		return st, nil
	}
	st, err := p.tx.PrepareContext(p.ctx, p.s.q(query))
	if err != nil {
		return nil, err
	}
	p.byQ[query] = st
	return st, nil
}

// exec runs query, written with ? placeholders, with args.
func (p *txStmts) exec(query string, args ...any) (sql.Result, error) {
	st, err := p.get(query)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(p.ctx, args...)
}

// queryRow runs query, written with ? placeholders, for one row; its
// error comes from Scan.
func (p *txStmts) queryRow(query string, args ...any) interface{ Scan(...any) error } {
	st, err := p.get(query)
	if err != nil {
		return errRow{err}
	}
	return st.QueryRowContext(p.ctx, args...)
}

// errRow is a row whose query could not be prepared.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// close closes the statements.
func (p *txStmts) close() {
	for _, st := range p.byQ {
		st.Close()
	}
}

// lockPresence serialises the presence decisions of every node: counting
// a user's rows before and after a batch must see no other node's batch
// half done. A batch a node makes every half second is short, so one lock
// costs less than a lock per key, and cannot deadlock.
func (s *store) lockPresence(ctx context.Context, tx *sql.Tx) error {
	if !s.postgres {
		return nil // SQLite: the write transaction holds the database
	}
	_, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(7354123101)`)
	return err
}

// durable makes a transaction that queues events wait for the disk on
// PostgreSQL, whose pool (notify.OpenPostgres) commits without.
func (s *store) durable(ctx context.Context, tx *sql.Tx) error {
	if !s.postgres {
		return nil
	}
	_, err := tx.ExecContext(ctx, "SET LOCAL synchronous_commit = on")
	return err
}

// backlog counts the deliveries waiting in each endpoint's queue.
func (s *store) backlog(ctx context.Context) (map[string]int, error) {
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT queue, COUNT(*) FROM river_job
		WHERE kind = ? AND state IN ('available', 'pending', 'retryable', 'running', 'scheduled') GROUP BY queue`), deliveryKind)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var q string
		var n int
		if err := rows.Scan(&q, &n); err != nil {
			return nil, err
		}
		out[q] = n
	}
	return out, rows.Err()
}
