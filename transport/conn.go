package transport

import (
	"errors"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tandemhq/tandem/awareness"
	"github.com/tandemhq/tandem/doc"
	"github.com/tandemhq/tandem/internal/auth"
	"github.com/tandemhq/tandem/internal/smallmap"
	"github.com/tandemhq/tandem/transport/wire"
)

// maxSessions bounds the ephemeral clocks a connection remembers. A stock
// client has one session per page load.
const maxSessions = 64

// conn is one WebSocket connection. It implements doc.Peer.
type conn struct {
	srv *Server
	ws  *websocket.Conn
	fr  *frameConn // the socket beneath ws
	ip  string     // the remote address's host, counted in the server's perIP

	// Parking (park.go), guarded by parkMu.
	parkMu  sync.Mutex
	parked  bool // no reader runs: the poller reads, and starts one
	pending bool // the socket had news while a reader ran: it reads before it parks
	// pendingToEnd: that news may leave bytes a short read does not take
	// (ready): the reader reads until the socket has nothing.
	pendingToEnd bool
	pollID       uint64 // the poller's name for it; 0 when not watched
	unwatched    bool   // the socket is closing: it never parks again

	// The writer (writer.go). wmu guards out, feed, feeds, feedsAt, writing,
	// told, closing, shut, shutDone, the timers, movedTo and the lane's
	// bytes below.
	wmu      sync.Mutex
	out      []outFrame        // the lossless lane: frames for the writer, bounded by SendQueue
	feed     *awareness.Feed   // the first presence feed with something for this connection (presence.go)
	feeds    []*awareness.Feed // the others, when more have something
	feedsAt  time.Time         // when feed was set
	deadline time.Time         // the socket's write deadline: the writer's own, unguarded
	leftover *leftover         // what a write at once left for the writer's turn: the writer's own
	writing  bool              // a writer goroutine runs
	told     bool              // PresenceReady took the writer for PresenceFlush (presence.go)
	closing  bool              // the close frame is queued: nothing more is
	shut     bool              // the writer closed the socket
	pinger   *time.Timer
	expiry   *time.Timer
	holdEnd  *time.Timer   // ends a hold the client's passing back has not (presence.go)
	shutDone chan struct{} // made by the first to wait for shut (awaitShut); closed with it
	closed   atomic.Bool   // close ran: the first reason won; read on as the connection's end
	reason   string        // the reason's Name, set once by close (read after awaitShut)
	movedTo  string        // the node a newer connection of this peer is on (claims)

	// The lossless lane's bytes, bounded by SendQueueBytes: the frames
	// in out, and those of the lossless frames the writer took and is
	// writing. Both count in the server's tandem_send_queue_bytes.
	outBytes, writingBytes int64

	// The ephemerals sent that a stock client may pass back: written by
	// whoever sends them, read by the reader (passedon.go).
	passOns atomic.Int64
	// Presence paced by what the client passes back (presence.go):
	// presOwed counts the presence messages of passOns; held is set,
	// under wmu, while presence waits in the feeds for it; passing, while
	// the client passes presence back in time; releaseAt is the presOwed
	// at or under which the presence last written has all come back.
	presOwed, releaseAt atomic.Int64
	held, passing       atomic.Bool

	grant   *auth.Grant // what the token allows; nil when running open
	limiter bucket      // the message rate: excess ephemerals dropped
	flood   bucket      // twice the rate: beyond it the connection closes

	// Owned by the reader goroutine. peerID and batches are set once at
	// join, before the connection is handed to any room, and never change.
	peerID      string
	joinedAs    atomic.Pointer[string]         // peerID, for goroutines other than the reader (logs)
	batches     bool                           // the client takes presence in batches
	unclaim     func()                         // gives up the peer id's cluster claim; nil without one
	docs        smallmap.Map[string, struct{}] // the documents it opened
	refused     refusedDocs                    // the documents refused to it (refused.go)
	clocks      map[string]uint64              // last ephemeral count per sessionId; nil before the first
	lastRateErr int64                          // when the client was last told it is rate limited (monotonic)
}

var (
	_ doc.Peer             = (*conn)(nil)
	_ doc.SharedSender     = (*conn)(nil)
	_ awareness.Peer       = (*conn)(nil)
	_ awareness.Identified = (*conn)(nil)
	_ awareness.Batcher    = (*conn)(nil)
	_ awareness.Flusher    = (*conn)(nil)
)

