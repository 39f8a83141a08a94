package history

import (
	"context"
	"fmt"
	"regexp"
	"time"

	"github.com/tandemhq/tandem/awareness"
)

// The tables, named once.
const (
	docsTable  = "tandem_presence_docs"
	usersTable = "tandem_presence_users"
	runsTable  = "tandem_presence_runs"
)

// dialect is what differs between the SQL of the two databases. Shared
// statements are written once in PostgreSQL's form, with $n parameters;
// bind turns those into SQLite's ?n.
type dialect struct {
	greatest   string // the larger of two values: GREATEST or the scalar MAX
	pruneIndex string // how the from_ms index is made: "USING brin" or ""
	columns    string // counts the users table's columns, each a row with a name column
	sqlite     bool
}

var (
	postgresDialect = dialect{greatest: "GREATEST", pruneIndex: "USING brin", columns: `SELECT count(*) FROM
		(SELECT column_name AS name FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = '` + usersTable + `') c`}
	sqliteDialect = dialect{greatest: "MAX", sqlite: true,
		columns: `SELECT count(*) FROM pragma_table_info('` + usersTable + `')`}
)

var dollarParam = regexp.MustCompile(`\$(\d+)`)

// bind rewrites $n parameters for the dialect.
func (d dialect) bind(query string) string {
	if !d.sqlite {
		return query
	}
	return dollarParam.ReplaceAllString(query, "?$1")
}

// rowsIn is the condition that picks the rows of table that
// "WHERE pick" (a condition and a LIMIT) selects. PostgreSQL reads an
// array of ctids with a TID scan whatever the planner estimates; SQLite
// looks up rowids.
func (d dialect) rowsIn(table, pick string) string {
	if d.sqlite {
		return fmt.Sprintf("rowid IN (SELECT rowid FROM %s WHERE %s)", table, pick)
	}
	return fmt.Sprintf("ctid = ANY(ARRAY(SELECT ctid FROM %s WHERE %s))", table, pick)
}

// queries are the statements both stores run, in their dialect's form;
// each store writes its batches in its own way (postgres.go, sqlite.go).
type queries struct {
	schema []string
	// usersNamed counts the users table's name columns (0 or 1);
	// usersName adds it to a table made before it had one. ALTER TABLE
	// locks the table even when IF NOT EXISTS makes it do nothing, so
	// it runs only when the column is missing.
	usersNamed, usersName string
	// beat: $1 run, $2 node, $3 beat_ms.
	beat string
	// closeDead, one per interval table: $1 stale before (ms), $2 node or
	// "", $3 the run kept.
	closeDead []string
	// pruneDocs, pruneUsers: $1 before (ms), $2 limit.
	pruneDocs, pruneUsers string
	// pruneRuns: $1 before (ms).
	pruneRuns string
	// docIntervals, userIntervals: $1 doc or user, $2 the least from_ms
	// read, $3 window end, $4 window start (ms), $5 limit.
	docIntervals, userIntervals string
}

