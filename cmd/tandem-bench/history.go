package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tandemhq/tandem/awareness"
	"github.com/tandemhq/tandem/awareness/history"
)

// The history-query scenario measures how fast presence history answers
// over a year of a busy deployment: it generates the intervals inside
// PostgreSQL, in a schema of its own, under the history package's own
// tables and indexes (history.OpenPostgres makes them), then times what
// the HTTP API does for a one-hour window (DocIntervals and Merge) and
// for the hourly endpoint's day (DocIntervals, Merge and Hourly).
//
// The generated year: intervals begin uniformly over the 365 days before
// the run and are written in the order they began, as recorders write
// them. The k-th busiest of the documents holds about 1/k as many as the
// busiest (Zipf; the busiest of 10,000 holds 7.5%). Lengths are
// exponential, mean 10 minutes, from 1 s up to awareness.MaxHistorySpan;
// each document's users come from a team of 200 out of 200,000, 15% of
// intervals are away, and those still going at the end are open.

const (
	historyYear       = 365 * 24 * time.Hour
	historyUsers      = 200_000
	historyTeam       = 200 // the users who work in one document
	historyMeanLength = 10 * time.Minute
	historyAwayShare  = 0.15
	historyChunk      = 1_000_000 // intervals one INSERT generates
	// What the HTTP API reads with (web's maxHistoryRows, historyGap).
	historyRowLimit = 200_000
	historyGap      = 10 * time.Second
	// historyIndexMemory is the maintenance_work_mem the indexes are
	// built with after the load: the load's speed is not measured.
	historyIndexMemory = "1GB"
)

// The history package's intervals table (awareness/history/doc.go), and
// the bench's own two: the documents by rank, and what was generated.
const (
	historyDocsTable  = "tandem_presence_docs"
	historySchemaStem = "tandem_bench_history_"
	historyBenchDocs  = "tandem_bench_docs"
	historyBenchMeta  = "tandem_bench_meta"
)

var historySchemaName = regexp.MustCompile(`^` + historySchemaStem + `[a-z0-9_]+$`)

// historyInsert generates intervals $1 to $2-1 of $5 over [$3, $4) ms,
// interval g beginning in the g-th of $5 equal slots. A document's rank
// k is floor((N+1)^u) for u uniform, capped at N = $6: the share of rank
// k is ln((k+1)/k)/ln(N+1), about 1/k.
var historyInsert = `INSERT INTO ` + historyDocsTable + ` (run, seq, doc_id, user_id, name, status, from_ms, to_ms)
	SELECT p.g / 1000000 + 1, p.g, d.doc_id,
		'user-' || (p.k::bigint * 7919 + p.member) % ` + fmt.Sprint(historyUsers) + `,
		'User ' || (p.k::bigint * 7919 + p.member) % ` + fmt.Sprint(historyUsers) + `,
		CASE WHEN p.away THEN 'away' ELSE 'online' END,
		p.f, CASE WHEN p.f + p.len > $4 THEN NULL ELSE p.f + p.len END
	FROM (
		SELECT g,
			$3::bigint + floor((g + random()) * ($4::bigint - $3::bigint)::float8 / $5::bigint)::bigint AS f,
			least(` + fmt.Sprint(awareness.MaxHistorySpan.Milliseconds()) + `, greatest(1000,
				floor(-ln(1 - random()) * ` + fmt.Sprint(historyMeanLength.Milliseconds()) + `)))::bigint AS len,
			least(floor(exp(random() * ln($6::int + 1.0)))::int, $6::int) AS k,
			random() < ` + fmt.Sprint(historyAwayShare) + ` AS away,
			floor(random() * ` + fmt.Sprint(historyTeam) + `)::int AS member
		FROM generate_series($1::bigint, $2::bigint - 1) g
	) p JOIN ` + historyBenchDocs + ` d ON d.rank = p.k`

// historyResult is what one history-query run measured.
type historyResult struct {
	schema    string
	kept      bool // the schema is left in the database
	reused    bool // made by an earlier run
	intervals int64
	docs      int
	busiest   string    // the document of rank 1
	from, now time.Time // the generated year

	load, indexes, vacuum time.Duration // zero when reused
	tableBytes, heapBytes int64
	indexBytes            []historySize
	sharedBuffers         string

	// hour and day are the mixed traffic; hourBusiest and dayBusiest the
	// busiest document alone; hourAgain the hour queries run once more.
	hour, hourBusiest, day, dayBusiest, hourAgain historyQueries
	explain                                       string
}

