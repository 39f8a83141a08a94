// Package doc holds Tandem's documents: one room per automerge document with
// the peers that sync it, automerge's sync protocol between them, and the
// storage that makes accepted changes durable.
//
// A room holds its document as a change log (package amsync): every
// change's hash, dependencies and bytes, not its content. It speaks
// automerge's sync protocol in Go against that log, with one sync state
// per member (amsync.State), and relays changes as the bytes they came in.
// No call into automerge lies on the path of a sync message, and the
// content is not kept: what a layer above needs of it, it follows from
// the changes itself, as the room's Observer (below). automerge-go reads
// one thing in the node: a document an earlier version of Tandem stored as
// automerge saved it, once (changes.go). Large documents are saved for
// new readers, who load the saved form several times faster than the
// changes, in Go off every message's path (saved.go, package amdoc).
//
// A Hub owns the rooms. It loads a document from its store.Store (package
// doc/store: the embedded bbolt file or PostgreSQL) on first use,
// writes accepted changes back as soon as the write before them is done,
// all the rooms that changed meanwhile in one batch, and names no change to
// any peer or node before it is stored (durable.go); a failed write is
// tried again every Config.FlushInterval. A room leaves memory
// Config.EvictAfter after its last peer.
//
// Outside the sync protocol (the REST API), Read returns a document's
// changes, whole, at given heads or since them, and Write applies a
// backend's changes as a server-side peer's: through Sync, so that the
// guard, the observer, the fan-out and the cluster treat them as any
// peer's, returning once the store holds them (read.go, write.go).
//
// Concurrency: Hub methods are safe for concurrent use. Locks are per room,
// not one for the hub (as presence has): one document's work must not hold
// up another's. A room has three, taken in this order: catchMu (one
// catch-up from the store at a time), applyMu (whoever changes the
// document holds it; the room's observer works under it alone, and a
// message's changes are read and checked under it alone, so that a large
// one holds up the document's next change, not its room) and mu (the
// log, the members and their sync states). Acknowledgements, fan-outs
// and ephemerals take mu alone, briefly; a sync message is parsed before
// any lock. Peer methods are called with mu held and must not block: they
// queue the message or drop the peer.
//
// A room tells its Observer (observer.go; Config.Observe makes one per
// room) where it changes: before changes apply (under applyMu alone, so
// that slow work there holds up the next change, not the room), the
// changes applied, a peer left, the document loaded with the journals
// stored with it, the journal each write carries in its transaction and
// the write's outcome, and whether the room may leave memory. The
// observer asks the room in turn through a Room: to hold the document
// still while it reads (applyMu), to be written. Package doc/mention's
// tracker follows the mentions in each document's text that way; doc
// knows nothing of mentions.
//
// Fan-out (fanout.go): every member is sent what its sync state says it
// lacks, one message made and encoded once for the members that get the
// same; a member that has not answered the message that last brought it
// changes is sent nothing until it answers or amsync.AnswerWait passes
// (twice its last answer's time if longer), then everything new at once.
//
// A peer that says it has nothing (a request, or a sync reset) is sent the
// whole document once (saved, if it runs automerge 0.6 or later and the
// document is large: saved.go); until it answers that copy, asking again gets no
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
// stored, other nodes' changes come back through ReceiveRemote, and the heads
// exchange (AnnounceHeads) repairs what a lost message missed. The bus
// that carries these messages sees only bytes. A room that had a gap in
// what the bus carried catches up from the store (replica.go), which in a
// cluster is PostgreSQL, shared by the nodes.
//
// Changes enter the log by one way (apply.go), from a local peer, another
// node, a catch-up or the load: package guard orders them and checks a
// client's (their encoding, the limits, and every reference each op makes
// against the document), so that nothing is stored or relayed that a
// stock client cannot apply; what waits for a dependency waits there. A
// change from the store or another node is stored already and is not
// written again.
//
// This package knows nothing of WebSocket or HTTP; package transport
// adapts sockets to the Peer interface.
package doc
