package history

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/tandemhq/tandem/awareness"
	"github.com/tandemhq/tandem/internal/testenv"
)

// store is what both stores give: the contract, the reads and Close.
type store interface {
	awareness.HistoryStore
	DocIntervals(ctx context.Context, doc string, from, to time.Time, limit int) ([]awareness.HistoryInterval, error)
	UserIntervals(ctx context.Context, user string, from, to time.Time, limit int) ([]awareness.HistoryInterval, error)
	Close() error
}

var (
	_ store = (*SQLite)(nil)
	_ store = (*Postgres)(nil)
)

// openers are the stores every behavioural test runs against, each empty.
var openers = []struct {
	name string
	open func(t *testing.T) store
}{
	{"SQLite", func(t *testing.T) store { return openSQLite(t, t.TempDir()) }},
	{"Postgres", func(t *testing.T) store { return openPostgres(t, testenv.PostgresSchema(t)) }},
}

func openSQLite(t *testing.T, dir string) *SQLite {
	t.Helper()
	s, err := OpenSQLite(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// openPostgres opens the store at url, which names a schema of the
// test's own (testenv.PostgresSchema): CloseDeadRuns and PruneHistory
// touch every row, so tests must not share tables.
func openPostgres(t *testing.T, url string) *Postgres {
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

func eachStore(t *testing.T, test func(t *testing.T, s store)) {
	for _, o := range openers {
		t.Run(o.name, func(t *testing.T) { test(t, o.open(t)) })
	}
}

var t0 = time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)

func at(minutes int) time.Time { return t0.Add(time.Duration(minutes) * time.Minute) }

// open is an open interval; doc "" makes it a status interval.
func open(run, seq int64, doc, user string, status awareness.Status, from int) awareness.HistoryInterval {
	return awareness.HistoryInterval{Run: run, Seq: seq, Doc: doc, User: user, Status: status, From: at(from)}
}

func closed(run, seq int64, doc, user string, status awareness.Status, from, to int) awareness.HistoryInterval {
	iv := open(run, seq, doc, user, status, from)
	iv.To = at(to)
	return iv
}

func end(run, seq int64, doc string, to int) awareness.HistoryEnd {
	return awareness.HistoryEnd{Run: run, Seq: seq, Doc: doc, To: at(to)}
}

// show writes intervals as "run/seq doc user name status from-to" with
// minutes from t0, "…" while open.
func show(ivs []awareness.HistoryInterval) []string {
	out := make([]string, len(ivs))
	for i, iv := range ivs {
		to := "…"
		if !iv.To.IsZero() {
			to = fmt.Sprint(iv.To.Sub(t0).Minutes())
		}
		out[i] = fmt.Sprintf("%d/%d %s %s %s %s %v-%s", iv.Run, iv.Seq, iv.Doc, iv.User, iv.Name, iv.Status, iv.From.Sub(t0).Minutes(), to)
	}
	return out
}

func write(t *testing.T, s store, opened []awareness.HistoryInterval, ends ...awareness.HistoryEnd) {
	t.Helper()
	if err := s.WriteHistory(context.Background(), opened, ends); err != nil {
		t.Fatal(err)
	}
}

func beat(t *testing.T, s store, run int64, node string, minutes int) {
	t.Helper()
	if err := s.BeatHistory(context.Background(), run, node, at(minutes)); err != nil {
		t.Fatal(err)
	}
}

// wantDoc checks what DocIntervals returns for [from, to) minutes.
func wantDoc(t *testing.T, s store, doc string, from, to int, want ...string) {
	t.Helper()
	got, err := s.DocIntervals(context.Background(), doc, at(from), at(to), 100)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(show(got), want) {
		t.Fatalf("DocIntervals(%s, %d, %d):\n got %q\nwant %q", doc, from, to, show(got), want)
	}
}

func wantUser(t *testing.T, s store, user string, from, to int, want ...string) {
	t.Helper()
	got, err := s.UserIntervals(context.Background(), user, at(from), at(to), 100)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(show(got), want) {
		t.Fatalf("UserIntervals(%s, %d, %d):\n got %q\nwant %q", user, from, to, show(got), want)
	}
}

// An interval written open reads as open until a later batch ends it; a
// second end of it changes nothing.
func TestWriteOpenThenClose(t *testing.T) {
	eachStore(t, func(t *testing.T, s store) {
		presence, status := open(1, 1, "d", "ana", awareness.StatusOnline, 0), open(1, 2, "", "ana", awareness.StatusAway, 5)
		presence.Name, status.Name = "Ana", "Ana"
		write(t, s, []awareness.HistoryInterval{presence, status})
		wantDoc(t, s, "d", 0, 60, "1/1 d ana Ana online 0-…")
		wantUser(t, s, "ana", 0, 60, "1/2  ana Ana away 5-…")

		write(t, s, nil, end(1, 1, "d", 30), end(1, 2, "", 20))
		wantDoc(t, s, "d", 0, 60, "1/1 d ana Ana online 0-30")
		wantUser(t, s, "ana", 0, 60, "1/2  ana Ana away 5-20")

		write(t, s, nil, end(1, 1, "d", 50), end(1, 2, "", 50))
		wantDoc(t, s, "d", 0, 60, "1/1 d ana Ana online 0-30")
		wantUser(t, s, "ana", 0, 60, "1/2  ana Ana away 5-20")
	})
}

// An interval that began and ended between two batches comes as one
// opened row with its end.
func TestOpenedAndClosedInOneBatch(t *testing.T) {
	eachStore(t, func(t *testing.T, s store) {
		write(t, s, []awareness.HistoryInterval{
			closed(2, 1, "d", "bo", awareness.StatusOnline, 0, 10),
			closed(2, 2, "", "bo", awareness.StatusOnline, 0, 12),
		})
		wantDoc(t, s, "d", 0, 60, "2/1 d bo  online 0-10")
		wantUser(t, s, "bo", 0, 60, "2/2  bo  online 0-12")
		write(t, s, nil, end(2, 1, "d", 40))
		wantDoc(t, s, "d", 0, 60, "2/1 d bo  online 0-10")
	})
}

// A batch written again, as after a write that failed but was stored,
// changes nothing: an interval still open is not opened twice, and its
// end applies once.
func TestBatchWrittenTwiceChangesNothing(t *testing.T) {
	eachStore(t, func(t *testing.T, s store) {
		batch := []awareness.HistoryInterval{
			open(3, 1, "d", "cy", awareness.StatusOnline, 0),
			open(3, 2, "", "cy", awareness.StatusOnline, 0),
		}
		write(t, s, batch)
		write(t, s, batch)
		wantDoc(t, s, "d", 0, 60, "3/1 d cy  online 0-…")
		wantUser(t, s, "cy", 0, 60, "3/2  cy  online 0-…")
		ends := []awareness.HistoryEnd{end(3, 1, "d", 10), end(3, 2, "", 10)}
		write(t, s, []awareness.HistoryInterval{open(3, 3, "d", "cy", awareness.StatusAway, 10)}, ends...)
		write(t, s, []awareness.HistoryInterval{open(3, 3, "d", "cy", awareness.StatusAway, 10)}, ends...)
		wantDoc(t, s, "d", 0, 60, "3/1 d cy  online 0-10", "3/3 d cy  away 10-…")
		wantUser(t, s, "cy", 0, 60, "3/2  cy  online 0-10")
	})
}

// A batch that fails writes nothing.
func TestFailedBatchWritesNothing(t *testing.T) {
	eachStore(t, func(t *testing.T, s store) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		err := s.WriteHistory(ctx, []awareness.HistoryInterval{
			open(4, 1, "d", "dee", awareness.StatusOnline, 0),
			open(4, 2, "", "dee", awareness.StatusOnline, 0),
		}, nil)
		if err == nil {
			t.Fatal("a batch was written under a cancelled context")
		}
		wantDoc(t, s, "d", 0, 60)
		wantUser(t, s, "dee", 0, 60)
	})
}

// CloseDeadRuns ends the open intervals of the runs whose beat is stale,
// at the beat (never before their start), those of the named node only,
// each once.
func TestCloseDeadRunsEndsStaleRunsAtTheirBeat(t *testing.T) {
	eachStore(t, func(t *testing.T, s store) {
		beat(t, s, 10, "n1", 10)
		beat(t, s, 10, "n1", 5) // older: ignored
		beat(t, s, 11, "n1", 50)
		beat(t, s, 12, "n2", 10)
		write(t, s, []awareness.HistoryInterval{
			open(10, 1, "d", "ana", awareness.StatusOnline, 0),
			open(10, 2, "", "ana", awareness.StatusOnline, 0),
			open(10, 3, "d", "bo", awareness.StatusOnline, 20), // after the run's last beat
			closed(10, 4, "d", "cy", awareness.StatusOnline, 0, 5),
			open(11, 1, "d", "dee", awareness.StatusOnline, 0),
			open(12, 1, "d", "eve", awareness.StatusOnline, 0),
			open(12, 2, "", "eve", awareness.StatusOnline, 0),
		})
		ctx := context.Background()
		closeDead := func(node string, want int64) {
			t.Helper()
			if n, err := s.CloseDeadRuns(ctx, node, at(30), 0); err != nil || n != want {
				t.Fatalf("CloseDeadRuns(%q) = %d, %v; want %d", node, n, err, want)
			}
		}
		closeDead("n1", 3)
		wantDoc(t, s, "d", 0, 60,
			"10/1 d ana  online 0-10",
			"10/4 d cy  online 0-5",
			"11/1 d dee  online 0-…",
			"12/1 d eve  online 0-…",
			"10/3 d bo  online 20-20")
		wantUser(t, s, "ana", 0, 60, "10/2  ana  online 0-10")
		closeDead("n1", 0)

		// The run was only late: its own end comes after CloseDeadRuns'.
		write(t, s, nil, end(10, 1, "d", 40))
		wantDoc(t, s, "d", 0, 60,
			"10/1 d ana  online 0-10",
			"10/4 d cy  online 0-5",
			"11/1 d dee  online 0-…",
			"12/1 d eve  online 0-…",
			"10/3 d bo  online 20-20")

		// The caller's own run is never taken for dead.
		if n, err := s.CloseDeadRuns(ctx, "", at(30), 12); err != nil || n != 0 {
			t.Fatalf("CloseDeadRuns keeping run 12 = %d, %v; want 0", n, err)
		}
		closeDead("", 2)
		wantUser(t, s, "eve", 0, 60, "12/2  eve  online 0-10")
		wantDoc(t, s, "d", 0, 60,
			"10/1 d ana  online 0-10",
			"10/4 d cy  online 0-5",
			"11/1 d dee  online 0-…",
			"12/1 d eve  online 0-10",
			"10/3 d bo  online 20-20")
		closeDead("", 0)
	})
}

// Times are kept to the millisecond: an interval that began a moment
// before its run's last beat, within the same millisecond, still ends
// after it began when the run is taken for dead.
func TestCloseDeadRunsEndsAnIntervalAfterItBeganWithinAMillisecond(t *testing.T) {
	eachStore(t, func(t *testing.T, s store) {
		ctx := context.Background()
		from := t0.Add(200 * time.Microsecond)
		write(t, s, []awareness.HistoryInterval{{Run: 10, Seq: 1, Doc: "d", User: "ana", Status: awareness.StatusOnline, From: from}})
		if err := s.BeatHistory(ctx, 10, "n1", from.Add(500*time.Microsecond)); err != nil {
			t.Fatal(err)
		}
		if n, err := s.CloseDeadRuns(ctx, "", at(1), 0); err != nil || n != 1 {
			t.Fatalf("CloseDeadRuns = %d, %v; want 1", n, err)
		}
		got, err := s.DocIntervals(ctx, "d", at(-1), at(1), 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || !got[0].To.After(got[0].From) {
			t.Fatalf("after its run died: %+v, want one interval that ends after it began", got)
		}
	})
}

// PruneHistory deletes the intervals that ended before its cutoff, at
// most limit per call, keeps open and later ones, and forgets the runs
// with nothing open that have not beaten since.
func TestPruneDeletesOldClosedIntervalsInBatches(t *testing.T) {
	eachStore(t, func(t *testing.T, s store) {
		var batch []awareness.HistoryInterval
		for i := range 5 {
			batch = append(batch, closed(20, int64(i), "d", "ana", awareness.StatusOnline, -300+10*i, -290+10*i))
		}
		for i := range 4 {
			batch = append(batch, closed(20, int64(10+i), "", "ana", awareness.StatusOnline, -300+10*i, -290+10*i))
		}
		batch = append(batch,
			closed(20, 20, "d", "bo", awareness.StatusOnline, -10, -5), // began and ended just before the cutoff
			closed(20, 21, "d", "bo", awareness.StatusAway, -30, 10),   // ended after it
			closed(20, 22, "", "bo", awareness.StatusAway, -30, 0),     // ended as it
			open(21, 1, "d", "cy", awareness.StatusOnline, -200),
		)
		write(t, s, batch)
		beat(t, s, 20, "n1", -100)
		beat(t, s, 21, "n1", -100) // its open interval keeps it
		beat(t, s, 22, "n2", -100) // nothing of it was written
		beat(t, s, 23, "n2", 60)   // beat after the cutoff

		ctx := context.Background()
		for _, want := range []int64{4, 4, 2, 0} {
			if n, err := s.PruneHistory(ctx, at(0), 4); err != nil || n != want {
				t.Fatalf("PruneHistory = %d, %v; want %d", n, err, want)
			}
		}
		wantDoc(t, s, "d", -200, 60, "21/1 d cy  online -200-…", "20/21 d bo  away -30-10")
		wantUser(t, s, "ana", -360, 60)
		wantUser(t, s, "bo", -60, 60, "20/22  bo  away -30-0")
		if got, want := runIDs(t, s), []int64{21, 23}; !slices.Equal(got, want) {
			t.Fatalf("runs kept: %v, want %v", got, want)
		}
	})
}

// runIDs lists the runs table, which no method reads.
func runIDs(t *testing.T, s store) []int64 {
	t.Helper()
	const q = `SELECT run FROM ` + runsTable + ` ORDER BY run`
	var r rows
	switch s := s.(type) {
	case *SQLite:
		sr, err := s.db.Query(q)
		if err != nil {
			t.Fatal(err)
		}
		defer sr.Close()
		r = sr
	case *Postgres:
		pr, err := s.pool.Query(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		defer pr.Close()
		r = pr
	}
	var ids []int64
	for r.Next() {
		var id int64
		if err := r.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

func TestCloseTwice(t *testing.T) {
	eachStore(t, func(t *testing.T, s store) {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("a second Close: %v", err)
		}
	})
}

func TestSQLiteKeepsHistoryAcrossAReopen(t *testing.T) {
	dir := t.TempDir()
	s := openSQLite(t, dir)
	write(t, s, []awareness.HistoryInterval{open(30, 1, "d", "ana", awareness.StatusOnline, 0)})
	s.Close()
	wantDoc(t, openSQLite(t, dir), "d", 0, 60, "30/1 d ana  online 0-…")
}

// usersTableWithoutNames is the users table as stores made it before
// it kept names.
const usersTableWithoutNames = `CREATE TABLE ` + usersTable + ` (run bigint NOT NULL, seq bigint NOT NULL,
	user_id text NOT NULL, status text NOT NULL, from_ms bigint NOT NULL, to_ms bigint)`

// A users table made before it kept names gains them: its rows read
// with no name, the new ones with theirs, and it opens again unchanged.
func TestAUsersTableWithoutNamesGainsThem(t *testing.T) {
	check := func(t *testing.T, s store) {
		named := open(2, 1, "", "bo", awareness.StatusOnline, 10)
		named.Name = "Bo"
		write(t, s, []awareness.HistoryInterval{named})
		wantUser(t, s, "ana", 0, 60, "1/1  ana  away 5-…")
		wantUser(t, s, "bo", 0, 60, "2/1  bo Bo online 10-…")
	}
	t.Run("SQLite", func(t *testing.T) {
		dir := t.TempDir()
		db, err := sql.Open("sqlite3", filepath.Join(dir, "presence-history.sqlite"))
		if err != nil {
			t.Fatal(err)
		}
		for _, stmt := range []string{usersTableWithoutNames,
			`INSERT INTO ` + usersTable + ` VALUES (1, 1, 'ana', 'away', ` + fmt.Sprint(at(5).UnixMilli()) + `, NULL)`} {
			if _, err := db.Exec(stmt); err != nil {
				t.Fatal(err)
			}
		}
		db.Close()
		s := openSQLite(t, dir)
		check(t, s)
		s.Close()
		wantUser(t, openSQLite(t, dir), "bo", 0, 60, "2/1  bo Bo online 10-…")
	})
	t.Run("Postgres", func(t *testing.T) {
		url := testenv.PostgresSchema(t)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		for _, stmt := range []string{usersTableWithoutNames,
			`INSERT INTO ` + usersTable + ` VALUES (1, 1, 'ana', 'away', ` + fmt.Sprint(at(5).UnixMilli()) + `, NULL)`} {
			if _, err := c.Exec(ctx, stmt); err != nil {
				t.Fatal(err)
			}
		}
		c.Close(ctx)
		s := openPostgres(t, url)
		check(t, s)
		s.Close()
		wantUser(t, openPostgres(t, url), "bo", 0, 60, "2/1  bo Bo online 10-…")
	})
}

// Nodes starting together on an empty database make the tables once.
func TestPostgresOpensConcurrently(t *testing.T) {
	url := testenv.PostgresSchema(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			s, err := OpenPostgres(ctx, url)
			if err == nil {
				s.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}
