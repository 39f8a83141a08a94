package doc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/tandemhq/tandem/doc/amsync"
)

// Reading a document outside the sync protocol (the REST API): its
// changes as the log holds them, whole, up to given heads or since them,
// taken under the room's lock and loaded from the store if the document
// is not in memory. What the changes make (amdoc.View, amdoc.Save) is
// the caller's to work out, off the room's locks.

var (
	// ErrNotFound is returned for a document that has no changes here or
	// in the store.
	ErrNotFound = errors.New("document not found")
	// ErrUnknownHeads is returned for heads the document does not have.
	ErrUnknownHeads = errors.New("the document has no change of these heads")
)

// MaxReadHeads bounds the heads a read names (ReadQuery.At, .Since).
const MaxReadHeads = 256

// ReadQuery says which of a document's changes a read returns.
type ReadQuery struct {
	// At, if set, returns the changes up to these heads: the document as
	// it was then.
	At []amsync.Hash
	// Since, if set, returns the changes that are not ancestors of these
	// heads (nor among them).
	Since []amsync.Hash
	// Saved, for a read of the whole document, returns the room's save
	// instead of the changes when it holds all of them (Read.Saved, and
	// no Read.Changes).
	Saved bool
}

// Read is what a read returns.
type Read struct {
	// Changes are change chunks one after another, each after the
	// changes it depends on.
	Changes []byte
	// Heads are the document's heads (At, when given), sorted.
	Heads []amsync.Hash
	// Saved, for a ReadQuery.Saved, is the document saved as automerge
	// saves one, as the room keeps it for new readers, holding all its
	// changes (Changes is then nil).
	Saved []byte
	// Ops counts the document's ops (all of them, for a read of part of
	// it): what working out its content costs grows with them.
	Ops int64
}

// Read returns a document's changes, loading it if it is not in memory.
// It copies them under the room's lock: its cost grows with the
// document's bytes, as a new peer's first sync does.
func (h *Hub) Read(ctx context.Context, documentID string, q ReadQuery) (Read, error) {
	if len(q.At) > MaxReadHeads || len(q.Since) > MaxReadHeads {
		return Read{}, fmt.Errorf("%w: over %d heads", ErrUnknownHeads, MaxReadHeads)
	}
	r, err := h.acquire(ctx, documentID)
	if err != nil {
		return Read{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.exists || r.log.Len() == 0 {
		return Read{}, ErrNotFound
	}
	for _, hs := range [][]amsync.Hash{q.At, q.Since} {
		for _, x := range hs {
			if !r.log.Has(x) {
				return Read{}, fmt.Errorf("%w: %x", ErrUnknownHeads, x[:])
			}
		}
	}
	var idx []int32
	var heads []amsync.Hash
	switch {
	case q.At != nil:
		idx = ancestors(r.log, q.At)
		heads = slices.Clone(q.At)
		slices.SortFunc(heads, func(a, b amsync.Hash) int { return bytes.Compare(a[:], b[:]) })
		heads = slices.Compact(heads)
	case q.Since != nil:
		idx = r.log.Since(q.Since)
		heads = r.log.Heads()
	default:
		idx = span(0, r.log.Len())
		heads = r.log.Heads()
	}
	if n, saved := r.log.Saved(); q.Saved && q.At == nil && q.Since == nil && n == r.log.Len() && saved != nil {
		return Read{Saved: saved, Heads: heads, Ops: r.guard.Ops()}, nil
	}
	return Read{Changes: joinChanges(r.log, idx), Heads: heads, Ops: r.guard.Ops()}, nil
}

// Size is what a document holds, for a reader to reckon what reading it
// will cost before it reads.
type Size struct {
	// Bytes are its changes' bytes: what Read copies of all of it.
	Bytes int64
	// Ops counts its ops.
	Ops int64
	// Saved reports whether the room holds a save of all of it (a
	// ReadQuery.Saved is then answered with that).
	Saved bool
}

// Size returns a document's size, loading it if it is not in memory.
func (h *Hub) Size(ctx context.Context, documentID string) (Size, error) {
	r, err := h.acquire(ctx, documentID)
	if err != nil {
		return Size{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.exists || r.log.Len() == 0 {
		return Size{}, ErrNotFound
	}
	n, saved := r.log.Saved()
	return Size{Bytes: r.log.Bytes(), Ops: r.guard.Ops(), Saved: saved != nil && n == r.log.Len()}, nil
}

// ancestors returns, in log order, the indices of heads and every change
// they depend on.
func ancestors(l *amsync.Log, heads []amsync.Hash) []int32 {
	seen := make(map[int32]bool)
	var stack []int32
	for _, x := range heads {
		if i, ok := l.IndexOf(x); ok && !seen[i] {
			seen[i] = true
			stack = append(stack, i)
		}
	}
	for len(stack) > 0 {
		i := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, d := range l.DepsAt(i) {
			if !seen[d] {
				seen[d] = true
				stack = append(stack, d)
			}
		}
	}
	out := make([]int32, 0, len(seen))
	for i := range seen {
		out = append(out, i)
	}
	slices.Sort(out)
	return out
}
