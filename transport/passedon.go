package transport

import (
	"bytes"

	"github.com/tandemhq/tandem/transport/wire"
)

// What stock clients pass on. automerge-repo's Repo sends every ephemeral
// it receives on to its other peers of the document, under the original
// sender; a client's one peer is the server, which sent it. So a stock
// client sends back one message for each ephemeral it is sent, presence
// included, once it has taken it (Tandem's JS client's network adapter
// keeps them in). The server sent them and drops them; they are most of
// what it reads from a busy room's stock clients, and they tell it how
// far each has read (presence.go paces presence by them).
//
// A connection is owed as many as it was sent (passOns): each of those
// is recognized without decoding it (wire.PassedOn) and dropped before
// anything else is done with it: by the reader, or by the poller for a
// parked connection, as it finds the frame whole in its buffer, before
// gorilla reads it (frameConn.frame, frameConn.drain); by
// handle for a message that is not read so. It does not count against
// the connection's message rate, since it is the server's own traffic
// coming back, not the client's. Past what it is owed, a message in
// another sender's name is read as any other message, rate limit and
// all (conn.foreign).

// maxPassOns bounds what a connection is owed: a client that passes
// nothing on is owed no more than this.
const maxPassOns = 1 << 14

// owePassOns notes that the connection was sent n ephemerals, which a
// stock client passes back.
func (c *conn) owePassOns(n int) {
	if c.passOns.Add(int64(n)) > maxPassOns {
		c.passOns.Store(maxPassOns)
	}
}

// owePresence notes that the connection was sent n presence messages,
// under the presence layer's relay session: the debt its pacing reads
// (presence.go). Other ephemerals are left out of it: a stock client does
// not pass back one it has had before or one in the server's name, and
// any member may send those.
func (c *conn) owePresence(n int) {
	c.owePassOns(n)
	if c.presOwed.Add(int64(n)) > maxPassOns {
		c.presOwed.Store(maxPassOns)
	}
}

// presencePassedOn takes a passed-back presence message off the debt, and
// releases what waits for it once the client has passed back all it was
// last sent.
func (c *conn) presencePassedOn() {
	left := c.presOwed.Add(-1)
	if left < 0 {
		c.presOwed.Add(1)
		return
	}
	if !c.passing.Load() {
		c.passing.Store(true)
	}
	if c.held.Load() && left <= c.releaseAt.Load() {
		c.release()
	}
}

// owed implements controlHandler: the connection was sent ephemerals it
// may pass back.
func (c *conn) owed() bool { return c.passOns.Load() > 0 }

// passedOn implements controlHandler: it reports whether a binary message
// is an ephemeral the connection was sent and passes back, and then drops
// it. The reader (frameConn.frame) asks it of every small message read
// whole between messages, before gorilla reads it; handle, of the others.
func (c *conn) passedOn(data []byte) bool {
	if c.peerID == "" || c.passOns.Load() <= 0 {
		return false
	}
	session, ok := wire.PassedOn(data, c.peerID)
	if !ok {
		return false
	}
	if c.passOns.Add(-1) < 0 {
		c.passOns.Add(1)
		return false
	}
	if c.srv.relay != "" && bytes.HasPrefix(session, []byte(c.srv.relay)) {
		c.presencePassedOn()
	}
	c.srv.metrics.receivedEphemeral.Inc()
	c.srv.metrics.droppedForeign.Inc()
	return true
}
