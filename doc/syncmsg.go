package doc

import (
	"errors"
	"fmt"

	"github.com/tandemhq/tandem/doc/amdoc"
	"github.com/tandemhq/tandem/doc/amsync"
	"github.com/tandemhq/tandem/doc/guard"
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

// isDocument reports whether a chunk is a document chunk.
func isDocument(b []byte) bool { return len(b) > 8 && b[8] == 0 }

// expandDocuments returns the message's chunks with each document chunk
// (what a peer that reads version 2 sends a server that has nothing of
// the document, or lacks a third of it) replaced by its changes, read in
// Go (amdoc.Load), for the guard to check each as it checks any. A
// document whose heads the log has brings nothing and is left out, as
// automerge leaves it out. Reading one is charged to the budgets a
// message's changes are: what it writes to what the document may still
// hold (its changes' bytes never pass their cost), shared by every
// document of the message, and what it holds while it runs to the memory
// the node checks with, each before it is held. A document whose heads
// an earlier one of the message stated is left out too. A document that
// does not read is left as it is: the guard refuses it.
// The caller holds r.applyMu (room.admit).
func (r *room) expandDocuments(lim guard.Limits, chunks [][]byte) ([][]byte, error) {
	out := chunks
	var written int64        // by the documents read so far: they share the headroom
	var seen map[string]bool // the heads of the documents read so far
	for i, b := range chunks {
		if !isDocument(b) {
			if len(out) != len(chunks) {
				out = append(out, b)
			}
			continue
		}
		if len(out) == len(chunks) {
			out = append(make([][]byte, 0, len(chunks)), chunks[:i]...)
		}
		heads, err := amsync.DocumentHeads(b)
		if err != nil {
			out = append(out, b)
			continue
		}
		key := headsKey(heads)
		if seen[key] || len(r.log.Missing(heads)) == 0 {
			continue // it brings nothing the log or an earlier one does not
		}
		if seen == nil {
			seen = map[string]bool{}
		}
		seen[key] = true
		changes, err := amdoc.Load(b, amdoc.LoadLimits{
			MaxBytes:   max(r.guard.Headroom(lim)-written, 0) + int64(len(b)),
			MaxOps:     int(min(lim.DocumentBytes/guard.OpBytes, 1<<25)),
			MaxChanges: int(min(lim.DocumentChanges, 1<<25)),
			BeforeOps:  func(held int64) error { return r.guard.ChargeRead(lim, held) },
		})
		for _, c := range changes {
			written += int64(len(c))
		}
		switch {
		case errors.Is(err, amdoc.ErrLoadLimit):
			return nil, fmt.Errorf("%w: a document it sent: %w", ErrLimit, err)
		case errors.Is(err, amdoc.ErrNotDocument):
			return nil, fmt.Errorf("%w: a document it sent: %v", ErrRefused, err)
		case err != nil:
			return nil, err // the guard's own refusal (ErrLimit, ErrBusy)
		}
		out = append(out, changes...)
	}
	return out, nil
}

// headsKey is a set of heads as a map key.
func headsKey(heads []amsync.Hash) string {
	b := make([]byte, 0, 32*len(heads))
	for _, h := range heads {
		b = append(b, h[:]...)
	}
	return string(b)
}
