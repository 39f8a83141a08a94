package amsync

import (
	"encoding/binary"
	"errors"
	"math"
	"math/bits"
)

// A bloom filter as automerge makes and reads them: how many hashes it
// holds, bits per hash and probes (unsigned LEB128), then the bits. An
// empty filter is no bytes at all.
const (
	bloomBitsPerEntry = 10
	bloomProbes       = 7
)

// ErrBloom is returned for a bloom filter that does not read, that is
// not made with automerge's parameters (10 bits per entry, 7 probes), or
// that has more bits set than its entries could set.
var ErrBloom = errors.New("unreadable bloom filter")

// Bloom is a bloom filter over change hashes.
type Bloom struct {
	entries, bitsPerEntry, probes uint32
	bits                          []byte
}

// NewBloom returns automerge's filter for these hashes.
func NewBloom(n int, hash func(i int) Hash) Bloom {
	b := newBloom(n)
	for i := range n {
		h := hash(i)
		b.add(&h)
	}
	return b
}

// newBloom returns an empty filter with room for n hashes: automerge's
// bits for n entries. It may hold fewer (the bits are then sparser: a
// filter that is grown as hashes come is made for more than it holds).
func newBloom(n int) Bloom {
	return Bloom{entries: uint32(n), bitsPerEntry: bloomBitsPerEntry, probes: bloomProbes,
		bits: make([]byte, (n*bloomBitsPerEntry+7)/8)}
}

// add puts a hash in the filter.
func (b Bloom) add(h *Hash) {
	b.probe(h, func(bit uint32) bool {
		b.bits[bit>>3] |= 1 << (bit & 7)
		return true
	})
}

// ParseBloom reads an encoded filter. Only automerge's parameters are
// taken: every automerge writes its filters with them, and a filter of
// more probes or fewer bits per entry would cost more per test, or say
// "held" of more, than its bytes.
func ParseBloom(b []byte) (Bloom, error) {
	if len(b) == 0 {
		return Bloom{}, nil
	}
	var v [3]uint64
	off := 0
	for i := range v {
		x, n := binary.Uvarint(b[off:])
		if n <= 0 || x > math.MaxUint32 {
			return Bloom{}, ErrBloom
		}
		v[i], off = x, off+n
	}
	f := Bloom{entries: uint32(v[0]), bitsPerEntry: uint32(v[1]), probes: uint32(v[2])}
	if f.entries == 0 {
		return Bloom{}, nil
	}
	if f.bitsPerEntry != bloomBitsPerEntry || f.probes != bloomProbes {
		return Bloom{}, ErrBloom
	}
	want := (v[0]*v[1] + 7) / 8
	if want > uint64(len(b)-off) {
		return Bloom{}, ErrBloom
	}
	f.bits = b[off : off+int(want)] // automerge ignores what follows
	// Each hash put in sets at most 7 bits: a filter with more set holds
	// more than it was made for (one with every bit set holds anything).
	set := 0
	for _, c := range f.bits {
		set += bits.OnesCount8(c)
	}
	if uint64(set) > bloomProbes*v[0] {
		return Bloom{}, ErrBloom
	}
	return f, nil
}

// Entries returns how many hashes the filter says it was made for.
func (b Bloom) Entries() int { return int(b.entries) }

// Encode returns the filter as automerge encodes it.
func (b Bloom) Encode() []byte {
	if b.entries == 0 {
		return nil
	}
	out := binary.AppendUvarint(nil, uint64(b.entries))
	out = binary.AppendUvarint(out, uint64(b.bitsPerEntry))
	out = binary.AppendUvarint(out, uint64(b.probes))
	return append(out, b.bits...)
}

// Contains reports whether the filter may hold the hash (never false for
// one it holds).
func (b Bloom) Contains(h *Hash) bool {
	if b.entries == 0 || len(b.bits) == 0 {
		return false
	}
	in := true
	b.probe(h, func(bit uint32) bool {
		if b.bits[bit>>3]&(1<<(bit&7)) == 0 {
			in = false
		}
		return in
	})
	return in
}

// probe calls f with each bit the hash sets, while f returns true.
func (b Bloom) probe(h *Hash, f func(bit uint32) bool) {
	m := uint64(len(b.bits)) * 8
	if m == 0 {
		return
	}
	x := uint64(binary.LittleEndian.Uint32(h[0:])) % m
	y := uint64(binary.LittleEndian.Uint32(h[4:])) % m
	z := uint64(binary.LittleEndian.Uint32(h[8:])) % m
	if !f(uint32(x)) {
		return
	}
	for i := uint32(1); i < b.probes; i++ {
		x = (x + y) % m
		y = (y + z) % m
		if !f(uint32(x)) {
			return
		}
	}
}
