package main

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tandemhq/tandem/awareness"
	"github.com/tandemhq/tandem/internal/testenv"
)

// TestHistoryQueryScenario generates a small year of presence history in
// the test PostgreSQL three times: once dropped at the end, once kept and
// then queried again reused. Every query must have run, the busiest
// document's days must hold intervals, the read must go through the
// history package's (doc_id, from_ms) index, and the generated rows must
// be what the scenario says: as many as asked, none longer than
// awareness.MaxHistorySpan, the busiest document holding its share.
func TestHistoryQueryScenario(t *testing.T) {
	ctx := context.Background()
	base := testenv.PostgresURL()
	o := options{intervals: 20000, historyDocs: 100, queries: 50}
	schemaExists := func(schema string) bool {
		t.Helper()
		c, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		var n int
		if err := c.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, schema).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	check := func(r historyResult) {
		t.Helper()
		if r.intervals != int64(o.intervals) || r.docs != o.historyDocs || r.busiest == "" {
			t.Errorf("%d intervals over %d documents, busiest %q; want %d over %d", r.intervals, r.docs, r.busiest, o.intervals, o.historyDocs)
		}
		for name, q := range map[string]historyQueries{"hour": r.hour, "hour busiest": r.hourBusiest,
			"day": r.day, "day busiest": r.dayBusiest, "hour again": r.hourAgain} {
			if len(q.took) != o.queries || len(q.rows) != o.queries || q.refused != 0 {
				t.Errorf("%s: %d timings, %d row counts, %d refused; want %d, none refused", name, len(q.took), len(q.rows), q.refused, o.queries)
			}
		}
		rows := 0
		for _, n := range r.dayBusiest.rows {
			rows += n
		}
		if rows == 0 {
			t.Error("the busiest document's days returned no interval")
		}
		if !strings.Contains(r.explain, "tandem_presence_docs_doc") {
			t.Errorf("the read does not use the (doc_id, from_ms) index:\n%s", r.explain)
		}
		if r.tableBytes <= r.heapBytes || len(r.indexBytes) != 3 {
			t.Errorf("table %d bytes, rows %d, indexes %v: the sizes are missing", r.tableBytes, r.heapBytes, r.indexBytes)
		}
	}

	r, err := measureHistory(ctx, o, base)
	if err != nil {
		t.Fatal(err)
	}
	check(r)
	if schemaExists(r.schema) {
		t.Errorf("schema %s left behind without --keep-schema", r.schema)
	}

	o.keepSchema = true
	kept, err := measureHistory(ctx, o, base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), base)
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+pgx.Identifier{kept.schema}.Sanitize()+` CASCADE`); err != nil {
			t.Error(err)
		}
	})
	printHistory(kept)
	check(kept)
	if !kept.kept || !schemaExists(kept.schema) {
		t.Fatalf("schema %s not kept with --keep-schema", kept.schema)
	}

	url, err := withParams(base, "search_path", kept.schema)
	if err != nil {
		t.Fatal(err)
	}
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var total, busiest, longest int64
	err = c.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE doc_id = $1), coalesce(max(to_ms - from_ms), 0)
		FROM tandem_presence_docs`, kept.busiest).Scan(&total, &busiest, &longest)
	if err != nil {
		t.Fatal(err)
	}
	// The busiest of 100 holds ln 2 / ln 101 = 15.0% (±0.3% at one
	// standard deviation of 20,000 draws).
	if share := float64(busiest) / float64(total); total != int64(o.intervals) || share < 0.13 || share > 0.17 ||
		longest > awareness.MaxHistorySpan.Milliseconds() {
		t.Errorf("%d rows, the busiest document %.1f%% of them, the longest %d ms; want %d, 15%%, at most %d ms",
			total, 100*share, longest, o.intervals, awareness.MaxHistorySpan.Milliseconds())
	}

	o.reuseSchema = kept.schema
	again, err := measureHistory(ctx, o, base)
	if err != nil {
		t.Fatal(err)
	}
	check(again)
	if !again.reused || again.busiest != kept.busiest || !again.now.Equal(kept.now) || !schemaExists(kept.schema) {
		t.Errorf("reused %v, busiest %q (was %q), year to %v (was %v), schema kept %v",
			again.reused, again.busiest, kept.busiest, again.now, kept.now, schemaExists(kept.schema))
	}
}
