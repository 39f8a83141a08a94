package transport

// Inbound frames: each one checked (flood, type, size, sender) and handed
// to the document layer or, through the membership record, to presence;
// what is wrong is told to the client, and the worst closes the socket.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tandemhq/tandem/doc"
	"github.com/tandemhq/tandem/internal/auth"
	"github.com/tandemhq/tandem/transport/wire"
)

// handle checks one inbound frame (flood, type, size, sender) and hands
// it to the method for its kind. An ephemeral the connection was sent and
// passes back goes first, unread (passedon.go).
func (c *conn) handle(ctx context.Context, mt int, data []byte) {
	if mt == websocket.BinaryMessage && c.passedOn(data) {
		return
	}
	now := time.Now()
	rate, burst := c.srv.cfg.MessageRate, c.srv.cfg.MessageBurst
	if !c.flood.allow(2*rate, 2*burst, now) {
		c.srv.log.Warn("closing a flooding connection", "peer", c.peerID, "remote", c.remote())
		c.close(ReasonFlood, false)
		return
	}
	overRate := !c.limiter.allow(rate, burst, now)
	if mt != websocket.BinaryMessage {
		c.violation(ReasonTextFrame, "text frames are not part of the protocol: send CBOR in binary frames")
		return
	}
	m, err := wire.Decode(data)
	if err != nil {
		c.violation(ReasonMalformed, err.Error())
		return
	}
	c.srv.metrics.received.WithLabelValues(typeLabel(m.Type)).Inc()
	if err := m.Validate(); err != nil {
		c.invalid(m, err)
		return
	}
	switch {
	case c.peerID == "":
		if m.Type != wire.TypeJoin {
			c.violation(ReasonNotJoined, "send join before any other message")
			return
		}
		c.join(ctx, m)
	case m.Type == wire.TypeHeartbeat:
		c.heartbeat(m)
	case m.Type == wire.TypeJoin:
		c.rejoin(m)
	case m.SenderID != c.peerID:
		c.foreign(m)
	case c.droppedRefused(m.DocumentID):
		// A document refused to this connection: dropped (refused.go).
	case m.Type == wire.TypeSync || m.Type == wire.TypeRequest:
		c.sync(ctx, m)
	case m.Type == wire.TypeEphemeral:
		c.ephemeral(ctx, m, overRate)
	default:
		// doc-unavailable, remote-heads gossip and error messages from a
		// client need no answer.
		c.srv.log.Debug("ignored message", "peer", c.peerID, "type", m.Type)
	}
}

// invalid tells the client that m, decoded, breaks its type's rules.
func (c *conn) invalid(m *wire.Message, err error) {
	text := fmt.Sprintf("invalid %s message: %v", typeLabel(m.Type), err)
	switch {
	case errors.Is(err, wire.ErrUnknownType) || errors.Is(err, wire.ErrInvalidDocumentID):
		// A type from a newer protocol, or one document's id: the
		// connection's other documents go on.
		c.protocolError(errInvalid, text)
	case errors.Is(err, wire.ErrIDTooLong):
		// Not a stock client's: its every message would be refused
		// alike, and nothing of it is held.
		c.violation(ReasonIDTooLong, text)
	default:
		c.violation(ReasonInvalid, text)
	}
}

// heartbeat answers a heartbeat at once. It is liveness only: it does not
// make the peer active.
func (c *conn) heartbeat(m *wire.Message) {
	if p := c.srv.cfg.Presence; p != nil {
		p.Touch(c)
	}
	c.sendMessage(&wire.Message{Type: wire.TypeHeartbeatAck, Seq: m.Seq, ServerTime: time.Now().UnixMilli()})
}

// rejoin answers a join on a socket that joined already: the same peer is
// answered again, another is refused.
func (c *conn) rejoin(m *wire.Message) {
	if m.SenderID == c.peerID {
		c.sendPeer()
		return
	}
	c.violation(ReasonRejoin, fmt.Sprintf("this socket joined as %q: open a new connection for another peer", c.peerID))
}

// foreign takes a message in another peer's name. Stock clients pass on
// the ephemerals they receive, under the original sender: that sender
// already got it to us, and it is dropped. Anything else so sent breaks
// the protocol.
func (c *conn) foreign(m *wire.Message) {
	if m.Type == wire.TypeEphemeral {
		c.srv.metrics.dropped.WithLabelValues(dropForeignSender).Inc()
		return
	}
	c.violation(ReasonWrongSender, fmt.Sprintf("senderId %q does not match the peer %q that joined on this socket", m.SenderID, c.peerID))
}

