package doc

import (
	"errors"

	"github.com/tandemhq/tandem/doc/guard"
)

var (
	// ErrClosed is returned once the hub has been closed.
	ErrClosed = errors.New("document hub closed")
	// ErrBadSyncMessage is returned for sync data that does not read as
	// an automerge sync message.
	ErrBadSyncMessage = errors.New("not an automerge sync message")
	// ErrRefused and ErrLimit are the guard's refusals of a message's
	// changes (package guard); the document is untouched.
	ErrRefused = guard.ErrRefused
	ErrLimit   = guard.ErrLimit
	// ErrReadOnly is returned when a read-only peer's changes were refused.
	ErrReadOnly = errors.New("read-only access: changes refused")
	// ErrStoreBehind is returned for a message carrying changes while the
	// store is too far behind the document (maxUnstored): nothing of it
	// is applied; the peer is to come back later.
	ErrStoreBehind = errors.New("the store is behind: changes not taken now")
	// ErrBusy is the guard's answer to a message it cannot check or keep
	// now (package guard): nothing of it is applied; the peer is to come
	// back later.
	ErrBusy = guard.ErrBusy
)
