// Package doc holds Tandem's documents: one room per automerge document with
// the peers that sync it, the automerge sync loop between them, and the
// storage that makes accepted changes durable.
//
// A Hub owns the rooms. It loads a document from its Store on first use,
// writes accepted changes back as soon as the write before them is done,
// all the rooms that changed meanwhile in one batch, and names no change to
// any peer or node before it is stored (durable.go); a failed write is
// tried again every Config.FlushInterval. A room leaves memory
// Config.EvictAfter after its last peer.
//
// Concurrency: Hub methods are safe for concurrent use. Locks are per room,
// not one for the hub (as presence has): automerge's work is slow, and one
// document's must not hold up another's. A room has four, taken in this
// order: catchMu (one catch-up from the store at a time), applyMu (whoever
// changes the document holds it, across the sandbox rehearsal), handMu
// (one hand-over of mention reports at a time) and mu (the automerge
// document, the members and their sync states). Acknowledgements and
// fan-outs take mu alone, briefly; a sync message is parsed before any
// lock. Peer methods are called with mu held and must not block: they
// queue the message or drop the peer.
//
// Fan-out (fanout.go): peers the room knows to stand at given heads are
// served without automerge (their acknowledgements need no answer; a
// change reaches them as one message built once per group at the same
// heads), and under sustained change fan-outs are batched per
// Config.SyncWindow.
//
// A peer that says it has nothing (a request, or a sync reset) is sent the
// whole document once; until it answers that copy, asking again gets no
// second one (member.repeats in room.go), so a peer that never reads
// cannot have the document queued for it once per request.
//
// A request for a document the room lacks is not answered doc-unavailable
// at once: the requester waits, a member of the room, until its grace
// window has passed and the document is not on its way, not in the store
// and (through a Finder) on no other node (lookup.go).
//
// In a cluster the hub speaks the document protocol between nodes
// (cluster.go): accepted changes go out through a Cluster as they are
// stored, other nodes' changes come back through Receive, and the heads
// exchange (AnnounceHeads) repairs what a lost message missed. The bus
// that carries these messages sees only bytes. A room that had a gap in
// what the bus carried catches up from the store (replica.go). Stores: the
// embedded BoltStore and the shared PostgresStore.
//
// The guard (guard.go) checks a client's changes before automerge sees
// them: their encoding, the limits, and every reference each op makes
// against the document (refcheck.go, over the index in refindex.go, with
// the order of list elements in listorder.go). Changes that wait for a
// dependency wait in the guard (waiting.go), not in automerge. The sandbox
// (sandbox.go) then rehearses every message carrying changes in a worker
// process before the room applies it, so a fault costs a worker, not the
// node. cmd/tandem/ARCHITECTURE.md says why both, and how the check is
// known to be complete.
// What it refuses is remembered by hash, node-wide and bounded, so a
// client sending it again is refused without a second check (refused.go).
// A compaction's snapshot is loaded back before it replaces the chunks it
// covers (durable.go).
//
// This package knows nothing of WebSocket or HTTP; package transport
// adapts sockets to the Peer interface.
package doc