func newQueries(d dialect) queries {
	q := queries{
		schema: []string{
			`CREATE TABLE IF NOT EXISTS ` + docsTable + ` (
				run bigint NOT NULL,
				seq bigint NOT NULL,
				doc_id text NOT NULL,
				user_id text NOT NULL,
				name text NOT NULL,
				status text NOT NULL,
				from_ms bigint NOT NULL,
				to_ms bigint
			)`,
			`CREATE INDEX IF NOT EXISTS tandem_presence_docs_doc ON ` + docsTable + ` (doc_id, from_ms)`,
			`CREATE UNIQUE INDEX IF NOT EXISTS tandem_presence_docs_open ON ` + docsTable + ` (run, seq) WHERE to_ms IS NULL`,
			`CREATE INDEX IF NOT EXISTS tandem_presence_docs_from ON ` + docsTable + ` ` + d.pruneIndex + ` (from_ms)`,
			`CREATE TABLE IF NOT EXISTS ` + usersTable + ` (
				run bigint NOT NULL,
				seq bigint NOT NULL,
				user_id text NOT NULL,
				status text NOT NULL,
				from_ms bigint NOT NULL,
				to_ms bigint
			)`,
			`CREATE INDEX IF NOT EXISTS tandem_presence_users_user ON ` + usersTable + ` (user_id, from_ms)`,
			`CREATE UNIQUE INDEX IF NOT EXISTS tandem_presence_users_open ON ` + usersTable + ` (run, seq) WHERE to_ms IS NULL`,
			`CREATE INDEX IF NOT EXISTS tandem_presence_users_from ON ` + usersTable + ` ` + d.pruneIndex + ` (from_ms)`,
			`CREATE TABLE IF NOT EXISTS ` + runsTable + ` (
				run bigint PRIMARY KEY,
				node text NOT NULL,
				beat_ms bigint NOT NULL
			)`,
		},
		beat: d.bind(`INSERT INTO ` + runsTable + ` (run, node, beat_ms) VALUES ($1, $2, $3)
			ON CONFLICT (run) DO UPDATE SET node = excluded.node,
			beat_ms = ` + d.greatest + `(` + runsTable + `.beat_ms, excluded.beat_ms)`),
		// A run whose intervals are all closed and that has not beaten
		// since before is gone: nothing is left for CloseDeadRuns to end.
		// The NOT EXISTS read the open-interval indexes.
		pruneRuns: d.bind(`DELETE FROM ` + runsTable + ` WHERE beat_ms < $1
			AND NOT EXISTS (SELECT 1 FROM ` + docsTable + ` d WHERE d.run = ` + runsTable + `.run AND d.to_ms IS NULL)
			AND NOT EXISTS (SELECT 1 FROM ` + usersTable + ` u WHERE u.run = ` + runsTable + `.run AND u.to_ms IS NULL)`),
		docIntervals: d.bind(`SELECT run, seq, doc_id, user_id, name, status, from_ms, to_ms
			FROM ` + docsTable + `
			WHERE doc_id = $1 AND from_ms >= $2 AND from_ms < $3 AND (to_ms IS NULL OR to_ms > $4)
			ORDER BY from_ms, run, seq LIMIT $5`),
		usersNamed: d.columns + ` WHERE name = 'name'`,
		usersName:  `ALTER TABLE ` + usersTable + ` ADD COLUMN name text NOT NULL DEFAULT ''`,
		userIntervals: d.bind(`SELECT run, seq, '', user_id, name, status, from_ms, to_ms
			FROM ` + usersTable + `
			WHERE user_id = $1 AND from_ms >= $2 AND from_ms < $3 AND (to_ms IS NULL OR to_ms > $4)
			ORDER BY from_ms, run, seq LIMIT $5`),
	}
	for _, table := range []string{docsTable, usersTable} {
		// An interval is never ended before it began: a run may have
		// opened it after its last beat was written.
		q.closeDead = append(q.closeDead, d.bind(`UPDATE `+table+`
			SET to_ms = `+d.greatest+`(r.beat_ms, `+table+`.from_ms)
			FROM `+runsTable+` r
			WHERE `+table+`.run = r.run AND `+table+`.to_ms IS NULL
			AND r.beat_ms < $1 AND (CAST($2 AS text) = '' OR r.node = $2) AND r.run <> $3`))
	}
	// An interval that ended before before began before it too, so the
	// from_ms index finds the candidates; open rows never match.
	prune := func(table string) string {
		return d.bind(`DELETE FROM ` + table + ` WHERE ` +
			d.rowsIn(table, `from_ms < $1 AND to_ms < $1 LIMIT $2`))
	}
	q.pruneDocs, q.pruneUsers = prune(docsTable), prune(usersTable)
	return q
}

