// Package transport carries the automerge-repo protocol over WebSocket.
//
// A Server upgrades HTTP requests to WebSocket connections. A connection
// has a reader goroutine while there is something to read: it decodes
// frames (frames.go hands gorilla one frame at a time) and hands them to
// the document layer (the Documents interface) and to presence; with
// nothing buffered, it gives its reader up and waits on the node's epoll
// set (park.go, Linux; elsewhere the reader stays). The poller reads a
// parked connection's socket itself, takes its pongs and drops the
// messages the client passes back, and starts a reader only for the
// rest. A writer goroutine runs only while frames wait to be written
// (writer.go): it alone writes to the socket, every waiting frame in one
// write. Pings run on a timer.
//
// Document sync, errors and relayed ephemerals wait in the lossless lane
// (writer.go), in order and bounded in frames and in bytes
// (Config.SendQueue, Config.SendQueueBytes); a peer too slow to drain it
// is disconnected as a slow consumer (4001), because document sync must
// never drop a message. Presence waits in its documents' feeds, which
// presence owns (awareness/feed.go): the writer takes from them when it is
// about to write, after the lossless lane (presence.go), so a burst of
// cursors can neither cut a peer's sync nor close its connection.
//
// What the readers hold of inbound messages is charged to the node's read
// budget as it arrives, before it is held (readbudget.go,
// Config.ReadBudgetBytes), and a message must arrive whole within
// Config.MessageReadTimeout: a peer that starts a large frame and drips
// or stops it holds what it sent, within the budget, until then.
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
