// Package amsync speaks automerge's sync protocol (message versions 1 and 2) in
// Go, over a document's change log rather than its content.
//
// A sync server needs no document to sync one: the protocol works on
// change hashes, their dependencies and bloom filters, and changes travel
// as the bytes they were made as. A Log holds a document as its changes:
// per change its hash, its dependencies and its bytes, in an order in
// which each change comes after its dependencies, and the heads. Of a
// change written as automerge writes one it keeps only what follows the
// dependencies, and puts the rest back, byte for byte, when the change
// goes out. A State is
// the sync state kept with one remote peer; Receive reads its message
// (after the caller has added whatever changes it admits from it to the
// Log) and Generate makes the next message for it, as automerge's
// generate_sync_message would, with one difference: a peer that has not
// answered a message bringing it changes is sent nothing new until it
// answers (or the answer is overdue), so each peer is paced by its own
// reading, and its next message carries everything new since; and, with
// State.Spacing, a message that brings a peer changes goes at least that
// long after the one before (the first after a quiet spell goes at once,
// or State.Gather later with the changes that came with it), so a peer's
// messages are the spacing or its round trip apart, whichever is longer.
//
// What amsync does not do is read a change's operations or decide whether
// a change may be admitted: callers parse and check changes and hand the
// Log their hash, dependencies and bytes.
//
// Bloom filters are bit for bit automerge's (10 bits per entry, 7
// probes). Hashes in heads, need and lastSync are sorted by their bytes,
// as automerge sorts them. Every message ends with a flags section
// saying it reads version 2 messages (and nothing else: not sync reset),
// as automerge 0.6 and later write and read one; automerge 0.5 reads past
// it. A peer whose own messages carry one (automerge 0.6 and later) is
// sent version 2 messages (0x43), its changes in one entry, change chunks
// one after another (see Outgoing.Joined), which it reads as automerge's
// load_incremental does; a peer that sends none (automerge 0.5) gets
// version 1, one change per entry. Such a peer sends back version 2
// messages: all its changes in one entry, and, to a server that has
// nothing of the document or lacks more than a third of it, the whole
// document saved (one document chunk). Decode splits each entry into its
// chunks; a document chunk is the caller's to read into its changes
// (doc/amdoc's Load) before they are checked and added like any others.
//
// A Log and the Peers made for it are not safe for concurrent use: one
// owner (a document's room, under its lock) calls them.
package amsync
