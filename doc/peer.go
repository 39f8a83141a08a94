package doc

// Peer is one remote automerge-repo peer, such as a browser tab behind a
// WebSocket, as a room sees it. Implementations must not block in the Send
// methods: they are called with the room's lock held.
type Peer interface {
	// ID is the automerge-repo peerId the peer joined with.
	ID() string
	// SendSync queues an automerge sync message for the document.
	SendSync(documentID string, data []byte)
	// SendDocUnavailable tells the peer that no one has the document yet.
	SendDocUnavailable(documentID string)
	// SendEphemeral relays another peer's ephemeral message.
	SendEphemeral(documentID string, e Ephemeral)
}

// Ephemeral is an ephemeral message as relayed between peers: it keeps the
// original sender and its (SessionID, Count) clock.
type Ephemeral struct {
	SenderID  string
	SessionID string
	Count     uint64
	Data      []byte
}
