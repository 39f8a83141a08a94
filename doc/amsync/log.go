package amsync

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
)

// Hash is a change hash: SHA-256 over the change chunk's type, length and
// body.
type Hash [32]byte

// ErrMissingDeps is returned by Add for a change whose dependencies the
// log does not hold.
var ErrMissingDeps = errors.New("a dependency of the change is missing")

// ErrTooLarge is returned by Add for a change of 2 GiB or more, or past a
// log's 2³¹-1 changes: what the log counts in 31 bits. The limits of the
// node (Limits) keep both far away.
var ErrTooLarge = errors.New("the change or the log is too large for the log")

// blockSize is the size of the log's arena blocks: changes are copied
// into blocks of this size (a larger change gets a block of its own), so
// the log grows without copying what it holds.
const blockSize = 256 << 10

// minBlock is the size of a log's first block.
const minBlock = 1 << 10

// entry is one change of the log: 20 bytes besides its hash.
type entry struct {
	hash   Hash
	block  uint32 // which arena block holds its bytes
	off    uint32 // where in the block
	size   uint32 // of what is kept, with stripped set if that is not all
	depOff uint32 // its dependencies: deps[depOff : depOff+nDeps], as log indices
	nDeps  uint32
}

// pageBits sizes the pages entries are kept in: 4,096 entries a page, so
// that a long log neither copies its entries as it grows nor holds room
// for as many again (the first page grows from small, for the many small
// documents).
const pageBits = 12

// Log is a document as its changes, in the order they were added (which
// is causal: a change comes after its dependencies).
type Log struct {
	pages [][]entry
	n     int32
	deps  []int32
	// index finds a change by its hash: a table of log indices plus one
	// (0: free), at most half full, probed from a slot the hash's first
	// 8 bytes pick through a seeded hash (hashes are a client's to
	// choose: unseeded, changes made to share low bits would pile up in
	// one cluster). A map of the same would hold 20-40 bytes a change;
	// this holds 8-16.
	index  []int32
	blocks [][]byte
	tail   int     // the block small changes go into; -1 before the first
	heads  []int32 // sorted by hash
	bytes  int64
	// saved is the log's first savedLen changes as automerge saves a
	// document (SetSaved); nil if none.
	saved    []byte
	savedLen int32
	// visited counts the changes the sync state's walks and tests have
	// visited, for the tests that hold their cost to what a peer sent
	// and is owed.
	visited int64
}

// NewLog returns an empty log.
func NewLog() *Log {
	return &Log{tail: -1}
}

// Len returns the number of changes.
func (l *Log) Len() int { return int(l.n) }

// Saved returns how many of the log's first changes the saved document
// holds (0: none), and its bytes (SetSaved, saved.go).
func (l *Log) Saved() (int, []byte) { return int(l.savedLen), l.saved }

// firstPage is the capacity a log's page p starts with: the first grows
// from 64 entries, the others are made whole.
func firstPage(p int) int {
	if p == 0 {
		return 64
	}
	return 1 << pageBits
}

// at returns the entry of the change at log index i.
func (l *Log) at(i int32) *entry { return &l.pages[i>>pageBits][i&(1<<pageBits-1)] }

func prefix(h *Hash) uint64 { return binary.LittleEndian.Uint64(h[:8]) }

// indexSeed seeds the index's slots, per process.
var indexSeed = maphash.MakeSeed()

// slot is where the probe for h starts in a table of mask+1 slots.
func slot(h *Hash, mask uint64) uint64 {
	return maphash.Comparable(indexSeed, prefix(h)) & mask
}

// find returns the log index of a change.
func (l *Log) find(h *Hash) (int32, bool) {
	if len(l.index) == 0 {
		return 0, false
	}
	mask := uint64(len(l.index) - 1)
	for k := slot(h, mask); ; k = (k + 1) & mask {
		v := l.index[k]
		if v == 0 {
			return 0, false
		}
		if l.at(v-1).hash == *h {
			return v - 1, true
		}
	}
}

// indexAdd puts change i, which the index does not hold, in it, doubling
// the table first if it would be more than half full.
func (l *Log) indexAdd(i int32) {
	if 2*int(i+1) > len(l.index) {
		old := l.index
		l.index = make([]int32, max(64, 2*len(old)))
		for _, v := range old {
			if v != 0 {
				l.indexPut(v - 1)
			}
		}
	}
	l.indexPut(i)
}

