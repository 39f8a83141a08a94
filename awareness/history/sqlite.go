package history

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	_ "github.com/mattn/go-sqlite3" // database/sql driver "sqlite3"

	"github.com/tandemhq/tandem/awareness"
)

// SQLite keeps presence history in <data dir>/presence-history.sqlite,
// for a node of its own.
type SQLite struct {
	db *sql.DB // writes: SQLite takes one writer at a time
	// ro reads, over connections of its own: with the write-ahead log
	// readers never wait for the writer, nor it for them.
	ro        *sql.DB
	closeOnce sync.Once
	closeErr  error
}

var _ awareness.HistoryStore = (*SQLite)(nil)

var liteQueries = newQueries(sqliteDialect)

// A batch's rows go in one statement each, prepared once per batch.
var (
	liteInsertDocs = `INSERT INTO ` + docsTable + ` (run, seq, doc_id, user_id, name, status, from_ms, to_ms)
		VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT (run, seq) WHERE to_ms IS NULL DO NOTHING`
	liteInsertUsers = `INSERT INTO ` + usersTable + ` (run, seq, user_id, name, status, from_ms, to_ms)
		VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (run, seq) WHERE to_ms IS NULL DO NOTHING`
	liteCloseDocs  = liteClose(docsTable)
	liteCloseUsers = liteClose(usersTable)
)

func liteClose(table string) string {
	return `UPDATE ` + table + ` SET to_ms = MAX(?3, from_ms) WHERE run = ?1 AND seq = ?2 AND to_ms IS NULL`
}

// readConns bounds the reads at once.
const readConns = 2

// OpenSQLite opens (creating it if needed) the store in dir. SQLite allows
// one writer at a time, so the writes' pool has one connection; reads have
// readConns of their own.
func OpenSQLite(dir string) (*SQLite, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("history: create data dir: %w", err)
	}
	path := filepath.Join(dir, "presence-history.sqlite")
	q := url.Values{}
	q.Set("_journal_mode", "WAL")
	q.Set("_busy_timeout", "5000")
	q.Set("_synchronous", "NORMAL") // with WAL: durable across a process crash, fsync at checkpoints
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite3", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("history: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	for _, stmt := range liteQueries.schema {
		if _, err := db.Exec(stmt); err != nil {
			db.Close()
			return nil, fmt.Errorf("history: create tables in %s: %w", path, err)
		}
	}
	var named int
	err = db.QueryRow(liteQueries.usersNamed).Scan(&named)
	if err == nil && named == 0 {
		_, err = db.Exec(liteQueries.usersName)
	}
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("history: add the users' names in %s: %w", path, err)
	}
	q.Set("_query_only", "true")
	ro, err := sql.Open("sqlite3", "file:"+path+"?"+q.Encode())
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("history: open %s: %w", path, err)
	}
	ro.SetMaxOpenConns(readConns)
	return &SQLite{db: db, ro: ro}, nil
}

// WriteHistory stores a batch in one transaction. An end whose interval is
// not open (ended already, by CloseDeadRuns) changes nothing.
func (s *SQLite) WriteHistory(ctx context.Context, opened []awareness.HistoryInterval, closed []awareness.HistoryEnd) error {
	if len(opened) == 0 && len(closed) == 0 {
		return nil
	}
	docs, users, docEnds, userEnds := split(opened, closed)
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		err := execEach(ctx, tx, liteInsertDocs, len(docs), func(i int) []any {
			iv := docs[i]
			return []any{iv.Run, iv.Seq, iv.Doc, iv.User, iv.Name, string(iv.Status), ms(iv.From), nullMs(iv.To)}
		})
		if err != nil {
			return err
		}
		err = execEach(ctx, tx, liteInsertUsers, len(users), func(i int) []any {
			iv := users[i]
			return []any{iv.Run, iv.Seq, iv.User, iv.Name, string(iv.Status), ms(iv.From), nullMs(iv.To)}
		})
		if err != nil {
			return err
		}
		err = execEach(ctx, tx, liteCloseDocs, len(docEnds), func(i int) []any {
			return []any{docEnds[i].Run, docEnds[i].Seq, ms(docEnds[i].To)}
		})
		if err != nil {
			return err
		}
		return execEach(ctx, tx, liteCloseUsers, len(userEnds), func(i int) []any {
			return []any{userEnds[i].Run, userEnds[i].Seq, ms(userEnds[i].To)}
		})
	})
	if err != nil {
		return fmt.Errorf("history: write: %w", err)
	}
	return nil
}

