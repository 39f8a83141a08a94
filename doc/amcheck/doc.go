// Package amcheck holds automerge input checks: it reads automerge's
// change format in Go, without automerge.
//
// Tandem relays changes from untrusted clients to stock clients, which
// apply them with automerge's core, and applies them itself with
// automerge-go only in the copies it keeps to read a document's text.
// automerge-go calls automerge-rs 0.5 through cgo, built with
// panic=abort, so any Rust panic on bad input (an out-of-range actor
// index, an op counter past u32, a map key in a list object) ends the
// whole process; and a change of a hundred bytes can hold a run-length
// run that expands to a million operations and hundreds of megabytes.
// ParseChange reads a change chunk the way automerge's decoder does,
// refuses what that decoder would choke on or read inconsistently
// (ErrMalformed), and measures what the change expands to, so that
// Limits can be enforced before automerge sees it (ErrTooLarge).
//
// It is stricter than automerge where automerge's own encoder never
// writes what automerge's decoder would still accept (for example, a
// column with more rows than the change has ops, or an unknown column):
// whatever ParseChange accepts, automerge loads.
//
// Counting is arithmetic: a run of 10^12 rows costs one step, and parsing
// allocates no more than a small multiple of the input (plus, for a
// compressed chunk, its inflated size, capped by the limits).
//
// What it cannot see is the document: whether the objects and elements
// an op refers to exist and have the right type, whether an actor's
// sequence numbers and op counters continue the document's, whether the
// dependencies are known. Callers check those against their own record
// of the document. One of them aborts automerge outright: a map key put
// into a list or text object made by an earlier change (or a list
// position into a map). With Limits.ListOps a caller gets every op
// (Change.OpList) to check against its record; with Limits.Canonical a
// change must be encoded as automerge encodes it, or a document saved
// with it does not load.
//
// Sync messages: automerge's sync message decoder neither checks a
// change's checksum nor inflates compressed chunks, so check each entry
// of a sync message's changes list with ParseSyncChange.
//
// All functions are pure and safe for concurrent use by any number of
// goroutines; results do not alias the input.
package amcheck