func newConn(s *Server, ws *websocket.Conn, fr *frameConn, ip string, grant *auth.Grant) *conn {
	c := &conn{srv: s, ws: ws, fr: fr, ip: ip, grant: grant}
	fr.control = c
	fr.initRaw()
	return c
}

// serve runs the connection: the reader in this goroutine, or in one
// the poller starts whenever a parked connection has something to read
// (park.go); a writer whenever there is something to write. Once the
// connection is finished, the server lets it go (Server.connDone).
func (c *conn) serve() {
	c.startTimers()
	c.run(false)
}

// onPing implements controlHandler: the pong goes through the writer.
func (c *conn) onPing(payload []byte) {
	c.push(outFrame{op: websocket.PongMessage, payload: payload})
}

// onPong implements controlHandler: a pong keeps the peer's presence.
func (c *conn) onPong() {
	if p := c.srv.cfg.Presence; p != nil && c.peerID != "" {
		p.Touch(c)
	}
}

// remote is the peer's address, for logs.
func (c *conn) remote() string {
	if a := c.fr.RemoteAddr(); a != nil {
		return a.String()
	}
	return ""
}

// run reads until the connection parks or ends; the reader that sees it
// end finishes it. A reader woken by the poller reads before it may park
// again: the socket has something.
func (c *conn) run(woken bool) {
	r, parked := c.readLoop(woken)
	if parked {
		return
	}
	c.close(r, false)
	c.finish()
}

// finish cleans up after the reader's last read: the connection leaves
// its documents and the server, and gives back a read buffer that still
// holds bytes it will never read (a frame cut short, or frames sent after
// what closed it).
func (c *conn) finish() {
	c.fr.putBuffer()
	c.wmu.Lock()
	movedTo := c.movedTo
	c.wmu.Unlock()
	c.srv.members.leave(c, &c.docs, movedTo)
	if c.unclaim != nil {
		c.unclaim()
	}
	c.srv.forget(c)
	c.awaitShut()
	c.srv.metrics.disconnects.WithLabelValues(c.reason).Inc()
	c.srv.log.Info("connection closed", "peer", c.peerID, "remote", c.remote(), "reason", c.reason)
	c.srv.connDone(c)
}

// readLoop reads and handles messages until the connection ends, or
// until it has nothing to read and parks (reported true).
func (c *conn) readLoop(woken bool) (CloseReason, bool) {
	c.fr.mustRead = woken
	// The size limit is checked as the message is read (readMessage), not
	// by gorilla, which would write a close frame of its own past the
	// writer (writer.go).
	for {
		if c.closed.Load() {
			return CloseReason{}, false // closed already: run's close is a no-op
		}
		parked, err := c.fr.await(c.park)
		if err != nil {
			return readFailure(err), false
		}
		if parked {
			return CloseReason{}, true
		}
		mt, r, err := c.ws.NextReader()
		if err != nil {
			return readFailure(err), false
		}
		data, charged, reason, ok := c.readMessage(r)
		if !ok {
			return reason, false
		}
		c.handle(c.srv.ctx, mt, data) // the server's: the reader does its work itself, so none outlives the connection
		c.srv.budget.release(charged) // what handle keeps of it is a copy (wire.Decode)
	}
}

// silent reports whether the socket has given nothing for three jittered
// ping intervals and the round trip: the peer is gone, or its path is.
func (c *conn) silent() bool {
	return time.Duration(monotonic()-c.fr.lastRead.Load()) > c.srv.cfg.PingInterval*7/2
}

func readFailure(err error) CloseReason {
	var netErr net.Error
	switch {
	case errors.As(err, &netErr) && netErr.Timeout():
		return ReasonPingTimeout
	case websocket.IsCloseError(err, websocket.CloseNormalClosure, websocket.CloseGoingAway, websocket.CloseNoStatusReceived):
		return ReasonClientGone
	default:
		return ReasonReadFailed
	}
}

func (c *conn) sendPeer() {
	c.sendMessage(&wire.Message{
		Type:                    wire.TypePeer,
		PeerMetadata:            &wire.PeerMetadata{StorageID: c.srv.cfg.StorageID},
		SelectedProtocolVersion: wire.ProtocolV1,
	})
}