func (l *Log) indexPut(i int32) {
	mask := uint64(len(l.index) - 1)
	k := slot(&l.at(i).hash, mask)
	for l.index[k] != 0 {
		k = (k + 1) & mask
	}
	l.index[k] = i + 1
}

// Bytes returns the changes' bytes summed.
func (l *Log) Bytes() int64 { return l.bytes }

// Has reports whether the log holds the change.
func (l *Log) Has(h Hash) bool {
	_, ok := l.find(&h)
	return ok
}

// HasBytes reports whether the log holds the change with this 32-byte
// hash.
func (l *Log) HasBytes(h []byte) bool {
	if len(h) != len(Hash{}) {
		return false
	}
	_, ok := l.find((*Hash)(h))
	return ok
}

// Add appends a change: its hash, its dependencies (all of which the log
// must hold) and its bytes, which the log copies. A change the log holds
// already is not added again; Add reports whether it was new.
func (l *Log) Add(h Hash, deps []Hash, raw []byte) (bool, error) {
	if l.Has(h) {
		return false, nil
	}
	if len(raw) >= stripped || l.n == math.MaxInt32 {
		return false, ErrTooLarge
	}
	depOff := len(l.deps)
	for _, d := range deps {
		i, ok := l.find(&d)
		if !ok {
			l.deps = l.deps[:depOff]
			return false, fmt.Errorf("%w: %x", ErrMissingDeps, d[:8])
		}
		l.deps = append(l.deps, i)
	}
	kept, short := strip(&h, deps, raw)
	blk, off := l.store(kept)
	size := uint32(len(kept))
	if short {
		size |= stripped
	}
	n := l.n
	if int(n>>pageBits) == len(l.pages) {
		l.pages = append(l.pages, make([]entry, 0, firstPage(len(l.pages))))
	}
	l.pages[n>>pageBits] = append(l.pages[n>>pageBits], entry{hash: h, block: blk, off: off, size: size,
		depOff: uint32(depOff), nDeps: uint32(len(deps))})
	l.n++
	l.indexAdd(n)
	l.bytes += int64(len(raw))
	// The new change replaces the heads it depends on.
	ds := l.deps[depOff:]
	heads := l.heads[:0]
	for _, x := range l.heads {
		if !slices.Contains(ds, x) {
			heads = append(heads, x)
		}
	}
	at, _ := slices.BinarySearchFunc(heads, h, func(x int32, h Hash) int { return bytes.Compare(l.at(x).hash[:], h[:]) })
	l.heads = slices.Insert(heads, at, n)
	return true, nil
}

func (l *Log) store(raw []byte) (block, off uint32) {
	if len(raw) > blockSize/4 {
		// A block of its own; small changes go on filling the one before.
		l.blocks = append(l.blocks, bytes.Clone(raw))
		return uint32(len(l.blocks) - 1), 0
	}
	if l.tail < 0 || cap(l.blocks[l.tail])-len(l.blocks[l.tail]) < len(raw) {
		// Blocks start small, for the many small documents, and double up
		// to blockSize; a full block is never copied.
		size := minBlock
		if l.tail >= 0 {
			size = min(blockSize, 2*cap(l.blocks[l.tail]))
		}
		l.blocks = append(l.blocks, make([]byte, 0, max(size, len(raw))))
		l.tail = len(l.blocks) - 1
	}
	off = uint32(len(l.blocks[l.tail]))
	l.blocks[l.tail] = append(l.blocks[l.tail], raw...)
	return uint32(l.tail), off
}

// stripped, in an entry's size, says the log keeps the change without
// its header and its dependencies' hashes (strip).
const stripped = 1 << 31

// chunkMagic opens every automerge chunk.
var chunkMagic = []byte{0x85, 0x6f, 0x4a, 0x83}

// strip returns what the log keeps of a change's bytes, and whether that
// is less than them. Of a change chunk that is not compressed and is
// written as automerge writes one, it keeps what follows the
// dependencies: the header (the magic bytes, a checksum that is the
// hash's first 4 bytes, the chunk type and the body's length) and the
// dependencies (their hashes, which the log has) are put back by
// AppendChange, byte for byte. Anything else is kept whole.
func strip(h *Hash, deps []Hash, raw []byte) ([]byte, bool) {
	if len(raw) < 9 || !bytes.Equal(raw[:4], chunkMagic) || !bytes.Equal(raw[4:8], h[:4]) || raw[8] != 1 {
		return raw, false
	}
	size, n := binary.Uvarint(raw[9:])
	if n <= 0 || n != uvarintLen(size) || size != uint64(len(raw)-9-n) {
		return raw, false
	}
	body := raw[9+n:]
	count, m := binary.Uvarint(body)
	if m <= 0 || m != uvarintLen(count) || count != uint64(len(deps)) || len(body) < m+32*len(deps) {
		return raw, false
	}
	for k := range deps {
		if !bytes.Equal(body[m+32*k:m+32*k+32], deps[k][:]) {
			return raw, false
		}
	}
	return body[m+32*len(deps):], true
}

