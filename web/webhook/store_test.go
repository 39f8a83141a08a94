package webhook

import (
	"context"
	"fmt"
	"testing"
)

func TestATransactionPreparesEachQueryOnceAndReportsOneThatFails(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			open, pg := b.open(t)
			h := newHooks(t, open(), pg, &captured{}, Config{})
			ctx := context.Background()
			tx, err := h.store.db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			st := h.store.stmts(ctx, tx)
			defer st.close()
			for i := range 3 {
				if _, err := st.exec(`INSERT INTO tandem_webhook_documents (document, at) VALUES (?, ?)`, fmt.Sprint("d", i), i); err != nil {
					t.Fatal(err)
				}
			}
			var n int
			if err := st.queryRow(`SELECT COUNT(*) FROM tandem_webhook_documents WHERE at >= ?`, 1).Scan(&n); err != nil || n != 2 {
				t.Fatalf("count %d, %v; want 2", n, err)
			}
			if len(st.byQ) != 2 {
				t.Fatalf("%d statements prepared for two queries", len(st.byQ))
			}
			if err := st.queryRow(`SELECT nothing FROM no_such_table`).Scan(&n); err == nil {
				t.Fatal("a query that cannot be prepared scanned")
			}
		})
	}
}

// Nodes that start together on a fresh PostgreSQL make the webhooks'
// tables one at a time: none fails on a table another is making.
func TestNodesStartingTogetherMigrateOneAtATime(t *testing.T) {
	for round := range 5 {
		open, _ := postgresBackend.open(t)
		errs := make(chan error, 3)
		for range 3 {
			s := &store{db: open(), postgres: true}
			go func() { errs <- s.migrate(context.Background()) }()
		}
		for range 3 {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
}
