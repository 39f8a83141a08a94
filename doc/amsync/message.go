package amsync

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The first byte of a sync message: version 1, or version 2, whose
// changes automerge sends as one entry (change chunks one after another,
// or a whole document chunk).
const (
	MessageV1 = 0x42
	MessageV2 = 0x43
)

// ourFlags is the flags section every message ends with: one byte, the
// capability "reads version 2 messages" as automerge 0.6 wrote it, which
// every automerge since reads as a flags section (its presence says the
// peer reads version 2; the byte itself has no bit of the later bitfield
// set). It advertises nothing else: not sync reset, whose meaning the
// engine does not keep.
var ourFlags = []byte{1, 0x02}

// ErrFormat is returned for a message that does not read as a sync
// message.
var ErrFormat = errors.New("unreadable sync message")

// ErrBounds is returned for a message that reads but has more have
// entries than MaxHaves, or (CheckHeads) names more heads than a peer of
// its document can have.
var ErrBounds = errors.New("sync message past the bounds")

// MaxHaves bounds a message's have entries: automerge sends one at most.
// Its need list has no bound of its own beyond the message's size: what
// it asks for is taken once each, and only what the log holds.
const MaxHaves = 8

// minChange is the fewest bytes of a change: a chunk's magic, checksum,
// type and length. A shorter entry cannot be one; refusing it as it is
// read keeps a message of empty entries from costing a slice header (24
// bytes) per byte of the message.
const minChange = 10

// Have is one entry of a message's have list: the sender had every change
// up to LastSync, and those since that its bloom filter holds.
type Have struct {
	LastSync []Hash
	Bloom    []byte // as encoded; empty for an empty filter
}

// Message is a sync message. Its hash lists are sorted.
type Message struct {
	// V2 says the message is version 2 (MessageV2). Decode sets it from
	// the message; Encode writes it.
	V2      bool
	Heads   []Hash
	Need    []Hash
	Have    []Have
	Changes [][]byte
	// Flags are the bits of the flags section automerge 0.6 and later
	// append (flagSyncReset and so on); HasFlags says it was there.
	Flags    byte
	HasFlags bool
}

// Flag bits of automerge's flags section.
const (
	flagSyncReset = 1 << 0
	flagMarker    = 0x80
)

type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", ErrFormat, fmt.Sprintf(format, args...))
	}
}

func (r *reader) uvarint() uint64 {
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

func (r *reader) bytes(n uint64) []byte {
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)-r.off) {
		r.fail("%d bytes wanted at byte %d, %d left", n, r.off, len(r.b)-r.off)
		return nil
	}
	out := r.b[r.off : r.off+int(n) : r.off+int(n)]
	r.off += int(n)
	return out
}

func (r *reader) hashes() []Hash {
	n := r.uvarint()
	if n > uint64(len(r.b)-r.off)/32 {
		r.fail("%d hashes do not fit in the message", n)
		return nil
	}
	if n == 0 {
		return nil
	}
	out := make([]Hash, n)
	for i := range out {
		copy(out[i][:], r.bytes(32))
	}
	return out
}

// Decode reads a sync message of version 1 or 2. Changes and blooms
// alias b. Each entry of the changes is split into the chunks it holds
// one after another (automerge reads all of them as one stream, and a
// version 2 message sends all its changes in one entry): Changes holds
// one chunk each, a change or a document; an entry that does not split
// into whole chunks is kept as it is, for the guard to refuse. A bloom
// filter automerge would refuse, or one past the bounds, fails the
// message.
func Decode(b []byte) (*Message, error) {
	if len(b) == 0 || (b[0] != MessageV1 && b[0] != MessageV2) {
		return nil, fmt.Errorf("%w: not a sync message of version 1 or 2", ErrFormat)
	}
	r := &reader{b: b, off: 1}
	m := &Message{V2: b[0] == MessageV2}
	m.Heads = r.hashes()
	m.Need = r.hashes()
	n := r.uvarint()
	if n > uint64(len(b)-r.off) {
		r.fail("%d have entries do not fit in the message", n)
	}
	if n > MaxHaves && r.err == nil {
		r.err = fmt.Errorf("%w: %d have entries, over %d", ErrBounds, n, MaxHaves)
	}
	for i := uint64(0); i < n && r.err == nil; i++ {
		h := Have{LastSync: r.hashes(), Bloom: r.bytes(r.uvarint())}
		if r.err == nil {
			if _, err := ParseBloom(h.Bloom); err != nil && r.err == nil {
				r.err = fmt.Errorf("%w: have %d: %w", ErrFormat, i, err)
			}
		}
		m.Have = append(m.Have, h)
	}
	n = r.uvarint()
	if n > uint64(len(b)-r.off)/(1+minChange) {
		r.fail("%d changes do not fit in the message", n)
	}
	for i := uint64(0); i < n && r.err == nil; i++ {
		size := r.uvarint()
		if size < minChange {
			r.fail("change %d of %d bytes: too short to be a change", i, size)
		}
		m.Changes = appendChunks(m.Changes, r.bytes(size))
	}
	if r.err == nil && r.off < len(b) {
		m.HasFlags = true
		for _, c := range r.bytes(r.uvarint()) {
			if c&flagMarker != 0 {
				m.Flags |= c &^ flagMarker
			}
		}
	}
	if r.err != nil {
		return nil, r.err
	}
	return m, nil
}