// execer runs a statement and says how many rows it changed: what both
// stores' connections, pools and transactions give the statements below.
type execer func(ctx context.Context, query string, args ...any) (int64, error)

// closeDeadRuns runs closeDead on each interval table: the caller gives
// it a transaction, so both tables end together.
func (q queries) closeDeadRuns(ctx context.Context, exec execer, node string, staleBefore time.Time, keep int64) (int64, error) {
	var n int64
	for _, stmt := range q.closeDead {
		k, err := exec(ctx, stmt, ms(staleBefore), node, keep)
		if err != nil {
			return 0, err
		}
		n += k
	}
	return n, nil
}

// prune deletes up to limit closed intervals that ended before before,
// from both tables, then the rows of runs with nothing left open.
func (q queries) prune(ctx context.Context, exec execer, before time.Time, limit int) (int64, error) {
	var n int64
	for _, stmt := range []string{q.pruneDocs, q.pruneUsers} {
		if n >= int64(limit) {
			break
		}
		k, err := exec(ctx, stmt, ms(before), int64(limit)-n)
		if err != nil {
			return n, fmt.Errorf("history: prune: %w", err)
		}
		n += k
	}
	if _, err := exec(ctx, q.pruneRuns, ms(before)); err != nil {
		return n, fmt.Errorf("history: prune runs: %w", err)
	}
	return n, nil
}

// readArgs are the parameters of docIntervals and userIntervals: the rows
// that overlap [from, to), looked for among those that began at most
// MaxHistorySpan before from, and one more than limit.
func readArgs(key string, from, to time.Time, limit int) []any {
	return []any{key, ms(from.Add(-awareness.MaxHistorySpan)), ms(to), ms(from), int64(max(limit, 0)) + 1}
}

// rows is what both drivers' results give.
type rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// collect reads the rows of docIntervals or userIntervals.
func collect(r rows, limit int) ([]awareness.HistoryInterval, error) {
	var out []awareness.HistoryInterval
	for r.Next() {
		var iv awareness.HistoryInterval
		var status string
		var fromMs int64
		var toMs *int64
		if err := r.Scan(&iv.Run, &iv.Seq, &iv.Doc, &iv.User, &iv.Name, &status, &fromMs, &toMs); err != nil {
			return nil, err
		}
		iv.Status, iv.From = awareness.Status(status), msTime(fromMs)
		if toMs != nil {
			iv.To = msTime(*toMs)
		}
		out = append(out, iv)
	}
	if err := r.Err(); err != nil {
		return nil, err
	}
	if len(out) > max(limit, 0) {
		return nil, ErrTooMany
	}
	return out, nil
}

// split sorts a batch by table: doc "" names a status interval.
func split(opened []awareness.HistoryInterval, closed []awareness.HistoryEnd) (docs, users []awareness.HistoryInterval, docEnds, userEnds []awareness.HistoryEnd) {
	for _, iv := range opened {
		if iv.Doc == "" {
			users = append(users, iv)
		} else {
			docs = append(docs, iv)
		}
	}
	for _, e := range closed {
		if e.Doc == "" {
			userEnds = append(userEnds, e)
		} else {
			docEnds = append(docEnds, e)
		}
	}
	return docs, users, docEnds, userEnds
}

// ms is how a time is stored.
func ms(t time.Time) int64 { return t.UnixMilli() }

// beatMs is how a beat is stored: rounded up, where ms rounds down, so
// that an interval that began before a beat, within the same millisecond,
// still ends after it began when ended at that beat (CloseDeadRuns).
func beatMs(t time.Time) int64 {
	v := t.UnixMilli()
	if time.UnixMilli(v).Before(t) {
		v++
	}
	return v
}

// nullMs is how an end is stored: NULL while open.
func nullMs(t time.Time) *int64 {
	if t.IsZero() {
		return nil
	}
	v := t.UnixMilli()
	return &v
}

func msTime(v int64) time.Time { return time.UnixMilli(v).UTC() }
