package store

import (
	"context"
	"crypto/rand"
	"fmt"
)

// Store keeps documents durable. A document is stored as an optional
// snapshot plus the chunks appended after it, each the bytes of changes
// one after another (an earlier version of Tandem stored snapshots as
// documents automerge saved: they load too); loading the snapshot and
// the chunks in order gives the document back.
//
// Implementations must be safe for concurrent use.
type Store interface {
	// Load returns what is stored for the document, or ErrNotFound.
	Load(ctx context.Context, documentID string) (Stored, error)
	// Write applies a batch of writes atomically where the store can, and
	// durably (synced to disk) before it returns.
	Write(ctx context.Context, batch []Write) error
	// Journals lists every mention journal stored, of every document and
	// node, for a node to take over those of nodes that died.
	Journals(ctx context.Context) ([]Journal, error)
	// Close releases the store. It is safe to call twice.
	Close() error
}

// Journal is one node's record of a document's mentions that it has not
// yet handed to the notification queue (doc/mention_journal.go). It is
// written in the same transaction as the changes it accounts for, so that
// a node killed at any moment leaves behind exactly what it still owed.
type Journal struct {
	DocumentID string
	Node       string
	Data       []byte
}

// Stored is a document as a Store holds it.
type Stored struct {
	Snapshot []byte
	Chunks   [][]byte
	// Saved is the document saved as automerge saves one, for new
	// readers (doc/saved.go); nil if none was stored.
	Saved []byte
	// Journals are the mention journals of the document, by node.
	Journals map[string][]byte
}

// Write is one document's part of a batch. A non-nil Snapshot replaces
// what is stored for the document (compaction) before Chunks are appended:
// every stored chunk, and the snapshot stored before, for which Covers
// reports true (all of them if Covers is nil). In a cluster another node
// may have stored changes this node has not seen yet; what Covers does
// not cover stays, and loads among the chunks. Covers is called during
// the write, inside the store's transaction, once for each of them: it
// must not block.
type Write struct {
	DocumentID string
	Snapshot   []byte
	Chunks     [][]byte
	Covers     func(chunk []byte) bool
	// Journals replaces the document's mention journals of the nodes it
	// names; an empty one is deleted.
	Journals map[string][]byte
	// Saved, if not nil, replaces the document's saved document.
	// A compaction leaves it: it holds a prefix of the document's changes,
	// which the compaction keeps.
	Saved []byte
}

// newUUID returns a random (version 4) UUID.
func newUUID() string {
	var u [16]byte
	rand.Read(u[:])
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:])
}
