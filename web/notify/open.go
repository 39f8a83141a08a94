package notify

import (
	"database/sql"
	"fmt"
	"net/url"
	"path/filepath"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	_ "github.com/mattn/go-sqlite3" // database/sql driver "sqlite3"
)

// OpenSQLite opens (creating it if needed) the embedded notification
// database in dir. SQLite allows one writer at a time, so the pool has one
// connection, as River advises.
func OpenSQLite(dir string) (*sql.DB, error) {
	q := url.Values{}
	q.Set("_journal_mode", "WAL")
	q.Set("_busy_timeout", "5000")
	q.Set("_synchronous", "NORMAL") // with WAL: durable across a process crash, fsync at checkpoints
	q.Set("_foreign_keys", "on")
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite3", "file:"+filepath.Join(dir, "notifications.sqlite")+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("notify: open sqlite: %w", err)
	}
	db.SetMaxOpenConns(1)
	if err := db.Ping(); err != nil {
		db.Close()
		return nil, fmt.Errorf("notify: open sqlite: %w", err)
	}
	return db, nil
}

// OpenPostgres opens a pool on PostgreSQL for the queue and notifications.
// Its sessions commit without waiting for the disk (synchronous_commit
// off): the queue commits several times per event, and on a busy disk
// waiting for each flush dominates. The transactions that must survive a
// crash of PostgreSQL itself (an accepted event, a stored notification)
// turn it back on for themselves; see store.durable.
func OpenPostgres(dsn string) (*sql.DB, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("notify: postgres URL: %w", err)
	}
	cfg.RuntimeParams["synchronous_commit"] = "off"
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(32)
	db.SetMaxIdleConns(32) // the default keeps 2: every burst would open new PostgreSQL backends
	if err := db.Ping(); err != nil {
		db.Close()
		return nil, fmt.Errorf("notify: open postgres: %w", err)
	}
	return db, nil
}
