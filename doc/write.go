package doc

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/tandemhq/tandem/doc/amsync"
)

// Writing a document outside the sync protocol (the REST API): changes
// made elsewhere (by a backend's own automerge, or by the server for it)
// enter the room the way a peer's do. Write sends them as a sync message
// from a peer of the caller's (a server-side one, whose Send methods
// drop what they are given), so that the guard checks them as it checks
// a client's, the log takes them, the room's observer hears of them as
// a local peer's change (the mention tracker counts that peer's
// mentions when it leaves), every member on every node is sent them,
// and the store holds them before Write returns.

// ErrMissingDependencies is returned for changes that depend on changes
// the document does not have: nothing of them is applied.
var ErrMissingDependencies = errors.New("the changes depend on changes the document does not have")

// ErrNotChanges is returned for bytes that are not change chunks one after
// another (a whole saved document, a compressed chunk or anything else).
var ErrNotChanges = errors.New("not automerge change chunks")

// Write applies changes (uncompressed change chunks one after another) to
// the document as peer p's, waits until the store holds them and returns
// the hashes of the changes written: Apply, then Flush.
func (h *Hub) Write(ctx context.Context, p Peer, documentID string, changes []byte) ([]amsync.Hash, error) {
	hashes, err := h.Apply(ctx, p, documentID, changes)
	if err != nil {
		return nil, err
	}
	if err := h.Flush(ctx); err != nil {
		return nil, fmt.Errorf("store the changes: %w", err)
	}
	return hashes, nil
}

// Apply applies changes (uncompressed change chunks one after another)
// to the document as peer p's and returns the hashes of the changes
// applied; the store holds them after the next Flush. p leaves the room
// before Apply returns; it must not be a peer of the document already.
// The guard's refusals are Sync's (ErrRefused, ErrLimit, ErrBusy,
// ErrStoreBehind).
func (h *Hub) Apply(ctx context.Context, p Peer, documentID string, changes []byte) ([]amsync.Hash, error) {
	hashes, err := changeHashes(changes, h.cfg.Limits.ChangeBytes)
	if err != nil {
		return nil, err
	}
	if len(hashes) == 0 {
		return nil, fmt.Errorf("%w: no changes", ErrNotChanges)
	}
	m := amsync.Message{Heads: sortedHashes(headsAmong(changes, hashes))}
	for off := 0; off < len(changes); {
		n := chunkLen(changes[off:])
		m.Changes = append(m.Changes, changes[off:off+n])
		off += n
	}
	defer h.Leave(p, documentID)
	if err := h.Sync(ctx, p, SyncMessage{DocumentID: documentID, Data: m.Encode()}); err != nil {
		return nil, err
	}
	// Changes whose dependencies are missing wait in the guard, with
	// their peer: they leave with it, unapplied.
	r := h.loadedRoom(documentID)
	if r == nil {
		return nil, ErrClosed
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, x := range hashes {
		if !r.log.Has(x) {
			return nil, ErrMissingDependencies
		}
	}
	return hashes, nil
}

// changeHashes splits b into uncompressed change chunks and returns their
// hashes, refusing anything else and any chunk over max bytes (0: no
// bound). The guard reads them in full later; this reads their headers.
func changeHashes(b []byte, maxBytes int64) ([]amsync.Hash, error) {
	var out []amsync.Hash
	for off := 0; off < len(b); {
		c := b[off:]
		if len(c) < 9 || c[0] != 0x85 || c[1] != 0x6f || c[2] != 0x4a || c[3] != 0x83 || c[8] != 1 {
			return nil, fmt.Errorf("%w: at byte %d", ErrNotChanges, off)
		}
		size, k := binary.Uvarint(c[9:])
		if k <= 0 || size > uint64(len(c)-9-k) || (maxBytes > 0 && size > uint64(maxBytes)) {
			return nil, fmt.Errorf("%w: the chunk at byte %d is cut short or too long", ErrNotChanges, off)
		}
		n := 9 + k + int(size)
		sum := sha256.Sum256(c[8:n])
		if [4]byte(sum[:4]) != [4]byte(c[4:8]) {
			return nil, fmt.Errorf("%w: the chunk at byte %d fails its checksum", ErrNotChanges, off)
		}
		out = append(out, amsync.Hash(sum))
		off += n
	}
	return out, nil
}

// headsAmong returns those of hashes (of changes, as changeHashes read
// them) no other of them depends on: what a sync message of them names
// as its heads, however many there are in a line.
func headsAmong(changes []byte, hashes []amsync.Hash) []amsync.Hash {
	depended := make(map[amsync.Hash]bool, len(hashes))
	for off := 0; off < len(changes); {
		n := chunkLen(changes[off:])
		body := changes[off : off+n]
		_, k := binary.Uvarint(body[9:])
		body = body[9+k:] // the change: its dependencies first
		if count, k := binary.Uvarint(body); k > 0 && count <= uint64(len(body)-k)/32 {
			for i := range int(count) {
				depended[amsync.Hash(body[k+32*i:k+32*i+32])] = true
			}
		}
		off += n
	}
	var out []amsync.Hash
	for _, h := range hashes {
		if !depended[h] {
			out = append(out, h)
		}
	}
	return out
}

// chunkLen returns the length of the chunk b starts with, which
// changeHashes read.
func chunkLen(b []byte) int {
	size, k := binary.Uvarint(b[9:])
	return 9 + k + int(size)
}

func sortedHashes(hs []amsync.Hash) []amsync.Hash {
	out := slices.Clone(hs)
	slices.SortFunc(out, func(a, b amsync.Hash) int { return bytes.Compare(a[:], b[:]) })
	return slices.Compact(out)
}