type historySize struct {
	name  string
	bytes int64
}

// historyQueries are the timings of one kind of query.
type historyQueries struct {
	took    []time.Duration // sorted
	read    []time.Duration // sorted: the part of took DocIntervals took
	rows    []int           // intervals read, per query
	refused int             // over historyRowLimit
}

func runHistoryQuery(ctx context.Context, o options, postgresURL string) error {
	r, err := measureHistory(ctx, o, postgresURL)
	if err != nil {
		return err
	}
	printHistory(r)
	return nil
}

func measureHistory(ctx context.Context, o options, postgresURL string) (r historyResult, err error) {
	if o.queries <= 0 {
		return r, fmt.Errorf("--queries %d: want at least 1", o.queries)
	}
	r.schema = o.reuseSchema
	if r.schema == "" {
		b := make([]byte, 6)
		rand.Read(b)
		r.schema = historySchemaStem + hex.EncodeToString(b)
	} else if !historySchemaName.MatchString(r.schema) {
		return r, fmt.Errorf("--reuse-schema %q: not a schema this scenario made (%s…)", r.schema, historySchemaStem)
	}
	schemaURL, err := withParams(postgresURL, "search_path", r.schema)
	if err != nil {
		return r, fmt.Errorf("--postgres-url: %w", err)
	}
	appName := r.schema // names the store's connections in pg_stat_activity
	storeURL, _ := withParams(schemaURL, "application_name", appName)
	admin, err := pgx.Connect(ctx, schemaURL)
	if err != nil {
		return r, fmt.Errorf("postgres: %w", err)
	}
	defer admin.Close(context.Background())
	if err := admin.QueryRow(ctx, `SHOW shared_buffers`).Scan(&r.sharedBuffers); err != nil {
		return r, err
	}

	if o.reuseSchema != "" {
		r.reused, r.kept = true, true // left as it was
		if err := readHistoryMeta(ctx, admin, &r); err != nil {
			return r, fmt.Errorf("--reuse-schema %s: %w", r.schema, err)
		}
	} else {
		if _, err := admin.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{r.schema}.Sanitize()); err != nil {
			return r, fmt.Errorf("postgres: create schema: %w", err)
		}
		r.kept = o.keepSchema
		defer func() {
			if r.kept && err == nil {
				return
			}
			// Also after an interrupt: ctx is done by then.
			drop, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if _, dropErr := admin.Exec(drop, `DROP SCHEMA `+pgx.Identifier{r.schema}.Sanitize()+` CASCADE`); dropErr != nil {
				err = errors.Join(err, fmt.Errorf("postgres: drop schema %s: %w", r.schema, dropErr))
			}
			r.kept = false
		}()
		if err := generateHistory(ctx, admin, schemaURL, o, &r); err != nil {
			return r, err
		}
	}
	if err := readHistorySizes(ctx, admin, &r); err != nil {
		return r, err
	}

	store, err := history.OpenPostgres(ctx, storeURL)
	if err != nil {
		return r, err
	}
	defer store.Close()
	docs, err := historyDocIDs(ctx, admin)
	if err != nil {
		return r, err
	}
	rng := mrand.New(mrand.NewPCG(1, 2)) // the same queries each run
	traffic := func() string { return docs[zipfRank(rng, len(docs))-1] }
	busiest := func() string { return r.busiest }
	// Windows begin at whole minutes, at least MaxHistorySpan into the
	// year, so that each reads a full span of starts; the hourly
	// endpoint's at whole hours.
	first := r.from.Add(awareness.MaxHistorySpan)
	hourAt := func() time.Time {
		return first.Add(time.Duration(rng.Int64N(int64(r.now.Sub(first) - time.Hour)))).Truncate(time.Minute)
	}
	dayAt := func() time.Time {
		return first.Add(time.Duration(rng.Int64N(int64(r.now.Sub(first) - 25*time.Hour)))).Truncate(time.Hour).Add(time.Hour)
	}
	// A read returns the intervals and when DocIntervals returned them.
	type read func(doc string, from time.Time) ([]awareness.HistoryInterval, time.Time, error)
	hour := func(doc string, from time.Time) ([]awareness.HistoryInterval, time.Time, error) {
		raw, err := store.DocIntervals(ctx, doc, from, from.Add(time.Hour), historyRowLimit)
		got := time.Now()
		if err == nil {
			history.Merge(raw, historyGap)
		}
		return raw, got, err
	}
	day := func(doc string, from time.Time) ([]awareness.HistoryInterval, time.Time, error) {
		to := from.Add(24 * time.Hour)
		raw, err := store.DocIntervals(ctx, doc, from, to, historyRowLimit)
		got := time.Now()
		if err == nil {
			history.Hourly(history.Merge(raw, historyGap), from, to, r.now)
		}
		return raw, got, err
	}

	type window struct {
		doc  string
		from time.Time
	}
	windows := func(doc func() string, at func() time.Time) []window {
		ws := make([]window, o.queries)
		for i := range ws {
			ws[i] = window{doc(), at()}
		}
		return ws
	}
	hours := windows(traffic, hourAt)
	// In this order, the first right after the load.
	for _, s := range []struct {
		q       *historyQueries
		windows []window
		read    read
	}{
		{&r.hour, hours, hour},
		{&r.hourBusiest, windows(busiest, hourAt), hour},
		{&r.day, windows(traffic, dayAt), day},
		{&r.dayBusiest, windows(busiest, dayAt), day},
		{&r.hourAgain, hours, hour},
	} {
		for _, w := range s.windows {
			start := time.Now()
			raw, got, err := s.read(w.doc, w.from)
			took := time.Since(start)
			if errors.Is(err, history.ErrTooMany) {
				s.q.refused++
			} else if err != nil {
				return r, err
			}
			s.q.took, s.q.read, s.q.rows = append(s.q.took, took), append(s.q.read, got.Sub(start)), append(s.q.rows, len(raw))
		}
		slices.Sort(s.q.took)
		slices.Sort(s.q.read)
	}
	r.explain, err = explainHistory(ctx, admin, appName, r.busiest, hourAt())
	return r, err
}