func uvarintLen(x uint64) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutUvarint(b[:], x)
}

// kept returns the bytes the log keeps of change i.
func (l *Log) kept(e *entry) []byte {
	size := e.size &^ stripped
	return l.blocks[e.block][e.off : e.off+size : e.off+size]
}

// ChangeLen returns the length of the change at log index i.
func (l *Log) ChangeLen(i int32) int {
	e := l.at(i)
	n := int(e.size &^ stripped)
	if e.size&stripped == 0 {
		return n
	}
	body := uvarintLen(uint64(e.nDeps)) + 32*int(e.nDeps) + n
	return 9 + uvarintLen(uint64(body)) + body
}

// AppendChange appends the bytes of the change at log index i to dst.
func (l *Log) AppendChange(dst []byte, i int32) []byte {
	e := l.at(i)
	b := l.kept(e)
	if e.size&stripped == 0 {
		return append(dst, b...)
	}
	ds := l.DepsAt(i)
	dst = append(dst, chunkMagic...)
	dst = append(dst, e.hash[:4]...)
	dst = append(dst, 1)
	dst = binary.AppendUvarint(dst, uint64(uvarintLen(uint64(len(ds)))+32*len(ds)+len(b)))
	dst = binary.AppendUvarint(dst, uint64(len(ds)))
	for _, d := range ds {
		dh := &l.at(d).hash
		dst = append(dst, dh[:]...)
	}
	return append(dst, b...)
}

// HashAt returns the hash of the change at log index i.
func (l *Log) HashAt(i int32) Hash { return l.at(i).hash }

// IndexOf returns the log index of a change.
func (l *Log) IndexOf(h Hash) (int32, bool) {
	return l.find(&h)
}

// DepsAt returns the log indices of the dependencies of change i.
func (l *Log) DepsAt(i int32) []int32 {
	e := l.at(i)
	return l.deps[e.depOff : e.depOff+e.nDeps]
}

// Heads returns the document's heads, sorted.
func (l *Log) Heads() []Hash {
	out := make([]Hash, len(l.heads))
	for i, x := range l.heads {
		out[i] = l.at(x).hash
	}
	return out
}

// IsHeads reports whether hs are exactly the log's heads (sorted).
func (l *Log) IsHeads(hs []Hash) bool {
	if len(hs) != len(l.heads) {
		return false
	}
	for i, x := range l.heads {
		if l.at(x).hash != hs[i] {
			return false
		}
	}
	return true
}

// Since returns, in log order, the indices of the changes that are not
// ancestors of (or among) heads; heads the log does not hold are
// ignored. Its cost grows with the changes between heads and the log's
// own heads, not with the log: it walks back from the log's heads and
// from the given ones at once, in descending log order, and stops once
// nothing left to visit can be a change the given heads lack.
func (l *Log) Since(heads []Hash) []int32 {
	out, _ := l.sinceWithin(heads, nil, nil, 0)
	return out
}

// sinceWithin is Since without the changes of skip (nil: none), drawing
// on work (nil: unbounded): each change visited costs a unit, and each
// one returned gives credit back (a unit for a change the peer is owed,
// none for a walk of the log's own). ok is false, and the list nil, once work
// runs out: a walk cannot cost more than the peer paid for.
func (l *Log) sinceWithin(heads []Hash, skip *spanSet, work *int, credit int) (out []int32, ok bool) {
	var from []int32
	for _, h := range heads {
		if i, ok := l.find(&h); ok {
			from = append(from, i)
		}
	}
	if len(from) == 0 {
		// Every change but skip's: its cost is known before it is paid.
		if skip == nil {
			skip = &spanSet{}
		}
		n := int(l.n) - skip.countIn(0, l.n)
		if work != nil {
			if *work+n*(credit-1) < 0 {
				return nil, false // unpaid: nothing done, nothing charged
			}
			*work += n * (credit - 1)
		}
		out = make([]int32, 0, n)
		skip.gaps(0, l.n, func(x int32) bool { out = append(out, x); return true })
		l.visited += int64(len(out))
		return out, true
	}
	return l.walk(l.heads, from, -1, skip, work, credit)
}

