// Package store keeps Tandem's documents durable: the Store interface the
// document hub (package doc) writes accepted changes to and loads
// documents from, and its implementations.
//
// A document is stored as the bytes of its changes, never as content: an
// optional snapshot (the whole change log at a compaction) and the chunks
// appended after it, each changes one after another; beside them the
// document saved as automerge saves one, for new readers, and the mention
// journals of each node (store.go). A store reads none of these bytes
// itself. Which stored chunks a compaction replaces is the caller's to
// say (Write.Covers): in a cluster another node may have stored changes
// the compacting node has not seen, and those stay.
//
// Implementations: Bolt, the embedded store, one bbolt file in the data
// directory (bolt.go); Postgres, shared by the nodes of a cluster, with its
// schema migrations (postgres.go); and Down, for tests, a Store whose
// writes fail while it is set down (down.go).
//
// Concurrency: every Store is safe for concurrent use, and Close is safe
// to call twice. Write calls Write.Covers inside its transaction, once per
// stored chunk; it must not block, nor take a lock its caller may hold
// while it waits for the write.
//
// This package imports no other package of Tandem: doc, above it, names
// it in its Config, and cmd/tandem opens the store the node is configured
// with.
package store
