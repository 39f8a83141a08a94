package doc

import "errors"

var (
	// ErrClosed is returned once the hub has been closed.
	ErrClosed = errors.New("document hub closed")
	// ErrBadSyncMessage is returned for sync data that does not read as
	// an automerge sync message.
	ErrBadSyncMessage = errors.New("not an automerge sync message")
	// ErrRefused is returned for a sync message that reads well but that
	// the guard refused because automerge could not apply it safely; the
	// document is untouched.
	ErrRefused = errors.New("sync message refused")
	// ErrLimit is returned for a sync message whose changes pass one of
	// the Limits; the document is untouched.
	ErrLimit = errors.New("over a document limit")
	// ErrReadOnly is returned when a read-only peer's changes were refused.
	ErrReadOnly = errors.New("read-only access: changes refused")
	// ErrStoreBehind is returned for a message carrying changes while the
	// store is too far behind the document (maxUnstored): nothing of it
	// is applied; the peer is to come back later.
	ErrStoreBehind = errors.New("the store is behind: changes not taken now")
	// ErrBusy is returned for a message whose changes would wait for a
	// dependency while the node holds Limits.WaitingBytes of such changes
	// already: nothing of it is applied; the peer is to come back later.
	ErrBusy = errors.New("the node holds too many changes waiting for their dependencies: changes not taken now")
)