// walk returns, in log order, the changes reachable from ours (among
// them) that are not reachable from theirs, looking no lower than index
// floor, but for those of skip (nil: none); work is as sinceWithin's.
func (l *Log) walk(ours, theirs []int32, floor int32, skip *spanSet, work *int, credit int) ([]int32, bool) {
	// mark: 1 reachable from ours only, 2 from theirs (which wins).
	mark := make(map[int32]uint8, 2*(len(ours)+len(theirs)))
	var q idxHeap
	open := 0 // queued changes marked 1
	for _, x := range theirs {
		if mark[x] == 0 {
			q.push(x)
		}
		mark[x] = 2
	}
	for _, x := range ours {
		if mark[x] == 0 {
			mark[x] = 1
			q.push(x)
			open++
		}
	}
	var out []int32
	for open > 0 && q.len() > 0 {
		if work != nil {
			if *work--; *work < 0 {
				return nil, false
			}
		}
		l.visited++
		x := q.pop()
		if x <= floor {
			break
		}
		m := mark[x]
		if m == 1 {
			open--
			if skip == nil || !skip.has(x) {
				out = append(out, x)
				if work != nil {
					*work += credit
				}
			}
		}
		for _, d := range l.DepsAt(x) {
			switch dm := mark[d]; {
			case dm == 0:
				mark[d] = m
				q.push(d)
				if m == 1 {
					open++
				}
			case dm == 1 && m == 2:
				mark[d] = 2
				open--
			}
		}
	}
	slices.Reverse(out)
	return out, true
}

// Missing returns, sorted, the hashes among hs the log lacks.
func (l *Log) Missing(hs []Hash) []Hash {
	var out []Hash
	for _, h := range hs {
		if !l.Has(h) {
			out = append(out, h)
		}
	}
	sortHashes(out)
	return out
}

// withoutAncestors removes from s the changes that are ancestors of (or
// among) heads; heads the log lacks are ignored. It draws on work as
// sinceWithin does, a unit per change visited, given back for each
// change removed (paid for when it was sent), and stops where work runs
// out: what it leaves in s is then only kept longer than it need be.
func (l *Log) withoutAncestors(s *spanSet, heads []Hash, work *int) {
	if s.empty() {
		return
	}
	if l.IsHeads(heads) {
		s.clear() // everything is an ancestor of the log's heads
		return
	}
	var from []int32
	for _, h := range heads {
		if i, ok := l.find(&h); ok {
			from = append(from, i)
		}
	}
	if len(from) == 0 {
		return
	}
	// Walk back from heads no lower than s's lowest index, removing
	// every change met.
	floor := s.min() - 1
	seen := make(map[int32]bool)
	var q idxHeap
	for _, x := range from {
		if !seen[x] {
			seen[x] = true
			q.push(x)
		}
	}
	for q.len() > 0 && *work > 0 {
		*work--
		l.visited++
		x := q.pop()
		if x <= floor {
			break
		}
		if s.has(x) {
			s.remove(x)
			*work++ // paid for when it was sent
		}
		for _, d := range l.DepsAt(x) {
			if !seen[d] {
				seen[d] = true
				q.push(d)
			}
		}
	}
}

func sortHashes(hs []Hash) {
	slices.SortFunc(hs, func(a, b Hash) int { return bytes.Compare(a[:], b[:]) })
}

// idxHeap is a max-heap of log indices.
type idxHeap []int32

func (h idxHeap) len() int { return len(h) }

func (h *idxHeap) push(x int32) {
	*h = append(*h, x)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if s[p] >= s[i] {
			break
		}
		s[p], s[i] = s[i], s[p]
		i = p
	}
}

func (h *idxHeap) pop() int32 {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s = s[:n]
	for i := 0; ; {
		l, r, big := 2*i+1, 2*i+2, i
		if l < n && s[l] > s[big] {
			big = l
		}
		if r < n && s[r] > s[big] {
			big = r
		}
		if big == i {
			break
		}
		s[i], s[big] = s[big], s[i]
		i = big
	}
	*h = s
	return top
}
