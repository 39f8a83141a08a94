// Package notify turns events (mentions in documents, an application's own
// events) into notifications: events go through a durable River queue, a
// worker folds the events with the same recipient, kind and document over
// a window into one notification, stores it, and only then pushes it to the
// recipient's live connections on every node.
//
// The store is the source of truth: PostgreSQL when the node has one, an
// SQLite file under the data directory otherwise. The queue lives in the
// same database, so that consuming an event, storing a notification and
// enqueueing its push commit together or not at all.
//
// The queue is the node's one River client: another component's jobs go
// on it (Config.Jobs adds their workers and queues; Service.Queue inserts
// them in that component's own transactions), since the client that
// leads a database rescues every kind of job in it. Config.Stored is
// called in the transaction that stores each notification, so what it
// queues is queued if and only if the notification is stored (package
// web/webhook's notification.created).
//
// The web package serves its HTTP API and event streams; a cluster passes
// a Pusher that carries pushes between nodes (transport/redisbus).
package notify
