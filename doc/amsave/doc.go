// Package amsave saves a document's changes as automerge saves a document
// (one document chunk), in a worker process.
//
// A node holds a document as its changes and never runs automerge on the
// path of a message. Automerge 0.6 and later load a saved document several
// times faster than the same changes one by one, so a peer that has
// nothing is better sent the saved form (amsync.Log.SetSaved). Making it
// needs automerge, and automerge (C and Rust under cgo) can abort the
// whole process on input it trips over, or take memory the node does not
// count. So the saving runs in a process of its own: the node's own binary
// started again with TANDEM_WORKER=save (ServeIfWorker, first thing in
// main), which reads the changes on its stdin, loads them with
// automerge-go, checks that the saved document loads back to the same
// heads, writes it on its stdout and exits. Its memory is bounded
// (Config.MemoryBytes), the kernel's out-of-memory killer picks it before
// the node, it runs at the lowest priority, it dies with the node, and a
// job is bounded in time. One job runs at a time, and the jobs take at
// most a quarter of a core over time (Config.Share): the next waits three
// times as long as the last took. A worker that fails, for any reason,
// fails that job only.
//
// Files: amsave.go, the Saver (the node's side) and the worker's job.
package amsave
