package doc

import "errors"

var (
	// ErrClosed is returned once the hub has been closed.
	ErrClosed = errors.New("document hub closed")
	// ErrBadSyncMessage is returned for sync data automerge cannot apply.
	ErrBadSyncMessage = errors.New("not an automerge sync message")
	// ErrNotFound is returned by a Store for a document it does not have.
	ErrNotFound = errors.New("document not found")
)