// sync hands a sync or request message to the document layer. Document
// sync is never dropped: the rate limit counts it only.
func (c *conn) sync(ctx context.Context, m *wire.Message) {
	access := c.grant.Can(m.DocumentID)
	if access == auth.None {
		// Unavailable, whether it exists or not: nothing leaks.
		c.srv.metrics.denied.Inc()
		c.SendDocUnavailable(m.DocumentID)
		return
	}
	if !c.open(m.DocumentID) {
		return
	}
	c.srv.metrics.syncBytes.WithLabelValues("in").Add(float64(len(m.Data)))
	c.documentError(m.DocumentID, c.srv.cfg.Documents.Sync(ctx, c, doc.SyncMessage{
		DocumentID: m.DocumentID, Data: m.Data,
		Request: m.Type == wire.TypeRequest, ReadOnly: access == auth.Read,
	}))
}

// ephemeral takes an ephemeral of the peer's own, within the rate, the
// size and its session's order, and hands it on: to presence if it
// carries presence (presence), to the document's other peers if not.
func (c *conn) ephemeral(ctx context.Context, m *wire.Message, overRate bool) {
	if c.grant.Can(m.DocumentID) == auth.None {
		c.srv.metrics.denied.Inc()
		c.srv.metrics.dropped.WithLabelValues(dropDenied).Inc()
		return
	}
	if overRate {
		c.srv.metrics.dropped.WithLabelValues(dropRateLimited).Inc()
		if t := monotonic(); time.Duration(t-c.lastRateErr) > time.Second || c.lastRateErr == 0 {
			c.lastRateErr = t
			c.protocolError(errRateLimited, fmt.Sprintf("over %g messages/s: ephemeral messages are being dropped", c.srv.cfg.MessageRate))
		}
		return
	}
	if len(m.Data) > c.srv.cfg.MaxEphemeralBytes {
		c.protocolError(errTooLarge, fmt.Sprintf("ephemeral payload of %d bytes is over the limit of %d", len(m.Data), c.srv.cfg.MaxEphemeralBytes))
		return
	}
	if !c.inOrder(m) || !c.open(m.DocumentID) {
		return
	}
	presenceErr, docErr := c.srv.members.ephemeral(ctx, c, m.DocumentID, doc.Ephemeral{
		SenderID: m.SenderID, SessionID: m.SessionID, Count: m.Count, Data: m.Data,
	})
	if presenceErr != nil {
		c.protocolError(errBadPresence, fmt.Sprintf("presence message for document %s: %v", m.DocumentID, presenceErr))
		return
	}
	c.documentError(m.DocumentID, docErr)
}

// inOrder reports whether an ephemeral's count is higher than the last of
// its session, and notes it; a stale one is dropped.
func (c *conn) inOrder(m *wire.Message) bool {
	last, seen := c.clocks[m.SessionID]
	if seen && m.Count <= last {
		c.srv.metrics.dropped.WithLabelValues(dropStale).Inc()
		return false
	}
	if c.clocks == nil {
		c.clocks = make(map[string]uint64, 1)
	} else if !seen && len(c.clocks) >= maxSessions {
		clear(c.clocks)
	}
	c.clocks[m.SessionID] = m.Count
	return true
}

// open puts the connection in a document at its first message for it,
// within the limits (members.join). It reports false, having told the
// client why, when a limit is reached.
func (c *conn) open(documentID string) bool {
	if c.docs.Has(documentID) {
		return true
	}
	if n := c.docs.Len() + c.refused.Len(); n >= c.srv.cfg.MaxDocumentsPerConn {
		c.protocolError(errTooManyDocs, fmt.Sprintf("this connection has opened %d documents, the limit", n))
		return false
	}
	if !c.srv.members.join(c, documentID) {
		c.protocolError(errDocFull, fmt.Sprintf("document %s has %d peers on this server, the limit", documentID, c.srv.cfg.MaxPeersPerDocument))
		return false
	}
	c.docs.Set(documentID, struct{}{})
	return true
}

func (c *conn) join(ctx context.Context, m *wire.Message) {
	c.peerID = m.SenderID
	c.batches = m.PeerMetadata != nil && m.PeerMetadata.PresenceBatch
	if !m.SupportsV1() {
		c.sendMessage(&wire.Message{Type: wire.TypeError, ErrorMessage: "unsupported protocol version"})
		c.close(ReasonUnsupported, true)
		return
	}
	if c.peerID == c.srv.cfg.PeerID {
		// Ephemerals in the server's name are never passed back by a
		// stock client: others would count them owed (presence.go).
		c.violation(ReasonPeerTaken, fmt.Sprintf("peer id %q is the server's", c.peerID))
		c.peerID = ""
		return
	}
	if !c.claim(ctx) || !c.srv.bind(c) {
		if c.unclaim != nil {
			c.unclaim()
			c.unclaim = nil
		}
		c.violation(ReasonPeerTaken, fmt.Sprintf("peer id %q is in use by another user", c.peerID))
		c.peerID = ""
		return
	}
	c.joinedAs.Store(&c.peerID)
	c.sendPeer()
	c.srv.log.Debug("peer joined", "peer", c.peerID, "remote", c.remote())
}

