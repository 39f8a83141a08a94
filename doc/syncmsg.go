package doc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/automerge/automerge-go"
)

// Sync messages are read here, in Go, before automerge sees them: once, for
// three uses. The guard refuses what automerge's core would abort on (see
// guard.go); a read-only peer's message is rewritten without its changes;
// an acknowledgement that shows a peer level needs no reply.
//
// Layout of an automerge sync message (type 0x42), integers as unsigned
// LEB128: type byte, heads (count, 32-byte hashes), need (same), have
// (count, then per entry: lastSync hashes and a length-prefixed bloom
// filter), changes (count, then length-prefixed change bytes), then
// optional trailing fields, kept as they are.

const syncMessageV1 = 0x42

var (
	errSyncFormat = errors.New("unreadable sync message")
	// errUnsafe marks input that reads well but would make automerge's
	// core fail: the guard refuses it (ErrRefused).
	errUnsafe = errors.New("unsafe for automerge")
)

// Bloom filter bounds. automerge takes a filter's bits modulo their count
// and allocates one slot per probe: a filter with entries but no bits
// divides by zero, and a huge probe count allocates gigabytes, both inside
// the cgo call, where a Rust panic aborts the process. Stock clients send
// 10 bits per entry and 7 probes.
const (
	maxBloomProbes       = 64
	maxBloomBitsPerEntry = 64
)

// syncMessage is a sync message as read by parseSyncMessage.
type syncMessage struct {
	raw     []byte
	heads   [][]byte
	need    [][]byte
	changes [][]byte
	// Offsets into raw: after the heads, before the changes' count, and
	// after the changes (trailing fields follow).
	afterHeads, beforeChanges, end int
}

type syncReader struct {
	b   []byte
	off int
	err error
}

func (r *syncReader) fail(format string, args ...any) {
	r.failWith(errSyncFormat, format, args...)
}

func (r *syncReader) failWith(kind error, format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", kind, fmt.Sprintf(format, args...))
	}
}

func (r *syncReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 {
		r.fail("bad LEB128 at byte %d", r.off)
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
		r.fail("%d bytes wanted at byte %d, %d left", n, r.off, len(r.b)-r.off)
		return nil
	}
	out := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return out
}

func (r *syncReader) hashes() [][]byte {
	n := r.uvarint()
	if n > uint64(len(r.b)-r.off)/32 {
		r.fail("%d hashes do not fit in the message", n)
		return nil
	}
	out := make([][]byte, 0, n)
	for i := uint64(0); i < n && r.err == nil; i++ {
		out = append(out, r.bytes(32))
	}
	return out
}

// bloom checks one have entry's filter against what automerge can take.
func (r *syncReader) bloom(b []byte) {
	if r.err != nil || len(b) == 0 {
		return // an empty filter is automerge's default
	}
	f := &syncReader{b: b}
	entries, perEntry, probes := f.uvarint(), f.uvarint(), f.uvarint()
	if f.err != nil || entries > math.MaxUint32 || perEntry > math.MaxUint32 || probes > math.MaxUint32 {
		r.fail("bloom filter header unreadable")
		return
	}
	if entries == 0 {
		return // automerge never probes an empty filter
	}
	bits := (entries*perEntry + 7) / 8
	switch {
	case perEntry == 0 || perEntry > maxBloomBitsPerEntry:
		r.failWith(errUnsafe, "bloom filter with %d bits per entry", perEntry)
	case probes == 0 || probes > maxBloomProbes:
		r.failWith(errUnsafe, "bloom filter with %d probes", probes)
	case bits > 1<<28: // automerge counts the bits in a uint32
		r.failWith(errUnsafe, "bloom filter of %d bytes", bits)
	case bits > uint64(len(b)-f.off):
		r.fail("bloom filter of %d entries has %d bytes of bits, wants %d", entries, len(b)-f.off, bits)
	}
}

// parseSyncMessage reads a sync message and checks it structurally,
// including what automerge's core would abort on. The changes are returned
// as they are; checkChanges reads them.
func parseSyncMessage(msg []byte) (*syncMessage, error) {
	if len(msg) == 0 || msg[0] != syncMessageV1 {
		return nil, fmt.Errorf("%w: not a version 1 sync message", errSyncFormat)
	}
	r := &syncReader{b: msg, off: 1}
	m := &syncMessage{raw: msg}
	m.heads = r.hashes()
	m.afterHeads = r.off
	m.need = r.hashes()
	haves := r.uvarint()
	for i := uint64(0); i < haves && r.err == nil; i++ {
		r.hashes() // lastSync
		r.bloom(r.bytes(r.uvarint()))
	}
	m.beforeChanges = r.off
	n := r.uvarint()
	if n > uint64(len(msg)-r.off) {
		r.fail("%d changes do not fit in the message", n)
	}
	for i := uint64(0); i < n && r.err == nil; i++ {
		m.changes = append(m.changes, r.bytes(r.uvarint()))
	}
	m.end = r.off
	if r.err != nil {
		return nil, r.err
	}
	return m, nil
}

// bare reports whether the message says its peer has nothing of the
// document: no heads and no changes (a request, or a peer's reset).
func (m *syncMessage) bare() bool { return len(m.heads) == 0 && len(m.changes) == 0 }

// carriesChanges reports whether a sync message automerge made carries
// changes. It reads only as far as their count.
func carriesChanges(msg []byte) bool {
	if len(msg) == 0 || msg[0] != syncMessageV1 {
		return false
	}
	r := &syncReader{b: msg, off: 1}
	r.hashes() // heads
	r.hashes() // need
	haves := r.uvarint()
	for i := uint64(0); i < haves && r.err == nil; i++ {
		r.hashes()
		r.bytes(r.uvarint())
	}
	n := r.uvarint()
	return r.err == nil && n > 0
}

