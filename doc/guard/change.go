package guard

import (
	"errors"

	"github.com/tandemhq/tandem/doc/amcheck"
)

// Change is a change read from bytes: what amcheck read, and the bytes.
type Change struct {
	amcheck.Change
	Raw []byte
	// Stored is set for a change that came from the store or from another
	// node, which stores what it takes before it publishes it: the store
	// holds it already, and the node that took it checked it.
	Stored bool
	// from is the local peer that sent a change waiting for a dependency:
	// its leaving drops it (waiting.go).
	from string
}

// From is the local peer that sent a change that waited for a
// dependency; "" for one that did not wait, or a stored one.
func (c *Change) From() string { return c.from }

var (
	// ErrSeqTaken is the error of a stored change left out because the
	// document holds another change of its actor's sequence number.
	ErrSeqTaken = errors.New("another change holds its actor's sequence number")
	// ErrRefused is returned for a sync message that reads well but that
	// the guard refused because automerge could not apply it safely; the
	// document is untouched.
	ErrRefused = errors.New("sync message refused")
	// ErrLimit is returned for a sync message whose changes pass one of
	// the Limits; the document is untouched.
	ErrLimit = errors.New("over a document limit")
	// ErrBusy is returned for a message whose changes would wait for a
	// dependency while the node holds Limits.WaitingBytes of such changes
	// already, or whose check would hold more than Limits.CheckBytes
	// beside the others': nothing of it is applied; the peer is to come
	// back later.
	ErrBusy = errors.New("the node holds too many changes waiting for their dependencies: changes not taken now")
)
