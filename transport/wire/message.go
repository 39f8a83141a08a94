package wire

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Message types of the automerge-repo protocol, version 1.
const (
	TypeJoin                     = "join"
	TypePeer                     = "peer"
	TypeError                    = "error"
	TypeSync                     = "sync"
	TypeRequest                  = "request"
	TypeDocUnavailable           = "doc-unavailable"
	TypeEphemeral                = "ephemeral"
	TypeRemoteSubscriptionChange = "remote-subscription-change"
	TypeRemoteHeadsChanged       = "remote-heads-changed"

	// Tandem's own extension, never sent by stock clients: a client's
	// heartbeat, acknowledged at once, so that a client can tell a dead
	// connection from a quiet one (three missed acks) even where TCP
	// and the browser hide it. See PROTOCOL.md.
	TypeHeartbeat    = "tandem-heartbeat"
	TypeHeartbeatAck = "tandem-heartbeat-ack"

	// Tandem's batched presence, sent only to a client whose join's
	// peerMetadata set tandemPresenceBatch: many ephemeral messages of one
	// document, one sessionId, in one frame (Batch). The same frame goes
	// to every such member of the document, so it has no targetId and may
	// hold messages in the recipient's own name, which it ignores.
	TypePresenceBatch = "tandem-presence-batch"
)

// ProtocolV1 is the only protocol version of automerge-repo 2.x.
const ProtocolV1 = "1"

// Message is one frame of the protocol. One struct serves every type; the
// fields a type does not use stay empty and are left out of the encoding.
// Fields of remote-heads gossip (add, remove, newHeads) are accepted on
// decode and ignored: Tandem does not gossip remote heads.
type Message struct {
	Type       string `cbor:"type"`
	SenderID   string `cbor:"senderId,omitempty"`
	TargetID   string `cbor:"targetId,omitempty"`
	DocumentID string `cbor:"documentId,omitempty"`
	// Data is an automerge sync message for sync and request, and the CBOR
	// encoding of an application payload for ephemeral.
	Data Bytes `cbor:"data,omitempty"`
	// Count and SessionID order the ephemeral messages of one sender
	// session: a receiver drops a count not higher than the last it saw.
	Count     uint64 `cbor:"count,omitempty"`
	SessionID string `cbor:"sessionId,omitempty"`

	PeerMetadata *PeerMetadata `cbor:"peerMetadata,omitempty"`
	// SupportedProtocolVersions is nil when a join leaves it out, which
	// means version 1; an empty non-nil list supports nothing.
	SupportedProtocolVersions []string `cbor:"supportedProtocolVersions,omitempty"`
	SelectedProtocolVersion   string   `cbor:"selectedProtocolVersion,omitempty"`

	// ErrorMessage is the text of an error message.
	ErrorMessage string `cbor:"message,omitempty"`

	// Batch holds the messages of a presence batch, in order.
	Batch []BatchEntry `cbor:"batch,omitempty"`

	// Seq numbers a heartbeat; its ack carries the same Seq and the
	// server's clock in ServerTime (Unix milliseconds).
	Seq        uint64 `cbor:"seq,omitempty"`
	ServerTime int64  `cbor:"serverTime,omitempty"`
}

// PeerMetadata describes a peer in join and peer messages.
type PeerMetadata struct {
	StorageID   string `cbor:"storageId,omitempty"`
	IsEphemeral bool   `cbor:"isEphemeral"`
	// PresenceBatch, in a join, asks for presence in batches
	// (TypePresenceBatch) rather than one ephemeral message each.
	PresenceBatch bool `cbor:"tandemPresenceBatch,omitempty"`
}

// BatchEntry is one ephemeral message of a presence batch: its sender,
// its count in the batch's session, and its payload. It is encoded as a
// three-element array.
type BatchEntry struct {
	_        struct{} `cbor:",toarray"`
	SenderID string
	Count    uint64
	Data     Bytes
}

// Bytes is a CBOR byte string. On decode it also accepts the typed-array tag
// 64 (a Uint8Array) that some encoders put around byte strings.
type Bytes []byte

// SupportsV1 reports whether a join message accepts protocol version 1.
func (m *Message) SupportsV1() bool {
	if m.SupportedProtocolVersions == nil {
		return true
	}
	for _, v := range m.SupportedProtocolVersions {
		if v == ProtocolV1 {
			return true
		}
	}
	return false
}

// MaxIDBytes bounds a peer id (senderId) and an ephemeral sessionId. Both
// ride on every message relayed in the peer's name, and a peer id on the
// rosters a cluster publishes: stock clients make ids of some tens of
// bytes.
const MaxIDBytes = 256

// Validation errors name the field that is wrong.
var (
	ErrIDTooLong     = fmt.Errorf("id longer than %d bytes", MaxIDBytes)
	ErrBadID         = errors.New("id holds a NUL character or is not UTF-8")
	ErrMissingSender = errors.New("message has no senderId")
	ErrMissingData   = errors.New("message has no data")
	ErrMissingClock  = errors.New("ephemeral message has no sessionId or count")
	ErrUnknownType   = errors.New("unknown message type")
	ErrNotFromClient = errors.New("message type is not sent by clients")
)

// textID reports whether an id is UTF-8 without NUL.
func textID(s string) bool {
	return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}

// Validate checks that a message received from a client carries what its
// type needs. Gossip of remote heads is accepted as it is.
func (m *Message) Validate() error {
	if m.SenderID == "" {
		return ErrMissingSender
	}
	if len(m.SenderID) > MaxIDBytes {
		return fmt.Errorf("%w: senderId of %d bytes", ErrIDTooLong, len(m.SenderID))
	}
	if len(m.SessionID) > MaxIDBytes {
		return fmt.Errorf("%w: sessionId of %d bytes", ErrIDTooLong, len(m.SessionID))
	}
	// A peer id may stand for its user on an open node, and is then
	// stored as the user's id: as text no store refuses.
	if !textID(m.SenderID) {
		return fmt.Errorf("%w: senderId", ErrBadID)
	}
	if !textID(m.SessionID) {
		return fmt.Errorf("%w: sessionId", ErrBadID)
	}
	switch m.Type {
	case TypeJoin, TypeRemoteSubscriptionChange, TypeError, TypeHeartbeat:
		return nil
	case TypeSync, TypeRequest, TypeEphemeral:
		if err := ValidateDocumentID(m.DocumentID); err != nil {
			return err
		}
		if len(m.Data) == 0 {
			return ErrMissingData
		}
		if m.Type == TypeEphemeral && (m.SessionID == "" || m.Count == 0) {
			return ErrMissingClock
		}
		return nil
	case TypeDocUnavailable, TypeRemoteHeadsChanged:
		return ValidateDocumentID(m.DocumentID)
	case TypePeer, TypePresenceBatch:
		return ErrNotFromClient
	default:
		return fmt.Errorf("%w %q", ErrUnknownType, m.Type)
	}
}
