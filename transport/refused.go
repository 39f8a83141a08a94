package transport

import (
	"github.com/tandemhq/tandem/internal/smallmap"
)

// A change the node will not take (doc.ErrLimit: over a byte limit;
// doc.ErrRefused: what a stock client could not apply) costs its sender that
// document on that connection, not the connection:
//   - the client gets an `error` naming the document and the reason
//     (tandem_protocol_errors_total and tandem_documents_refused_total by
//     reason);
//   - the connection leaves the document: the room forgets its sync state
//     and sends it nothing more of the document (but what was already on
//     its way: a sync message waiting for its changes to be stored),
//     presence says goodbye for it there, and the bus stops watching the
//     document if it was the last connection here;
//   - everything it sends for the document afterwards (sync, request,
//     ephemeral, presence included) is dropped unread and counted
//     (tandem_messages_dropped_total{reason="refused_document"});
//   - its other documents go on as before.
// The refusal lasts as long as the connection. A stock client that
// reconnects sends the refused change again, and the document layer
// refuses it by its hash at once (doc/refused.go): the same outcome,
// once per connection, and no reconnection loop.

// refusedDocs is the documents refused to a connection. Owned by the
// reader goroutine. It counts against MaxDocumentsPerConn with the
// documents open, so it is bounded with them.
type refusedDocs = smallmap.Map[string, struct{}]

// refuseDocument tells the client why a change to a document was not
// taken and takes the connection out of the document.
func (c *conn) refuseDocument(documentID, reason, text string) {
	c.protocolError(reason, text)
	c.srv.metrics.docsRefused.WithLabelValues(reason).Inc()
	if c.refused.Has(documentID) {
		return
	}
	c.refused.Set(documentID, struct{}{})
	if c.docs.Has(documentID) {
		c.docs.Delete(documentID)
		c.srv.members.leaveDocument(c, documentID)
	}
}

// droppedRefused reports whether a message is for a document refused to
// this connection, counting it if so.
func (c *conn) droppedRefused(documentID string) bool {
	if documentID == "" || c.refused.Len() == 0 || !c.refused.Has(documentID) {
		return false
	}
	c.srv.metrics.dropped.WithLabelValues(dropRefusedDocument).Inc()
	return true
}