// execEach runs query, prepared once, with the arguments of each of n rows.
func execEach(ctx context.Context, tx *sql.Tx, query string, n int, args func(i int) []any) error {
	if n == 0 {
		return nil
	}
	stmt, err := tx.PrepareContext(ctx, query)
	if err != nil {
		return err
	}
	defer stmt.Close()
	for i := range n {
		if _, err := stmt.ExecContext(ctx, args(i)...); err != nil {
			return err
		}
	}
	return nil
}

// inTx runs f in a transaction, committed if f returns nil.
func (s *SQLite) inTx(ctx context.Context, f func(tx *sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		return errors.Join(err, tx.Rollback())
	}
	return tx.Commit()
}

// BeatHistory records that run, of node, was alive at at (kept rounded
// up to the millisecond); an older beat than the one stored is ignored.
func (s *SQLite) BeatHistory(ctx context.Context, run int64, node string, at time.Time) error {
	if _, err := s.db.ExecContext(ctx, liteQueries.beat, run, node, beatMs(at)); err != nil {
		return fmt.Errorf("history: beat: %w", err)
	}
	return nil
}

// CloseDeadRuns ends, at their run's last beat, the open intervals of the
// runs but keep (of node, or of any node if node is "") whose beat is
// before staleBefore, and returns how many it ended.
func (s *SQLite) CloseDeadRuns(ctx context.Context, node string, staleBefore time.Time, keep int64) (int64, error) {
	var n int64
	err := s.inTx(ctx, func(tx *sql.Tx) (err error) {
		n, err = liteQueries.closeDeadRuns(ctx, liteExec(tx), node, staleBefore, keep)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("history: close dead runs: %w", err)
	}
	return n, nil
}

// PruneHistory deletes up to limit intervals that ended before before,
// and the rows of runs with no open interval whose last beat is older.
func (s *SQLite) PruneHistory(ctx context.Context, before time.Time, limit int) (int64, error) {
	return liteQueries.prune(ctx, liteExec(s.db), before, limit)
}

// liteExec is an execer over a database or a transaction.
func liteExec(db interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}) execer {
	return func(ctx context.Context, query string, args ...any) (int64, error) {
		res, err := db.ExecContext(ctx, query, args...)
		if err != nil {
			return 0, err
		}
		return res.RowsAffected()
	}
}

// DocIntervals returns the intervals of presence in doc that overlap
// [from, to), ordered by start, or ErrTooMany if more than limit do.
func (s *SQLite) DocIntervals(ctx context.Context, doc string, from, to time.Time, limit int) ([]awareness.HistoryInterval, error) {
	return s.read(ctx, liteQueries.docIntervals, doc, from, to, limit)
}

// UserIntervals returns the intervals of user's status that overlap
// [from, to), ordered by start, or ErrTooMany if more than limit do.
func (s *SQLite) UserIntervals(ctx context.Context, user string, from, to time.Time, limit int) ([]awareness.HistoryInterval, error) {
	return s.read(ctx, liteQueries.userIntervals, user, from, to, limit)
}

func (s *SQLite) read(ctx context.Context, query, key string, from, to time.Time, limit int) ([]awareness.HistoryInterval, error) {
	r, err := s.ro.QueryContext(ctx, query, readArgs(key, from, to, limit)...)
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

// Close closes the database; safe to call twice.
func (s *SQLite) Close() error {
	s.closeOnce.Do(func() { s.closeErr = errors.Join(s.ro.Close(), s.db.Close()) })
	return s.closeErr
}