// generateHistory makes the history tables in the new schema, loads
// o.intervals into them without their indexes, then lets the history
// package build its indexes again, and vacuums.
func generateHistory(ctx context.Context, admin *pgx.Conn, schemaURL string, o options, r *historyResult) error {
	if o.intervals <= 0 || o.historyDocs <= 0 {
		return fmt.Errorf("--intervals %d, --history-docs %d: want both above 0", o.intervals, o.historyDocs)
	}
	r.intervals, r.docs = int64(o.intervals), o.historyDocs
	r.now = time.Now().UTC().Truncate(time.Millisecond)
	r.from = r.now.Add(-historyYear)
	store, err := history.OpenPostgres(ctx, schemaURL)
	if err != nil {
		return err
	}
	store.Close()
	// The history package names its indexes; they are dropped here and
	// made again, by the package, once the rows are in.
	var indexes []string
	rows, err := admin.Query(ctx, `SELECT indexrelid::regclass::text FROM pg_index WHERE indrelid = $1::regclass`, historyDocsTable)
	if err == nil {
		indexes, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		return fmt.Errorf("postgres: history indexes: %w", err)
	}
	docs := make([]string, r.docs)
	ranks := make([]int32, r.docs)
	for i := range docs {
		docs[i], ranks[i] = newDocID(), int32(i+1)
	}
	r.busiest = docs[0]
	setup := []struct {
		sql  string
		args []any
	}{
		{`ALTER TABLE ` + historyDocsTable + ` SET (autovacuum_enabled = off)`, nil}, // until the vacuum below
		{`DROP INDEX ` + strings.Join(indexes, ", "), nil},
		{`CREATE TABLE ` + historyBenchDocs + ` (rank int PRIMARY KEY, doc_id text NOT NULL)`, nil},
		{`INSERT INTO ` + historyBenchDocs + ` SELECT * FROM unnest($1::int[], $2::text[])`, []any{ranks, docs}},
		{`CREATE TABLE ` + historyBenchMeta + ` (intervals bigint NOT NULL, docs int NOT NULL, from_ms bigint NOT NULL, to_ms bigint NOT NULL)`, nil},
		{`INSERT INTO ` + historyBenchMeta + ` VALUES ($1, $2, $3, $4)`, []any{r.intervals, r.docs, r.from.UnixMilli(), r.now.UnixMilli()}},
		{`ANALYZE ` + historyBenchDocs, nil},
	}
	for _, s := range setup {
		if _, err := admin.Exec(ctx, s.sql, s.args...); err != nil {
			return fmt.Errorf("postgres: %s: %w", strings.Fields(s.sql)[0], err)
		}
	}

	fmt.Printf("== history-query: generating %d intervals over %d documents in schema %s\n", r.intervals, r.docs, r.schema)
	start := time.Now()
	var inserted int64
	for lo := int64(0); lo < r.intervals; lo += historyChunk {
		hi := min(lo+historyChunk, r.intervals)
		tag, err := admin.Exec(ctx, historyInsert, lo, hi, r.from.UnixMilli(), r.now.UnixMilli(), r.intervals, r.docs)
		if err != nil {
			return fmt.Errorf("postgres: generate intervals: %w", err)
		}
		inserted += tag.RowsAffected()
		if hi/historyChunk%10 == 0 || hi == r.intervals {
			fmt.Printf("   %d intervals in %v\n", hi, time.Since(start).Round(time.Second))
		}
	}
	r.load = time.Since(start)
	if inserted != r.intervals {
		return fmt.Errorf("generated %d intervals, want %d", inserted, r.intervals)
	}

	start = time.Now()
	indexURL, _ := withParams(schemaURL, "maintenance_work_mem", historyIndexMemory)
	if store, err = history.OpenPostgres(ctx, indexURL); err != nil {
		return err
	}
	store.Close()
	r.indexes = time.Since(start)
	start = time.Now()
	// As autovacuum would have over a year: hint bits and the visibility
	// map set, so that the first reads do not write; and the statistics.
	for _, sql := range []string{
		`ALTER TABLE ` + historyDocsTable + ` RESET (autovacuum_enabled)`,
		`VACUUM (ANALYZE) ` + historyDocsTable,
	} {
		if _, err := admin.Exec(ctx, sql); err != nil {
			return fmt.Errorf("postgres: %s: %w", sql, err)
		}
	}
	r.vacuum = time.Since(start)
	return nil
}

