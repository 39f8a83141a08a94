package doc

import (
	"errors"
	"fmt"

	"github.com/tandemhq/tandem/doc/amsync"
)

// Sync messages are read here, in Go, once, outside any lock
// (amsync.Decode): the guard reads the changes they carry, the room's
// sync state with the peer reads the rest.

var (
	// errUnsafe marks input that reads but that the server will not
	// work with (a bloom filter or a list past the bounds): refused
	// (ErrRefused).
	errUnsafe = errors.New("unsafe sync message")
)

// syncMessage is a sync message as read by parseSyncMessage.
type syncMessage struct {
	msg     *amsync.Message
	changes [][]byte
}

// parseSyncMessage reads a sync message. The changes are returned as they
// are; the guard reads them.
func parseSyncMessage(b []byte) (*syncMessage, error) {
	m, err := amsync.Decode(b)
	if errors.Is(err, amsync.ErrBloom) || errors.Is(err, amsync.ErrBounds) {
		return nil, fmt.Errorf("%w: %v", errUnsafe, err)
	}
	if err != nil {
		return nil, err
	}
	return &syncMessage{msg: m, changes: m.Changes}, nil
}

// bare reports whether the message says its peer has nothing of the
// document: no heads and no changes (a request, or a peer's reset).
func (m *syncMessage) bare() bool { return len(m.msg.Heads) == 0 && len(m.changes) == 0 }
