package store

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tandemhq/tandem/internal/testenv"
)

func TestPostgres(t *testing.T) {
	suite{
		open: func(t *testing.T) func() Store {
			url := testenv.PostgresSchema(t)
			return func() Store { return openPostgres(t, url) }
		},
		refused: "\x00", // PostgreSQL's text holds no NUL
	}.run(t)
}

// openPostgres opens the PostgreSQL store at url, closed when t ends. CI
// starts PostgreSQL; a test that cannot reach it fails rather than skips.
func openPostgres(t testing.TB, url string) *Postgres {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := OpenPostgres(ctx, url)
	if err != nil {
		t.Fatalf("PostgreSQL at %s: %v", testenv.PostgresURL(), err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Nodes starting together migrate a new database one at a time, and all
// announce the one storage id the first made.
func TestNodesStartingTogetherMigrateOnceAndShareTheStorageID(t *testing.T) {
	ctx := context.Background()
	url := testenv.PostgresSchema(t)
	const nodes = 4
	ids := make([]string, nodes)
	errs := make([]error, nodes)
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Go(func() {
			s, err := OpenPostgres(ctx, url)
			if err != nil {
				errs[i] = err
				return
			}
			defer s.Close()
			ids[i], errs[i] = s.StorageID(ctx)
		})
	}
	wg.Wait()
	for i := range nodes {
		if errs[i] != nil {
			t.Fatalf("node %d: %v", i, errs[i])
		}
		if len(ids[i]) != 36 || ids[i] != ids[0] {
			t.Fatalf("storage ids %q: want one UUID", ids)
		}
	}
	if again, err := openPostgres(t, url).StorageID(ctx); err != nil || again != ids[0] {
		t.Fatalf("opened again: storage id %q (err %v), want %q", again, err, ids[0])
	}
	var version int
	if err := openPostgres(t, url).pool.QueryRow(ctx, `SELECT version FROM tandem_schema`).Scan(&version); err != nil || version != len(migrations) {
		t.Fatalf("schema version %d (err %v), want %d", version, err, len(migrations))
	}
}

// In a new database, presence's last-seen store may make tandem_last_seen
// before the documents' first migration runs: the migration still runs.
func TestPostgresMigratesAfterLastSeenMadeItsTable(t *testing.T) {
	ctx := context.Background()
	url := testenv.PostgresSchema(t)
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Exec(ctx, `CREATE TABLE tandem_last_seen (user_id text PRIMARY KEY, seen_at timestamptz NOT NULL)`)
	c.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s, err := OpenPostgres(ctx, url)
	if err != nil {
		t.Fatalf("migrating a database whose tandem_last_seen exists: %v", err)
	}
	s.Close()
}
