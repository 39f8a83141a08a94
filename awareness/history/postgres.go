package history

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

// Postgres keeps presence history in PostgreSQL, shared by every node of
// a cluster, over a small pool of its own.
type Postgres struct {
	pool *pgxpool.Pool
	// reads holds a token per read: they take at most all but one of
	// the pool's connections, so reads never keep the recorder's writes
	// and beats waiting.
	reads     chan struct{}
	closeOnce sync.Once
}

var _ awareness.HistoryStore = (*Postgres)(nil)

var pgQueries = newQueries(postgresDialect)

// poolSize bounds the connections: writes come in batches from one
// recorder, beats and pruning from a timer, reads one per REST call.
const poolSize = 4

// schemaLock is the advisory lock nodes starting together take to create
// the tables one at a time (lastseen's is 7354123001).
const schemaLock = 7354123002

// A batch's rows go in as arrays, one statement per table whatever its
// size.
var (
	pgInsertDocs = `INSERT INTO ` + docsTable + ` (run, seq, doc_id, user_id, name, status, from_ms, to_ms)
		SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::bigint[], $8::bigint[])
		ON CONFLICT (run, seq) WHERE to_ms IS NULL DO NOTHING`
	pgInsertUsers = `INSERT INTO ` + usersTable + ` (run, seq, user_id, name, status, from_ms, to_ms)
		SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::bigint[])
		ON CONFLICT (run, seq) WHERE to_ms IS NULL DO NOTHING`
	pgCloseDocs  = pgClose(docsTable)
	pgCloseUsers = pgClose(usersTable)
)

func pgClose(table string) string {
	return `UPDATE ` + table + ` t SET to_ms = GREATEST(c.to_ms, t.from_ms)
		FROM unnest($1::bigint[], $2::bigint[], $3::bigint[]) AS c(run, seq, to_ms)
		WHERE t.run = c.run AND t.seq = c.seq AND t.to_ms IS NULL`
}

// OpenPostgres connects and makes the tables if they are not there.
func OpenPostgres(ctx context.Context, url string) (*Postgres, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("history: postgres: %w", err)
	}
	cfg.MaxConns = poolSize
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("history: postgres: %w", err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(schemaLock)); err != nil {
			return err
		}
		for _, stmt := range pgQueries.schema {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return err
			}
		}
		var named int
		if err := tx.QueryRow(ctx, pgQueries.usersNamed).Scan(&named); err != nil || named > 0 {
			return err
		}
		_, err := tx.Exec(ctx, pgQueries.usersName)
		return err
	})
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("history: postgres: create tables: %w", err)
	}
	return &Postgres{pool: pool, reads: make(chan struct{}, poolSize-1)}, nil
}

// WriteHistory stores a batch in one transaction: the opened intervals in
// one INSERT per table, the ends in one UPDATE per table. An end whose
// interval is not open (ended already, by CloseDeadRuns) changes nothing.
func (s *Postgres) WriteHistory(ctx context.Context, opened []awareness.HistoryInterval, closed []awareness.HistoryEnd) error {
	if len(opened) == 0 && len(closed) == 0 {
		return nil
	}
	docs, users, docEnds, userEnds := split(opened, closed)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if len(docs) > 0 {
			c := pgColumnsOf(docs)
			if _, err := tx.Exec(ctx, pgInsertDocs, c.run, c.seq, c.doc, c.user, c.name, c.status, c.from, c.to); err != nil {
				return err
			}
		}
		if len(users) > 0 {
			c := pgColumnsOf(users)
			if _, err := tx.Exec(ctx, pgInsertUsers, c.run, c.seq, c.user, c.name, c.status, c.from, c.to); err != nil {
				return err
			}
		}
		for _, e := range []struct {
			query string
			ends  []awareness.HistoryEnd
		}{{pgCloseDocs, docEnds}, {pgCloseUsers, userEnds}} {
			if len(e.ends) == 0 {
				continue
			}
			run, seq, to := make([]int64, len(e.ends)), make([]int64, len(e.ends)), make([]int64, len(e.ends))
			for i, end := range e.ends {
				run[i], seq[i], to[i] = end.Run, end.Seq, ms(end.To)
			}
			if _, err := tx.Exec(ctx, e.query, run, seq, to); err != nil {
				return err
			}
		}
		return nil
	})
	if refusedData(err) {
		return fmt.Errorf("history: write: %w: %w", awareness.ErrUnstorable, err)
	}
	if err != nil {
		return fmt.Errorf("history: write: %w", err)
	}
	return nil
}

