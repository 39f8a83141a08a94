package transport

import (
	"github.com/gorilla/websocket"
)

// CloseReason says why a connection ended. Code and Text go to the client
// in the close frame; Name labels tandem_disconnects_total.
type CloseReason struct {
	Code int
	Name string
	Text string
}

// Close reasons. Codes 4000-4999 are Tandem's own.
var (
	ReasonShutdown    = CloseReason{websocket.CloseGoingAway, "shutdown", "server shutting down"}
	ReasonTooBig      = CloseReason{websocket.CloseMessageTooBig, "too_big", "message too big"}
	ReasonReplaced    = CloseReason{4000, "replaced", "replaced by a newer connection of the same peer"}
	ReasonSlow        = CloseReason{4001, "slow_consumer", "slow consumer: send queue full"}
	ReasonUnsupported = CloseReason{4002, "unsupported_version", "unsupported protocol version"}
	ReasonPingTimeout = CloseReason{4003, "ping_timeout", "nothing read for three and a half ping intervals"}
	ReasonClientGone  = CloseReason{websocket.CloseNormalClosure, "client_closed", "client closed"}
	ReasonWriteFailed = CloseReason{websocket.CloseAbnormalClosure, "write_failed", "write failed"}
	ReasonReadFailed  = CloseReason{websocket.CloseAbnormalClosure, "read_failed", "read failed"}
	ReasonExpired     = CloseReason{4004, "token_expired", "token expired"}
	// A message that did not arrive within MessageReadTimeout.
	ReasonReadTimeout = CloseReason{4005, "message_timeout", "a message took too long to arrive"}
	// The node's read budget had no room for the rest of a message in
	// time: the client is to reconnect later and send it again.
	ReasonReadBusy = CloseReason{websocket.CloseTryAgainLater, "read_budget", "the server is reading too much at once: reconnect later"}

	// Protocol violations: the client is told why in an error message,
	// then closed with the code that names the fault.
	ReasonTextFrame   = CloseReason{websocket.CloseUnsupportedData, errTextFrame, "text frame: the protocol is CBOR in binary frames"}
	ReasonMalformed   = CloseReason{websocket.CloseInvalidFramePayloadData, errMalformed, "frame does not decode as a protocol message"}
	ReasonBadSync     = CloseReason{websocket.CloseInvalidFramePayloadData, errBadSync, "sync data is not an automerge sync message"}
	ReasonInvalid     = CloseReason{websocket.CloseProtocolError, errInvalid, "message lacks what its type requires"}
	ReasonIDTooLong   = CloseReason{websocket.CloseProtocolError, errIDTooLong, "senderId or sessionId too long"}
	ReasonNotJoined   = CloseReason{websocket.CloseProtocolError, errNotJoined, "message before join"}
	ReasonRejoin      = CloseReason{websocket.CloseProtocolError, errRejoin, "join as another peer on a joined socket"}
	ReasonWrongSender = CloseReason{websocket.ClosePolicyViolation, errWrongSender, "senderId is not the peer that joined"}
	ReasonPeerTaken   = CloseReason{websocket.ClosePolicyViolation, errPeerTaken, "peer id in use by another user"}
	ReasonFlood       = CloseReason{websocket.ClosePolicyViolation, "flood", "message rate far above the limit"}
	// The store is behind: the client is to reconnect later, when its
	// changes, sent again on a fresh sync state, can be stored.
	ReasonStoreBehind = CloseReason{websocket.CloseTryAgainLater, errStoreBehind, "the server's store is behind: reconnect later"}
	// The node holds all the changes waiting for a dependency it may:
	// the client is to reconnect later and send them again.
	ReasonBusy = CloseReason{websocket.CloseTryAgainLater, errBusy, "the server holds too many changes waiting for their dependencies: reconnect later"}
)

// Reasons for protocol errors sent to a client (tandem_protocol_errors_total)
// and for messages dropped quietly (tandem_messages_dropped_total).
const (
	errTextFrame   = "text_frame"
	errMalformed   = "malformed"
	errInvalid     = "invalid"
	errIDTooLong   = "id_too_long"
	errNotJoined   = "not_joined"
	errWrongSender = "wrong_sender"
	errRejoin      = "rejoin_other_peer"
	errBadSync     = "bad_sync"
	errRefused     = "sync_refused"
	errOverLimit   = "document_limit"
	errLoad        = "load_failed"
	errStoreBehind = "store_behind"
	errBusy        = "waiting_full"
	errBadPresence = "bad_presence"
	errReadOnly    = "read_only"
	errPeerTaken   = "peer_id_taken"
	errTooManyDocs = "too_many_documents"
	errDocFull     = "document_full"
	errTooLarge    = "ephemeral_too_large"
	errRateLimited = "rate_limited"

	dropStale           = "stale_ephemeral"
	dropForeignSender   = "foreign_sender"
	dropDenied          = "access_denied"
	dropRateLimited     = "rate_limited"
	dropRefusedDocument = "refused_document"
	dropSlowReader      = "slow_reader"

	// Reasons a connection is refused before the upgrade.
	refuseUnauthorized = "unauthorized"
	refuseOrigin       = "origin"
	refusePerIP        = "per_ip_limit"
	refuseShutdown     = "shutting_down"
)
