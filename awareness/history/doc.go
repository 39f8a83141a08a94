// Package history keeps presence history (awareness.HistoryStore): each
// stretch of time a user was present in a document, online or away, and
// each stretch of a user's overall status, as the intervals the hubs'
// recorders write, and reads them back for a document or a user over a
// window of time. Merge and Hourly turn the raw intervals into what users
// see: one interval per stretch of one status of each user, across runs,
// nodes and tabs, and per-hour counts.
//
// There are two stores with the same schema and, where the databases
// agree, the same SQL (queries.go): SQLite, a file of the node's own in
// its data directory (presence-history.sqlite), and Postgres, shared by
// every node of a cluster. Times are stored as Unix milliseconds (bigint)
// in both, so the SQL is portable: rounded down, but for a run's beat,
// rounded up (an interval that began before a beat ends after it began
// if ended there).
//
// Schema:
//
//	tandem_presence_docs  (run, seq, doc_id, user_id, name, status, from_ms, to_ms)
//	tandem_presence_users (run, seq, user_id, status, from_ms, to_ms, name)
//	tandem_presence_runs  (run PRIMARY KEY, node, beat_ms)
//
// to_ms is NULL while an interval is open. Each interval table has three
// indexes, one per question asked of it:
//
//   - (doc_id, from_ms), (user_id, from_ms) for the users table: the reads.
//     No interval is longer than awareness.MaxHistorySpan, so the
//     intervals overlapping a window are among those that began at most
//     that long before it: the read is a range of this index.
//   - UNIQUE (run, seq) WHERE to_ms IS NULL: closing an interval, and
//     ending a dead run's intervals, touch only open rows, which are few;
//     the index stays small, and a run opening the same interval twice
//     is refused. No key over the closed rows is needed.
//   - from_ms alone, for pruning: PostgreSQL's is a BRIN index, since rows
//     arrive nearly in from_ms order; SQLite's is a b-tree.
//
// Each run (one hub process) beats into the runs table. CloseDeadRuns
// ends the open intervals of the runs that stopped beating at their last
// beat; a run beats before each write, after every interval in it began,
// so that this reaches them and ends each after it began. PruneHistory
// deletes old closed intervals in bounded batches, and the rows of runs
// that have none open and have not beaten since.
//
// Concurrency: both stores are safe for concurrent use; Merge and Hourly
// are pure functions.
package history
