package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Postgres keeps documents in PostgreSQL, shared by every node of a
// cluster. A document is rows of tandem_doc_chunks in
// id order: snapshots and incremental chunks (see Store).
type Postgres struct {
	pool *pgxpool.Pool
}

var _ Store = (*Postgres)(nil)

// migrations bring the schema from version i to i+1. Never edit one that
// has shipped: add another. (The first made tandem_last_seen, which is
// presence's now: awareness/lastseen creates it if it is not there, and so
// may have made it first in a new database. The one edit ever made, IF
// NOT EXISTS, is for that; a database past version 1 never runs it again.)
var migrations = []string{
	`CREATE TABLE tandem_doc_chunks (
		id         bigserial PRIMARY KEY,
		doc_id     text        NOT NULL,
		snapshot   boolean     NOT NULL DEFAULT false,
		data       bytea       NOT NULL,
		created_at timestamptz NOT NULL DEFAULT now()
	);
	CREATE INDEX tandem_doc_chunks_doc ON tandem_doc_chunks (doc_id, id);
	CREATE TABLE IF NOT EXISTS tandem_last_seen (
		user_id text PRIMARY KEY,
		seen_at timestamptz NOT NULL
	);
	CREATE TABLE tandem_meta (
		key   text PRIMARY KEY,
		value text NOT NULL
	);`,
	`CREATE TABLE tandem_mention_journals (
		doc_id text  NOT NULL,
		node   text  NOT NULL,
		data   bytea NOT NULL,
		PRIMARY KEY (doc_id, node)
	);`,
	`CREATE TABLE tandem_saved_documents (
		doc_id text  PRIMARY KEY,
		data   bytea NOT NULL
	);`,
}

// OpenPostgres connects and migrates the schema. Nodes starting
// together migrate one at a time (an advisory lock).
func OpenPostgres(ctx context.Context, url string) (*Postgres, error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if err := migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres migrate: %w", err)
	}
	return &Postgres{pool: pool}, nil
}

func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(7354123001)`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS tandem_schema (version int NOT NULL)`); err != nil {
			return err
		}
		var version int
		err := tx.QueryRow(ctx, `SELECT version FROM tandem_schema`).Scan(&version)
		if errors.Is(err, pgx.ErrNoRows) {
			if _, err := tx.Exec(ctx, `INSERT INTO tandem_schema VALUES (0)`); err != nil {
				return err
			}
		} else if err != nil {
			return err
		}
		for ; version < len(migrations); version++ {
			if _, err := tx.Exec(ctx, migrations[version]); err != nil {
				return fmt.Errorf("migration %d: %w", version+1, err)
			}
		}
		_, err = tx.Exec(ctx, `UPDATE tandem_schema SET version = $1`, version)
		return err
	})
}

// Ping checks that the database answers.
func (s *Postgres) Ping(ctx context.Context) error { return s.pool.Ping(ctx) }

// Load implements Store: a snapshot first, then the rest in id order as
// chunks (a second snapshot, from two nodes compacting at once, loads as a
// chunk: either reads as changes).
func (s *Postgres) Load(ctx context.Context, documentID string) (Stored, error) {
	rows, err := s.pool.Query(ctx, `SELECT snapshot, data FROM tandem_doc_chunks WHERE doc_id = $1 ORDER BY snapshot DESC, id`, documentID)
	if err != nil {
		return Stored{}, err
	}
	var out Stored
	n := 0
	for rows.Next() {
		var snap bool
		var data []byte
		if err := rows.Scan(&snap, &data); err != nil {
			return Stored{}, err
		}
		if n == 0 && snap {
			out.Snapshot = data
		} else {
			out.Chunks = append(out.Chunks, data)
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return Stored{}, err
	}
	if n == 0 {
		return Stored{}, ErrNotFound
	}
	err = s.pool.QueryRow(ctx, `SELECT data FROM tandem_saved_documents WHERE doc_id = $1`, documentID).Scan(&out.Saved)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return Stored{}, err
	}
	rows, err = s.pool.Query(ctx, `SELECT node, data FROM tandem_mention_journals WHERE doc_id = $1`, documentID)
	if err != nil {
		return Stored{}, err
	}
	for rows.Next() {
		var node string
		var data []byte
		if err := rows.Scan(&node, &data); err != nil {
			return Stored{}, err
		}
		if out.Journals == nil {
			out.Journals = map[string][]byte{}
		}
		out.Journals[node] = data
	}
	return out, rows.Err()
}

