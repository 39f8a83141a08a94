package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PostgresURL is the PostgreSQL the tests connect to:
// $TANDEM_TEST_POSTGRES, by default the machine's own database "test".
func PostgresURL() string {
	if u := os.Getenv("TANDEM_TEST_POSTGRES"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test"
}

// PostgresSchema makes a schema of t's own in the test PostgreSQL and
// returns a URL whose connections use it (search_path), dropped when t
// ends. Nodes of one test share it; nodes of tests running at the same
// time, in this process or another, never share tables or a River queue,
// whose workers would otherwise take each other's jobs.
func PostgresSchema(t testing.TB) string {
	t.Helper()
	b := make([]byte, 6)
	rand.Read(b)
	schema := "tandem_test_" + hex.EncodeToString(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, PostgresURL())
	if err != nil {
		t.Fatalf("PostgreSQL is required at %s: %v", PostgresURL(), err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("creating schema %s: %v", schema, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, PostgresURL())
		if err != nil {
			t.Errorf("dropping schema %s: %v", schema, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("dropping schema %s: %v", schema, err)
		}
	})
	u, err := url.Parse(PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}