// refusedData reports whether PostgreSQL refused a statement for the data
// it was given, which it will refuse again: a data exception (class 22:
// a NUL or an invalid byte sequence in text) or a limit (class 54: an
// index row over its size).
func refusedData(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (strings.HasPrefix(pe.Code, "22") || strings.HasPrefix(pe.Code, "54"))
}

// pgColumns is a batch of intervals as the arrays unnest reads.
type pgColumns struct {
	run, seq, from          []int64
	doc, user, name, status []string
	to                      []*int64
}

func pgColumnsOf(ivs []awareness.HistoryInterval) pgColumns {
	n := len(ivs)
	c := pgColumns{
		run: make([]int64, n), seq: make([]int64, n), from: make([]int64, n),
		doc: make([]string, n), user: make([]string, n), name: make([]string, n), status: make([]string, n),
		to: make([]*int64, n),
	}
	for i, iv := range ivs {
		c.run[i], c.seq[i], c.from[i], c.to[i] = iv.Run, iv.Seq, ms(iv.From), nullMs(iv.To)
		c.doc[i], c.user[i], c.name[i], c.status[i] = iv.Doc, iv.User, iv.Name, string(iv.Status)
	}
	return c
}

// BeatHistory records that run, of node, was alive at at (kept rounded
// up to the millisecond); an older beat than the one stored is ignored.
func (s *Postgres) BeatHistory(ctx context.Context, run int64, node string, at time.Time) error {
	if _, err := s.pool.Exec(ctx, pgQueries.beat, run, node, beatMs(at)); err != nil {
		return fmt.Errorf("history: beat: %w", err)
	}
	return nil
}

// CloseDeadRuns ends, at their run's last beat, the open intervals of the
// runs but keep (of node, or of any node if node is "") whose beat is
// before staleBefore, and returns how many it ended.
func (s *Postgres) CloseDeadRuns(ctx context.Context, node string, staleBefore time.Time, keep int64) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) (err error) {
		n, err = pgQueries.closeDeadRuns(ctx, pgExec(tx), node, staleBefore, keep)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("history: close dead runs: %w", err)
	}
	return n, nil
}

// PruneHistory deletes up to limit intervals that ended before before,
// and the rows of runs with no open interval whose last beat is older.
func (s *Postgres) PruneHistory(ctx context.Context, before time.Time, limit int) (int64, error) {
	return pgQueries.prune(ctx, pgExec(s.pool), before, limit)
}

// pgExec is an execer over a pool or a transaction.
func pgExec(db interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}) execer {
	return func(ctx context.Context, query string, args ...any) (int64, error) {
		tag, err := db.Exec(ctx, query, args...)
		return tag.RowsAffected(), err
	}
}

// DocIntervals returns the intervals of presence in doc that overlap
// [from, to), ordered by start, or ErrTooMany if more than limit do.
func (s *Postgres) DocIntervals(ctx context.Context, doc string, from, to time.Time, limit int) ([]awareness.HistoryInterval, error) {
	return s.read(ctx, pgQueries.docIntervals, doc, from, to, limit)
}

// UserIntervals returns the intervals of user's status that overlap
// [from, to), ordered by start, or ErrTooMany if more than limit do.
func (s *Postgres) UserIntervals(ctx context.Context, user string, from, to time.Time, limit int) ([]awareness.HistoryInterval, error) {
	return s.read(ctx, pgQueries.userIntervals, user, from, to, limit)
}

func (s *Postgres) read(ctx context.Context, query, key string, from, to time.Time, limit int) ([]awareness.HistoryInterval, error) {
	select {
	case s.reads <- struct{}{}:
		defer func() { <-s.reads }()
	case <-ctx.Done():
		return nil, fmt.Errorf("history: read: %w", ctx.Err())
	}
	r, err := s.pool.Query(ctx, query, readArgs(key, from, to, limit)...)
	if err != nil {
		return nil, fmt.Errorf("history: read: %w", err)
	}
	defer r.Close()
	out, err := collect(r, limit)
	if err != nil && !errors.Is(err, ErrTooMany) {
		return nil, fmt.Errorf("history: read: %w", err)
	}
	return out, err
}

// Close closes the pool; safe to call twice.
func (s *Postgres) Close() error {
	s.closeOnce.Do(s.pool.Close)
	return nil
}
