package main

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tandemhq/tandem/doc/store"
	"github.com/tandemhq/tandem/internal/testenv"
)

// TestStoreWritesCountsWhatWasInserted writes chunks and a compaction
// through the store into a run's schema, and the same into another run's:
// the count is the chunks and the snapshot as inserted, bytes included,
// though the compaction deleted the chunks, and nothing of the other run;
// the schema is gone once dropped.
func TestStoreWritesCountsWhatWasInserted(t *testing.T) {
	ctx := context.Background()
	open := func() (*storeWrites, *store.Postgres) {
		t.Helper()
		s, err := newStoreWrites(ctx, testenv.PostgresURL())
		if err != nil {
			t.Fatal(err)
		}
		db, err := store.OpenPostgres(ctx, s.url) // as a node migrates it
		if err != nil {
			s.drop()
			t.Fatal(err)
		}
		if err := s.count(ctx); err != nil {
			db.Close()
			s.drop()
			t.Fatal(err)
		}
		return s, db
	}
	write := func(db *store.Postgres) {
		t.Helper()
		err := db.Write(ctx, []store.Write{{DocumentID: "d", Chunks: [][]byte{[]byte("abc"), []byte("defgh")}}})
		if err == nil {
			err = db.Write(ctx, []store.Write{{DocumentID: "d", Snapshot: []byte("snapshot")}}) // deletes both chunks
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	run, db := open()
	write(db)
	db.Close()
	other, otherDB := open()
	write(otherDB)
	otherDB.Close()
	if err := other.drop(); err != nil {
		t.Fatal(err)
	}

	got, err := run.read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := (storeCount{rows: 2, bytes: 8, snapshots: 1, snapshotBytes: 8}); got != want {
		t.Errorf("counted %+v; want %+v", got, want)
	}
	if err := run.drop(); err != nil {
		t.Fatal(err)
	}
	c, err := pgx.Connect(ctx, testenv.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var n int
	if err := c.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, run.schema).Scan(&n); err != nil || n != 0 {
		t.Errorf("schema %s: %d left (%v); want it dropped", run.schema, n, err)
	}
}