// appendChunks appends the chunks of entry, one after another, or the
// entry whole if it does not split into whole chunks (each at least
// minChange bytes, so the slices cost at most a few times the bytes).
func appendChunks(out [][]byte, entry []byte) [][]byte {
	n := len(out)
	for b := entry; len(b) > 0; {
		size := chunkLen(b)
		if size == 0 {
			return append(out[:n], entry)
		}
		out = append(out, b[:size:size])
		b = b[size:]
	}
	return out
}

// chunkLen returns the length of the chunk at the start of b (its magic,
// checksum, type, length and body), or 0 if b does not start with a
// whole one.
func chunkLen(b []byte) int {
	if len(b) < minChange || string(b[:4]) != string(chunkMagic) {
		return 0
	}
	size, k := binary.Uvarint(b[9:])
	if k <= 0 || size > uint64(len(b)-9-k) {
		return 0
	}
	return 9 + k + int(size)
}

// Encode returns the message's bytes, with the flags section every
// message carries (ourFlags).
func (m *Message) Encode() []byte {
	size := 0
	for _, c := range m.Changes {
		size += binary.MaxVarintLen64 + len(c)
	}
	b := m.appendHeader(make([]byte, 0, m.headerSize()+size), len(m.Changes))
	for _, c := range m.Changes {
		b = binary.AppendUvarint(b, uint64(len(c)))
		b = append(b, c...)
	}
	return append(b, ourFlags...)
}

// size bounds the message's encoded bytes.
func (m *Message) size() int {
	n := m.headerSize()
	for _, c := range m.Changes {
		n += len(c)
	}
	return n
}

// headerSize bounds what appendHeader appends.
func (m *Message) headerSize() int {
	n := 1 + 3*binary.MaxVarintLen64 + 32*(len(m.Heads)+len(m.Need)) + len(ourFlags)
	for _, h := range m.Have {
		n += 2*binary.MaxVarintLen64 + 32*len(h.LastSync) + len(h.Bloom)
	}
	return n
}

// appendHeader appends all but the changes' bytes and the flags: the
// version, heads, need, have and the number of changes.
func (m *Message) appendHeader(b []byte, changes int) []byte {
	if m.V2 {
		b = append(b, MessageV2)
	} else {
		b = append(b, MessageV1)
	}
	b = appendHashes(b, m.Heads)
	b = appendHashes(b, m.Need)
	b = appendHaves(b, m.Have)
	return binary.AppendUvarint(b, uint64(changes))
}

// appendHaves appends a have list as a message holds it.
func appendHaves(b []byte, haves []Have) []byte {
	b = binary.AppendUvarint(b, uint64(len(haves)))
	for _, h := range haves {
		b = appendHashes(b, h.LastSync)
		b = binary.AppendUvarint(b, uint64(len(h.Bloom)))
		b = append(b, h.Bloom...)
	}
	return b
}

func appendHashes(b []byte, hs []Hash) []byte {
	b = binary.AppendUvarint(b, uint64(len(hs)))
	for i := range hs {
		b = append(b, hs[i][:]...)
	}
	return b
}
