// Package webhook tells an application's backend what happens in Tandem:
// it posts events to the endpoints the node is given, signed as Standard
// Webhooks 1.0 asks (signature.go), stored before they are sent and
// delivered at least once.
//
// The events (event.go): document.created and document.changed (each
// document's changes folded over a debounce with a maximum wait: who
// changed it and its heads, never its content), presence.entered and
// presence.left (a user's first tab into a document and last tab out of
// it, across the cluster), user.status (online, away, offline across the
// cluster) and notification.created.
//
// Where they come from: a doc.Observer per room (observer.go) notes the
// changes of local peers; the presence recorder's writes
// (awareness.HistoryStore, through Tee: presence.go) say when a user's
// tabs on this node enter and leave a document and change status; the
// notification pipeline calls NotificationStored in the transaction that
// stores each notification.
//
// Where they are kept: in the notification pipeline's database (web/notify:
// PostgreSQL in a cluster, SQLite alone) and its River queue, the node's
// one durable queue. Each event is decided in one transaction that also
// queues its deliveries, one River job per endpoint, on a River queue of
// the endpoint's own, so that a slow endpoint holds up only its own
// deliveries. One node decides each event, by the database: a document's
// open debounce window is one row (changes.go), deleted by whichever node
// closes it; a user's presence in a document is the rows of every node's
// recorder runs, counted under one lock (presence.go); a document is
// created once (a unique row).
//
// Concurrency: Hooks methods are safe for concurrent use. The room
// observers' methods are called under a room's lock and only update a
// map under a mutex (or drop, counted, past the bounds); Tee hands the
// recorder's batches to a bounded queue without waiting. Everything that
// touches the database or the network runs on the Hooks' own goroutines
// (Run) and River's workers; Config.Author is called there too, with no
// lock held, and may take presence's lock.
package webhook
