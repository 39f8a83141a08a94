package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// storeSchemaStem begins the name of the schema a cluster run keeps its
// nodes' PostgreSQL tables in.
const storeSchemaStem = "tandem_bench_"

// storeWrites is a cluster run's schema in PostgreSQL: its nodes' tables
// are made there, by the nodes, and a trigger the run adds once they
// have made them counts what they insert into tandem_doc_chunks. Counted
// as inserted, not as left: a compaction deletes the chunks its snapshot
// covers. No other user of the server writes there, so the count is the
// run's alone.
type storeWrites struct {
	schema string
	url    string // --postgres-url with the schema as its search_path
	admin  *pgx.Conn
}

// storeCount is what the nodes inserted into tandem_doc_chunks so far:
// chunk rows (changes) and snapshot rows (compactions) apart, each with
// the bytes of their data.
type storeCount struct {
	rows, bytes              int64
	snapshots, snapshotBytes int64
}

func (c storeCount) minus(d storeCount) storeCount {
	return storeCount{c.rows - d.rows, c.bytes - d.bytes, c.snapshots - d.snapshots, c.snapshotBytes - d.snapshotBytes}
}

// newStoreWrites makes a schema of the run's own in the database of
// postgresURL.
func newStoreWrites(ctx context.Context, postgresURL string) (*storeWrites, error) {
	b := make([]byte, 6)
	rand.Read(b)
	s := &storeWrites{schema: storeSchemaStem + hex.EncodeToString(b)}
	var err error
	if s.url, err = withParams(postgresURL, "search_path", s.schema); err != nil {
		return nil, fmt.Errorf("--postgres-url: %w", err)
	}
	if s.admin, err = pgx.Connect(ctx, s.url); err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if _, err := s.admin.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{s.schema}.Sanitize()); err != nil {
		s.admin.Close(context.Background())
		return nil, fmt.Errorf("postgres: create schema: %w", err)
	}
	return s, nil
}

// count adds the counter: a row for each row inserted into
// tandem_doc_chunks, in the inserting transaction (so one rolled back is
// not counted), without a row that concurrent writers would queue on.
// The nodes must have made their tables.
func (s *storeWrites) count(ctx context.Context) error {
	schema := pgx.Identifier{s.schema}.Sanitize()
	_, err := s.admin.Exec(ctx, `
		CREATE TABLE `+schema+`.bench_chunk_inserts (snapshot boolean NOT NULL, bytes bigint NOT NULL);
		CREATE FUNCTION `+schema+`.bench_count_chunk() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			INSERT INTO `+schema+`.bench_chunk_inserts VALUES (NEW.snapshot, octet_length(NEW.data));
			RETURN NULL;
		END $$;
		CREATE TRIGGER bench_count_chunk AFTER INSERT ON `+schema+`.tandem_doc_chunks
			FOR EACH ROW EXECUTE FUNCTION `+schema+`.bench_count_chunk();`)
	if err != nil {
		return fmt.Errorf("postgres: counting the store's writes: %w", err)
	}
	return nil
}

// read returns what was inserted since count.
func (s *storeWrites) read(ctx context.Context) (c storeCount, err error) {
	err = s.admin.QueryRow(ctx, `SELECT
			count(*) FILTER (WHERE NOT snapshot), coalesce(sum(bytes) FILTER (WHERE NOT snapshot), 0),
			count(*) FILTER (WHERE snapshot), coalesce(sum(bytes) FILTER (WHERE snapshot), 0)
		FROM `+pgx.Identifier{s.schema}.Sanitize()+`.bench_chunk_inserts`).
		Scan(&c.rows, &c.bytes, &c.snapshots, &c.snapshotBytes)
	return c, err
}

// drop drops the schema, also after an interrupt.
func (s *storeWrites) drop() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := s.admin.Exec(ctx, `DROP SCHEMA `+pgx.Identifier{s.schema}.Sanitize()+` CASCADE`)
	return errors.Join(err, s.admin.Close(ctx))
}

// printStoreWrites reports what the nodes inserted for changes typed.
func printStoreWrites(c storeCount, changes int64) {
	per := func(n int64) float64 { return float64(n) / float64(max(changes, 1)) }
	fmt.Printf("store writes         %d chunk rows, %d bytes: %.2f rows, %.0f bytes per change of %d typed; %d snapshot rows, %d bytes\n",
		c.rows, c.bytes, per(c.rows), per(c.bytes), changes, c.snapshots, c.snapshotBytes)
}
