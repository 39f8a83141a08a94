// Package guard admits changes into a document: the check every change a
// client sends passes before a node stores it or relays it. Every byte it
// admits reaches stock clients, which apply it with automerge's core; a
// change that core cannot apply (an op naming what does not exist, a map
// key put into a list) would break the document for every client that
// loads it, and a few bytes can expand into gigabytes. So before a change
// enters a document's log the guard
//   - reads every change of the message (package amcheck): checksum,
//     columns (as automerge's encoder writes them, or a saved document
//     would not load again), and its size after run-length expansion,
//     against the Limits (limits.go);
//   - replays the order in which automerge will apply the changes, each
//     after what it depends on (waiting.go: inOrder), checking that an
//     actor's changes come with contiguous sequence numbers and rising op
//     counters (guard.go), and that every op names only what the document
//     holds in the change's past (refcheck.go, over the index of what the
//     document holds in refindex.go, with the order of list elements in
//     listorder.go).
//
// What the guard refuses leaves the document untouched. Changes that wait
// for a dependency wait in the guard (waiting.go), one queue for a
// client's changes and those from the store or another node, which were
// checked where they were taken and are ordered here, not checked again
// (Ledger.AdmitStored). What it refuses is remembered by hash, node-wide
// and bounded, so that a client sending it again is refused without a
// second check (refused.go).
//
// A Ledger is one document's account, guarded by its owner's lock; the
// Refusals are safe for concurrent use. cmd/tandem/ARCHITECTURE.md says
// how the check is known to be complete.
package guard
