// Package transport carries the automerge-repo protocol over WebSocket.
//
// A Server upgrades HTTP requests to WebSocket connections. Each connection
// has exactly two goroutines: a reader that decodes frames and hands them to
// the document layer (the Documents interface), and a writer that alone
// writes to the socket and sends the liveness pings. Outbound frames wait in
// a bounded queue; a peer too slow to drain it is disconnected with the
// reason "slow consumer", because document sync must never drop a message.
//
// RedisBus joins nodes into a cluster: it carries accepted changes and
// presence between the nodes that watch a document, node liveness, and
// user statuses, over Redis Pub/Sub and keys with TTLs (bus_redis.go),
// asks the other nodes for a document this node lacks (find_redis.go), and
// ties each authenticated connection's peer id to its user across the
// cluster (claims_redis.go).
//
// The wire format lives in the subpackage wire; its PROTOCOL.md says what
// Tandem accepts and sends.
//
// Concurrency: Server methods are safe for concurrent use. The doc.Peer
// methods of a connection never block: they encode and queue a frame, or
// close the connection when its queue is full.
package transport
