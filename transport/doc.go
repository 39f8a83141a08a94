// Package transport carries the automerge-repo protocol over WebSocket.
//
// A Server upgrades HTTP requests to WebSocket connections. Each connection
// has a reader goroutine for its life, which decodes frames and hands them
// to the document layer (the Documents interface) and to presence, and a
// writer goroutine only while frames wait to be written (writer.go): it
// alone writes to the socket, every waiting frame in one write. Pings run
// on a timer. Outbound frames wait in a queue bounded in frames and in
// bytes (Config.SendQueue, Config.SendQueueBytes); a peer too slow to
// drain it is disconnected with the reason "slow consumer", because
// document sync must never drop a message.
//
// Two subpackages: wire is the wire format (wire/PROTOCOL.md says what
// Tandem accepts and sends), and redisbus joins nodes into a cluster over
// Redis (redisbus/BUS.md is the protocol between nodes). The Server sees the
// cluster only through the Bus and Claims interfaces.
//
// One record per node says which connection is in which document
// (members.go): it alone tells presence, the document layer and the bus,
// and routes each ephemeral once, to presence or to the document's relay.
// A change the document layer refuses costs its sender that document on
// that connection, not the connection (refused.go).
//
// Concurrency: Server methods are safe for concurrent use. The doc.Peer
// methods of a connection never block: they encode and queue a frame, or
// close the connection when its queue is full.
package transport