// claim takes the peer id across the cluster for the token's user, so that
// no node lets another user take it (bind checks this node's own). Without
// a token there is no identity to protect, and nothing is claimed.
//
// When Redis cannot answer, the join is accepted (a user reconnecting
// keeps working while Redis is away) unless this node knows the peer id
// to be another user's, on another node; the claim is then taken by the
// first beat that reaches Redis.
func (c *conn) claim(ctx context.Context) bool {
	claims := c.srv.cfg.Claims
	if claims == nil || c.grant == nil {
		return true
	}
	user := c.grant.UserID
	unclaim, taken, err := claims.ClaimPeer(ctx, c.peerID, user, c.moved)
	c.unclaim = unclaim
	switch {
	case taken:
		return false
	case err == nil:
		return true
	}
	if p := c.srv.cfg.Presence; p != nil {
		if other, ok := p.RemoteUser(c.peerID); ok && other != user {
			return false
		}
	}
	c.srv.log.Warn("peer id not claimed across the cluster; accepted on what this node knows",
		"peer", c.peerID, "remote", c.remote(), "err", err)
	return true
}

// moved is called, from the cluster's claims, when a newer connection of
// the same user took this peer id on another node: this one is closed as
// replaced, and presence hands the peer over rather than saying goodbye.
func (c *conn) moved(node string) {
	c.wmu.Lock()
	c.movedTo = node
	c.wmu.Unlock()
	c.close(ReasonReplaced, false)
}

// documentError tells the client what went wrong with a document.
func (c *conn) documentError(documentID string, err error) {
	switch {
	case err == nil:
	case errors.Is(err, doc.ErrReadOnly):
		c.protocolError(errReadOnly, fmt.Sprintf("read-only access to document %s: your changes were not applied", documentID))
	case errors.Is(err, doc.ErrRefused):
		// Input a stock client could not apply: it costs the client this
		// document, on this connection (refused.go).
		c.refuseDocument(documentID, errRefused, fmt.Sprintf("sync message for document %s refused: %v; this connection no longer syncs the document", documentID, err))
	case errors.Is(err, doc.ErrLimit):
		c.refuseDocument(documentID, errOverLimit, fmt.Sprintf("changes to document %s refused: %v; this connection no longer syncs the document", documentID, err))
	case errors.Is(err, doc.ErrBadSyncMessage):
		c.violation(ReasonBadSync, fmt.Sprintf("sync data for document %s is not an automerge sync message", documentID))
	case errors.Is(err, doc.ErrBusy):
		c.violation(ReasonBusy, fmt.Sprintf("changes to document %s not taken: %v; reconnect later", documentID, err))
	case errors.Is(err, doc.ErrStoreBehind):
		c.violation(ReasonStoreBehind, fmt.Sprintf("changes to document %s not taken: the server's store is behind; reconnect later and they are taken then", documentID))
	case errors.Is(err, doc.ErrClosed):
		c.close(ReasonShutdown, false)
	default:
		c.srv.log.Error("document operation failed", "document", documentID, "peer", c.peerID, "err", err)
		c.protocolError(errLoad, fmt.Sprintf("document %s is not available right now", documentID))
	}
}

// violation tells the client why its message cannot be taken (it breaks
// the protocol, or the server cannot store it now), then closes the
// connection with the code that names the cause (r.Name is also the
// error's reason); nothing it sent after is handled.
func (c *conn) violation(r CloseReason, text string) {
	c.protocolError(r.Name, text)
	c.close(r, true)
}

// protocolError sends the client an error message and counts it.
func (c *conn) protocolError(reason, text string) {
	c.srv.metrics.errors.WithLabelValues(reason).Inc()
	c.srv.log.Debug("protocol error", "peer", c.peerID, "remote", c.remote(), "reason", reason, "detail", text)
	c.sendMessage(&wire.Message{Type: wire.TypeError, ErrorMessage: text})
}

// typeLabel bounds the metric label set to the protocol's types.
func typeLabel(t string) string {
	switch t {
	case wire.TypeJoin, wire.TypePeer, wire.TypeError, wire.TypeSync, wire.TypeRequest,
		wire.TypeDocUnavailable, wire.TypeEphemeral, wire.TypeRemoteSubscriptionChange,
		wire.TypeRemoteHeadsChanged, wire.TypeHeartbeat, wire.TypeHeartbeatAck:
		return t
	}
	return "unknown"
}
