// Package amdoc saves a document as automerge saves one, in Go: from the
// changes of a log, one document chunk, which automerge 0.6 and later
// (what automerge-repo clients run) load several times faster than the
// same changes one by one.
//
// A saved document holds ops, not changes: every op of every change, each
// object's together (the root, then the others in the order of their IDs),
// a map's by key, a list's or text's in the list's order, with the ops
// that overwrote, deleted or incremented each (its successors); and each
// change's actor, sequence number, last op, time, message and
// dependencies. automerge rebuilds every change from that when it loads
// the document and checks their hashes, so the changes must be encoded
// as automerge encodes them (amcheck's Canonical check, which every
// change a client sends passes) and the columns written as automerge
// writes them (columns.go): the op columns Save writes are automerge's own,
// byte for byte (doc/amdoc's tests compare them with stock automerge's).
// The changes may be listed in another order than automerge's, which
// loading does not mind.
//
// Save reads the changes in one pass (read.go; amcheck reads what is not
// a plain change chunk) and allocates, while it runs, about 120 bytes per
// op and 700 per change besides the document it writes (a paste of 1 MiB:
// 120 MB; 100,000 typed changes: 70 MB); it reads at most 2^25 ops and as
// many predecessors, and refuses more before it holds them. A list's
// order comes from its elements' tree (each element after the one it was
// inserted after, later insertions first), walked without recursion. It
// takes time linear in the ops, and n log n for what it sorts: a map's
// keys (ranked once), an element's children, the objects.
//
// Load (load.go) goes the other way: a document chunk read back into its
// changes, each rebuilt as automerge rebuilds it when it loads the
// document, byte for byte, so that their hashes are the document's
// (checked against the heads it states). It is bounded before it holds:
// columns inflate within a byte budget the caller gives, which also
// bounds the changes written, and ops and changes are counted, capped as
// Save caps them and told to the caller before they are held.
//
// View (view.go) reads the same op set for the document's content, as
// automerge's toJS shows it; Change (edit.go) makes a backend's edits
// (put, delete, splice, increment) as one change on it, encoded as
// automerge encodes a change (change.go). Both cost what a save costs.
//
// Save, Load, View and Change are pure functions, safe for concurrent use. A Saver (saver.go)
// runs saves one at a time, paced, and ends one early when its context
// ends.
package amdoc