// Journals implements Store.
func (s *Postgres) Journals(ctx context.Context) ([]Journal, error) {
	rows, err := s.pool.Query(ctx, `SELECT doc_id, node, data FROM tandem_mention_journals`)
	if err != nil {
		return nil, err
	}
	var out []Journal
	for rows.Next() {
		var j Journal
		if err := rows.Scan(&j.DocumentID, &j.Node, &j.Data); err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, rows.Err()
}

// Write implements Store: one transaction for the batch. A compaction
// deletes only the rows its snapshot covers (Write.Covers), because
// another node may have appended changes this one has not seen.
func (s *Postgres) Write(ctx context.Context, batch []Write) error {
	if len(batch) == 0 {
		return nil
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		for _, w := range batch {
			if w.Snapshot != nil {
				if err := compactRows(ctx, tx, w); err != nil {
					return err
				}
			}
			for _, c := range w.Chunks {
				if _, err := tx.Exec(ctx, `INSERT INTO tandem_doc_chunks (doc_id, data) VALUES ($1, $2)`, w.DocumentID, c); err != nil {
					return err
				}
			}
			if w.Saved != nil {
				if _, err := tx.Exec(ctx, `INSERT INTO tandem_saved_documents (doc_id, data) VALUES ($1, $2)
					ON CONFLICT (doc_id) DO UPDATE SET data = EXCLUDED.data`, w.DocumentID, w.Saved); err != nil {
					return err
				}
			}
			for node, data := range w.Journals {
				var err error
				if len(data) == 0 {
					_, err = tx.Exec(ctx, `DELETE FROM tandem_mention_journals WHERE doc_id = $1 AND node = $2`, w.DocumentID, node)
				} else {
					_, err = tx.Exec(ctx, `INSERT INTO tandem_mention_journals (doc_id, node, data) VALUES ($1, $2, $3)
						ON CONFLICT (doc_id, node) DO UPDATE SET data = EXCLUDED.data`, w.DocumentID, node, data)
				}
				if err != nil {
					return err
				}
			}
		}
		return nil
	})
}

func compactRows(ctx context.Context, tx pgx.Tx, w Write) error {
	rows, err := tx.Query(ctx, `SELECT id, data FROM tandem_doc_chunks WHERE doc_id = $1 ORDER BY id FOR UPDATE`, w.DocumentID)
	if err != nil {
		return err
	}
	var covered []int64
	for rows.Next() {
		var id int64
		var data []byte
		if err := rows.Scan(&id, &data); err != nil {
			return err
		}
		if w.Covers == nil || w.Covers(data) {
			covered = append(covered, id)
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `DELETE FROM tandem_doc_chunks WHERE id = ANY($1)`, covered); err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `INSERT INTO tandem_doc_chunks (doc_id, snapshot, data) VALUES ($1, true, $2)`, w.DocumentID, w.Snapshot)
	return err
}

// StorageID returns the cluster's storage identity, made once.
func (s *Postgres) StorageID(ctx context.Context) (string, error) {
	id := newUUID()
	_, err := s.pool.Exec(ctx, `INSERT INTO tandem_meta (key, value) VALUES ('storage-id', $1) ON CONFLICT DO NOTHING`, id)
	if err != nil {
		return "", err
	}
	err = s.pool.QueryRow(ctx, `SELECT value FROM tandem_meta WHERE key = 'storage-id'`).Scan(&id)
	return id, err
}

// Close implements Store.
func (s *Postgres) Close() error {
	s.pool.Close()
	return nil
}