func readHistoryMeta(ctx context.Context, admin *pgx.Conn, r *historyResult) error {
	var fromMs, nowMs int64
	err := admin.QueryRow(ctx, `SELECT m.intervals, m.docs, m.from_ms, m.to_ms, d.doc_id
		FROM `+historyBenchMeta+` m, `+historyBenchDocs+` d WHERE d.rank = 1`).
		Scan(&r.intervals, &r.docs, &fromMs, &nowMs, &r.busiest)
	r.from, r.now = time.UnixMilli(fromMs).UTC(), time.UnixMilli(nowMs).UTC()
	return err
}

// historyDocIDs returns the documents in order of rank, busiest first.
func historyDocIDs(ctx context.Context, admin *pgx.Conn) ([]string, error) {
	rows, err := admin.Query(ctx, `SELECT doc_id FROM `+historyBenchDocs+` ORDER BY rank`)
	if err != nil {
		return nil, fmt.Errorf("postgres: documents: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

func readHistorySizes(ctx context.Context, admin *pgx.Conn, r *historyResult) error {
	err := admin.QueryRow(ctx, `SELECT pg_total_relation_size($1::regclass), pg_relation_size($1::regclass)`, historyDocsTable).
		Scan(&r.tableBytes, &r.heapBytes)
	if err != nil {
		return fmt.Errorf("postgres: table size: %w", err)
	}
	rows, err := admin.Query(ctx, `SELECT indexrelid::regclass::text, pg_relation_size(indexrelid)
		FROM pg_index WHERE indrelid = $1::regclass ORDER BY 1`, historyDocsTable)
	if err == nil {
		r.indexBytes, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (s historySize, err error) {
			return s, row.Scan(&s.name, &s.bytes)
		})
	}
	if err != nil {
		return fmt.Errorf("postgres: index sizes: %w", err)
	}
	return nil
}

// explainHistory explains, analyzed, the read the store last made over
// one of its connections (pg_stat_activity keeps each connection's last
// statement), for doc over the hour from from: the history package's
// own SQL, with the parameters it documents (queries.go: doc, the least
// from_ms read, window end, window start, limit + 1).
func explainHistory(ctx context.Context, admin *pgx.Conn, appName, doc string, from time.Time) (string, error) {
	var query string
	err := admin.QueryRow(ctx, `SELECT query FROM pg_stat_activity
		WHERE application_name = $1 AND query ILIKE 'select%' AND query LIKE '%`+historyDocsTable+`%'
		ORDER BY state_change DESC LIMIT 1`, appName).Scan(&query)
	if err != nil {
		return "", fmt.Errorf("postgres: the store's read in pg_stat_activity: %w", err)
	}
	to := from.Add(time.Hour)
	rows, err := admin.Query(ctx, `EXPLAIN (ANALYZE, BUFFERS) `+query,
		doc, from.Add(-awareness.MaxHistorySpan).UnixMilli(), to.UnixMilli(), from.UnixMilli(), int64(historyRowLimit+1))
	if err != nil {
		return "", fmt.Errorf("postgres: explain: %w", err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", fmt.Errorf("postgres: explain: %w", err)
	}
	return strings.Join(lines, "\n"), nil
}

// zipfRank draws a rank from 1 to n as the generated rows do: traffic
// follows activity.
func zipfRank(rng *mrand.Rand, n int) int {
	return min(int(math.Exp(rng.Float64()*math.Log(float64(n)+1))), n)
}

// withParams returns the URL with the query parameters set (pgx passes
// unknown ones to the server as settings).
func withParams(raw string, kv ...string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	q := u.Query()
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

func printHistory(r historyResult) {
	size := func(b int64) string {
		if b < 1<<20 {
			return fmt.Sprintf("%d KiB", b>>10)
		}
		if b < 1<<30 {
			return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
		}
		return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30))
	}
	if r.reused {
		fmt.Printf("schema               %s, reused\n", r.schema)
	} else {
		fmt.Printf("load                 %v (%.0f intervals/s) without indexes; indexes built in %v; VACUUM (ANALYZE) %v\n",
			r.load.Round(time.Second), float64(r.intervals)/r.load.Seconds(), r.indexes.Round(time.Second), r.vacuum.Round(time.Second))
	}
	fmt.Printf("intervals            %d over %d documents, %s to %s; the busiest document holds about %.1f%%\n",
		r.intervals, r.docs, r.from.Format(time.DateOnly), r.now.Format(time.DateOnly),
		100*math.Log(2)/math.Log(float64(r.docs)+1))
	fmt.Printf("table                %s in all, %s of rows\n", size(r.tableBytes), size(r.heapBytes))
	for _, s := range r.indexBytes {
		fmt.Printf("  index %-28s %s\n", s.name, size(s.bytes))
	}
	first := "the first right after the load, its writes and the index builds"
	if r.reused {
		first = "on a reused schema"
	}
	fmt.Printf("queries one at a time, %s; PostgreSQL's shared_buffers are %s,\n"+
		"  the table %s; the operating system's page cache holds what the machine's memory kept\n",
		first, r.sharedBuffers, size(r.tableBytes))
	for _, s := range []struct {
		name string
		q    historyQueries
	}{
		{"hour, traffic", r.hour},
		{"hour, busiest", r.hourBusiest},
		{"day hourly, traffic", r.day},
		{"day hourly, busiest", r.dayBusiest},
		{"hour, traffic again", r.hourAgain},
	} {
		q := s.q
		if len(q.took) == 0 {
			continue
		}
		total, most := 0, 0
		for _, n := range q.rows {
			total += n
			most = max(most, n)
		}
		fmt.Printf("%-20s p50/p95/p99/max %v / %v / %v / %v; rows returned mean %.1f, max %d",
			s.name, pct(q.took, 50), pct(q.took, 95), pct(q.took, 99), q.took[len(q.took)-1].Round(10*time.Microsecond),
			float64(total)/float64(len(q.rows)), most)
		if q.refused > 0 {
			fmt.Printf("; %d refused (over %d)", q.refused, historyRowLimit)
		}
		fmt.Printf("\n  DocIntervals alone p50/p99 %v / %v\n", pct(q.read, 50), pct(q.read, 99))
	}
	fmt.Println("  hour: DocIntervals (limit 200,000) and Merge over a random hour; day hourly: DocIntervals, Merge and Hourly")
	fmt.Println("  over a random day; traffic picks documents as the rows were spread; again: the hour queries once more")
	fmt.Printf("EXPLAIN (ANALYZE, BUFFERS) of an hour of the busiest document:\n%s\n", r.explain)
	if r.kept {
		fmt.Printf("kept schema %s: --reuse-schema %s queries it again; DROP SCHEMA %s CASCADE removes it\n",
			r.schema, r.schema, r.schema)
	}
}
