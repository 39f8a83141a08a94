package doc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"

	"github.com/automerge/automerge-go"
)

// Read-only peers. automerge-go applies a sync message's changes as it
// receives it, so a message from a peer that may not write is rewritten
// first: its changes are dropped, and heads the document does not have (the
// peer's own refused edits) are replaced by the document's heads. So the
// server never asks for the refused changes, and the sync loop ends: the
// server sees the peer as level with it and stops answering once the
// peer's bloom filter shows it lacks nothing. What the peer lacks is still
// sent, because automerge picks changes to send from the peer's "have"
// (last sync point and bloom filter), not from its heads.
//
// Layout of an automerge sync message (type 0x42), integers as unsigned
// LEB128: type byte, heads (count, 32-byte hashes), need (same), have
// (count, then per entry: lastSync hashes and a length-prefixed bloom
// filter), changes (count, then length-prefixed change bytes), then
// optional trailing fields, kept as they are.

const syncMessageV1 = 0x42

var errSyncFormat = errors.New("unreadable sync message")

type syncReader struct {
	b   []byte
	off int
	err error
}

func (r *syncReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 {
		r.err = errSyncFormat
		return 0
	}
	r.off += n
	return v
}

func (r *syncReader) bytes(n uint64) []byte {
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)-r.off) {
		r.err = errSyncFormat
		return nil
	}
	out := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return out
}

func (r *syncReader) hashes() [][]byte {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.err = errSyncFormat
		return nil
	}
	out := make([][]byte, 0, n)
	for i := uint64(0); i < n && r.err == nil; i++ {
		out = append(out, r.bytes(32))
	}
	return out
}

// stripForReadOnly returns msg without its changes and with unknown heads
// replaced by ours. It reports whether the message carried changes.
func stripForReadOnly(msg []byte, known func(hash []byte) bool, ours [][]byte) ([]byte, bool, error) {
	if len(msg) == 0 || msg[0] != syncMessageV1 {
		return nil, false, errSyncFormat
	}
	r := &syncReader{b: msg, off: 1}
	heads := r.hashes()
	afterHeads := r.off
	r.hashes() // need
	for n := r.uvarint(); n > 0 && r.err == nil; n-- {
		r.hashes()           // lastSync
		r.bytes(r.uvarint()) // bloom filter
	}
	beforeChanges := r.off
	changes := r.uvarint()
	for i := uint64(0); i < changes && r.err == nil; i++ {
		r.bytes(r.uvarint())
	}
	if r.err != nil {
		return nil, false, r.err
	}
	var kept [][]byte
	for _, h := range heads {
		if known(h) {
			kept = append(kept, h)
		}
	}
	if changes == 0 && len(kept) == len(heads) {
		return msg, false, nil
	}
	if len(kept) < len(heads) {
		kept = sortedUnion(kept, ours)
	}
	out := make([]byte, 0, len(msg))
	out = append(out, syncMessageV1)
	out = binary.AppendUvarint(out, uint64(len(kept)))
	for _, h := range kept {
		out = append(out, h...)
	}
	out = append(out, msg[afterHeads:beforeChanges]...) // need and have, as sent
	out = append(out, 0)                                // no changes
	out = append(out, msg[r.off:]...)                   // trailing fields
	return out, changes > 0, nil
}

// sortedUnion returns the distinct hashes of a and b in byte order, the
// order automerge keeps heads in.
func sortedUnion(a, b [][]byte) [][]byte {
	out := append(append([][]byte(nil), a...), b...)
	slices.SortFunc(out, bytes.Compare)
	return slices.CompactFunc(out, bytes.Equal)
}

// level reports whether a peer's sync message shows it level with the
// document: no changes, nothing needed, and its heads the document's heads,
// which the peer was last sent too (sentAt). automerge then has nothing to
// answer (its sync state's last sent heads and the peer's heads both equal
// ours), so the room skips asking it: most messages of a busy document are
// such acknowledgements, one per peer per change. When unsure, false.
func level(msg []byte, ours, sentAt []automerge.ChangeHash) bool {
	if sentAt == nil || !sameHeads(sentAt, ours) || len(msg) == 0 || msg[0] != syncMessageV1 {
		return false
	}
	r := &syncReader{b: msg, off: 1}
	heads := r.hashes()
	need := r.hashes()
	for n := r.uvarint(); n > 0 && r.err == nil; n-- {
		r.hashes()           // lastSync
		r.bytes(r.uvarint()) // bloom filter
	}
	changes := r.uvarint()
	if r.err != nil || changes != 0 || len(need) != 0 || len(heads) != len(ours) {
		return false
	}
	for i, h := range heads {
		if !bytes.Equal(h, ours[i][:]) {
			return false
		}
	}
	return true
}