// ID implements doc.Peer.
func (c *conn) ID() string { return c.peerID }

// Identity implements awareness.Identified: the user the token names.
func (c *conn) Identity() awareness.Identity {
	if c.grant == nil {
		return awareness.Identity{}
	}
	return awareness.Identity{UserID: c.grant.UserID, Name: c.grant.Name, Color: c.grant.Color}
}

// SendSync implements doc.Peer.
func (c *conn) SendSync(documentID string, data []byte) {
	if len(data) == 0 {
		return // stock clients throw on empty data
	}
	c.srv.metrics.syncBytes.WithLabelValues("out").Add(float64(len(data)))
	m := &wire.Message{Type: wire.TypeSync, SenderID: c.srv.cfg.PeerID, DocumentID: documentID, Data: data}
	if len(data) < largeData {
		c.sendMessage(m)
		return
	}
	p, err := wire.Prepare(m)
	if err != nil {
		c.srv.log.Error("encode sync", "err", err)
		return
	}
	c.queueSync(p, len(data))
}

// largeData is the size from which a sync message is written from its
// own bytes, not copied into its frame (wire.Prepared).
const largeData = 16 << 10

// queueSync queues a prepared sync message of n bytes: from largeData on
// its data is written from where it is; a smaller one is copied into its
// frame, which then joins the writer's batches.
func (c *conn) queueSync(p *wire.Prepared, n int) {
	sent := c.srv.metrics.sent.WithLabelValues(wire.TypeSync)
	if n < largeData {
		c.queue(p.Frame(c.peerID), nil, sent)
		return
	}
	head, tail := p.To(c.peerID)
	c.queue(head, tail, sent)
}

// SendSharedSync implements doc.SharedSender: the message is encoded once,
// for the first peer it goes to; the others only get their targetId
// spliced in.
func (c *conn) SendSharedSync(documentID string, s *doc.SharedSync) {
	p, _ := s.Frame.(*wire.Prepared)
	if p == nil {
		var err error
		p, err = wire.Prepare(&wire.Message{Type: wire.TypeSync, SenderID: c.srv.cfg.PeerID, DocumentID: documentID, Data: s.Data})
		if err != nil {
			c.srv.log.Error("encode sync", "err", err)
			return
		}
		s.Frame = p
	}
	c.srv.metrics.syncBytes.WithLabelValues("out").Add(float64(len(s.Data)))
	c.queueSync(p, len(s.Data))
}

// SendDocUnavailable implements doc.Peer.
func (c *conn) SendDocUnavailable(documentID string) {
	c.sendMessage(&wire.Message{Type: wire.TypeDocUnavailable, DocumentID: documentID})
}

// SendEphemeral implements doc.Peer: an ephemeral for a reader that is
// behind is dropped, never its connection (pushEphemeral).
func (c *conn) SendEphemeral(documentID string, e doc.Ephemeral) {
	b := c.encode(&wire.Message{
		Type: wire.TypeEphemeral, SenderID: e.SenderID, DocumentID: documentID,
		SessionID: e.SessionID, Count: e.Count, Data: e.Data,
	})
	if b != nil && c.pushEphemeral(b) {
		c.srv.metrics.sentEphemeral.Inc()
		c.owePassOns(1)
	}
}

// sendMessage addresses m to this peer, encodes it and queues it.
func (c *conn) sendMessage(m *wire.Message) {
	if b := c.encode(m); b != nil {
		c.queue(b, nil, c.srv.metrics.sent.WithLabelValues(m.Type))
	}
}

// encode addresses m to this peer and encodes it; nil if it cannot be.
func (c *conn) encode(m *wire.Message) []byte {
	if m.SenderID == "" {
		m.SenderID = c.srv.cfg.PeerID
	}
	m.TargetID = c.peerID
	b, err := wire.Encode(m)
	if err != nil {
		c.srv.log.Error("encode message", "type", m.Type, "err", err)
		return nil
	}
	return b
}

// pingDelay is the ping interval jittered by ±10%, so that many
// connections opened together do not ping in step.
func (c *conn) pingDelay() time.Duration {
	d := c.srv.cfg.PingInterval
	return d*9/10 + rand.N(d/5+1)
}