// stripForReadOnly returns the message without its changes and with unknown
// heads replaced by ours, and reports whether it carried changes.
//
// automerge-go applies a sync message's changes as it receives it, so a
// message from a peer that may not write is rewritten first: heads the
// document does not have (the peer's own refused edits) are replaced by
// the document's heads. So the server never asks for the refused changes,
// and the sync loop ends: the server sees the peer as level with it and
// stops answering once the peer's bloom filter shows it lacks nothing.
// What the peer lacks is still sent, because automerge picks changes to
// send from the peer's "have" (last sync point and bloom filter), not from
// its heads.
func (m *syncMessage) stripForReadOnly(known func(hash []byte) bool, ours [][]byte) (*syncMessage, bool) {
	var kept [][]byte
	for _, h := range m.heads {
		if known(h) {
			kept = append(kept, h)
		}
	}
	if len(m.changes) == 0 && len(kept) == len(m.heads) {
		return m, false
	}
	if len(kept) < len(m.heads) {
		kept = sortedUnion(kept, ours)
	}
	out := make([]byte, 0, len(m.raw))
	out = append(out, syncMessageV1)
	out = binary.AppendUvarint(out, uint64(len(kept)))
	for _, h := range kept {
		out = append(out, h...)
	}
	afterHeads := len(out)
	out = append(out, m.raw[m.afterHeads:m.beforeChanges]...) // need and have, as sent
	beforeChanges := len(out)
	out = append(out, 0) // no changes
	end := len(out)
	out = append(out, m.raw[m.end:]...) // trailing fields
	return &syncMessage{raw: out, heads: kept, need: m.need,
		afterHeads: afterHeads, beforeChanges: beforeChanges, end: end}, len(m.changes) > 0
}

// withNeed returns the message asking for need instead of what it asked.
func (m *syncMessage) withNeed(need [][]byte) []byte {
	afterNeed := m.afterHeads + uvarintLen(uint64(len(m.need))) + 32*len(m.need)
	out := make([]byte, 0, len(m.raw)+32*len(need))
	out = append(out, m.raw[:m.afterHeads]...)
	out = binary.AppendUvarint(out, uint64(len(need)))
	for _, h := range need {
		out = append(out, h...)
	}
	return append(out, m.raw[afterNeed:]...)
}

func uvarintLen(v uint64) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutUvarint(b[:], v)
}

// appendBytes appends v as a sync message holds a change: its length
// (unsigned LEB128), then its bytes. The sandbox's frames use it too.
func appendBytes(b, v []byte) []byte {
	return append(binary.AppendUvarint(b, uint64(len(v))), v...)
}

// appendHeads appends heads as a sync message holds them: their count
// (unsigned LEB128), then the 32-byte hashes. A saved sync state and the
// sandbox's frames hold them the same way.
func appendHeads(b []byte, hs []automerge.ChangeHash) []byte {
	b = binary.AppendUvarint(b, uint64(len(hs)))
	for _, h := range hs {
		b = append(b, h[:]...)
	}
	return b
}

// withChanges returns the message with these changes in place of its own.
func (m *syncMessage) withChanges(changes [][]byte) *syncMessage {
	n := len(m.raw) - (m.end - m.beforeChanges) + binary.MaxVarintLen64
	for _, c := range changes {
		n += binary.MaxVarintLen64 + len(c)
	}
	out := make([]byte, 0, n)
	out = append(out, m.raw[:m.beforeChanges]...)
	out = binary.AppendUvarint(out, uint64(len(changes)))
	kept := make([][]byte, len(changes))
	for i, c := range changes {
		out = binary.AppendUvarint(out, uint64(len(c)))
		kept[i] = out[len(out) : len(out)+len(c) : len(out)+len(c)]
		out = append(out, c...)
	}
	end := len(out)
	out = append(out, m.raw[m.end:]...)
	return &syncMessage{raw: out, heads: m.heads, need: m.need, changes: kept,
		afterHeads: m.afterHeads, beforeChanges: m.beforeChanges, end: end}
}

// sortedUnion returns the distinct hashes of a and b in byte order, the
// order automerge keeps heads in.
func sortedUnion(a, b [][]byte) [][]byte {
	out := append(append([][]byte(nil), a...), b...)
	slices.SortFunc(out, bytes.Compare)
	return slices.CompactFunc(out, bytes.Equal)
}

// settled reports whether the message needs no answer: it carries no
// changes and needs nothing, every head it names is one the document has,
// and the peer was last sent a message at the document's current heads
// (sentAt), so that what it lacks is already on its way to it. Answering
// such a message (an acknowledgement of an earlier message, overtaken by a
// newer one) would only send the peer a second message with nothing new.
// When unsure, false.
func (m *syncMessage) settled(ours, sentAt []automerge.ChangeHash, known func([]byte) bool) bool {
	if sentAt == nil || !sameHeads(sentAt, ours) || len(m.changes) != 0 || len(m.need) != 0 {
		return false
	}
	for _, h := range m.heads {
		if !known(h) {
			return false
		}
	}
	return true
}

// namesExactly reports whether the message's heads are these.
func (sm *syncMessage) namesExactly(heads []automerge.ChangeHash) bool {
	if len(sm.heads) != len(heads) {
		return false
	}
	for i, h := range sm.heads {
		if string(h) != string(heads[i][:]) {
			return false
		}
	}
	return true
}
