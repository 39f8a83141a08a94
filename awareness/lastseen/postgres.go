package lastseen

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tandemhq/tandem/awareness"
)

// Postgres keeps last-seen times in the table tandem_last_seen, shared by
// every node of a cluster, over a small pool of its own.
type Postgres struct {
	pool      *pgxpool.Pool
	closeOnce sync.Once
}

var (
	_ awareness.LastSeenStore   = (*Postgres)(nil)
	_ awareness.LastSeenBatcher = (*Postgres)(nil)
)

// The table predates this package (the documents' first migration made
// it); creating it here too makes presence's store stand on its own.
const schema = `CREATE TABLE IF NOT EXISTS tandem_last_seen (
	user_id text PRIMARY KEY,
	seen_at timestamptz NOT NULL
)`

// poolSize bounds the connections: writes come in batches from one
// goroutine, reads one per contact list or REST call.
const poolSize = 4

// OpenPostgres connects and makes the table if it is not there.
func OpenPostgres(ctx context.Context, url string) (*Postgres, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	cfg.MaxConns = poolSize
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	// Nodes starting together create it one at a time (the documents'
	// migrations take the same lock).
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(7354123001)`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, schema)
		return err
	})
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: create tandem_last_seen: %w", err)
	}
	return &Postgres{pool: pool}, nil
}

// SaveLastSeen records when a user was last seen; an older time than the
// stored one is ignored.
func (s *Postgres) SaveLastSeen(ctx context.Context, userID string, at time.Time) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO tandem_last_seen (user_id, seen_at) VALUES ($1, $2)
		ON CONFLICT (user_id) DO UPDATE SET seen_at = GREATEST(tandem_last_seen.seen_at, EXCLUDED.seen_at)`, userID, at)
	return classify(err)
}

// SaveLastSeenBatch stores many users' times in one statement.
func (s *Postgres) SaveLastSeenBatch(ctx context.Context, at map[string]time.Time) error {
	users := make([]string, 0, len(at))
	times := make([]time.Time, 0, len(at))
	for u, t := range at {
		users, times = append(users, u), append(times, t)
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO tandem_last_seen (user_id, seen_at)
		SELECT * FROM unnest($1::text[], $2::timestamptz[])
		ON CONFLICT (user_id) DO UPDATE SET seen_at = GREATEST(tandem_last_seen.seen_at, EXCLUDED.seen_at)`, users, times)
	return classify(err)
}

// classify marks an error of PostgreSQL refusing the data it was given,
// which it will refuse again, as awareness.ErrUnstorable: a data
// exception (class 22: a NUL or an invalid byte sequence in a user id) or
// a limit (class 54: an index row over its size, a user id of kilobytes).
func classify(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (strings.HasPrefix(pe.Code, "22") || strings.HasPrefix(pe.Code, "54")) {
		return fmt.Errorf("%w: %w", awareness.ErrUnstorable, err)
	}
	return err
}

// LastSeen returns when a user was last seen, if ever.
func (s *Postgres) LastSeen(ctx context.Context, userID string) (time.Time, bool, error) {
	var at time.Time
	err := s.pool.QueryRow(ctx, `SELECT seen_at FROM tandem_last_seen WHERE user_id = $1`, userID).Scan(&at)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, false, nil
	}
	return at.UTC(), err == nil, err
}

// Close closes the pool; safe to call twice.
func (s *Postgres) Close() error {
	s.closeOnce.Do(s.pool.Close)
	return nil
}
