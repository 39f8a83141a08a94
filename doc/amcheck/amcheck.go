package amcheck

import (
	"bytes"
	"compress/flate"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"unicode/utf8"
)

// ErrMalformed marks input that is not a change chunk automerge could
// read consistently. The wrapping error says what is wrong and where.
var ErrMalformed = errors.New("amcheck: malformed change")

// ErrTooLarge marks a well-formed change that exceeds a Limits field. The
// wrapping error names the limit and both numbers.
var ErrTooLarge = errors.New("amcheck: change exceeds limits")

// Limits bound one change. A zero field means no limit; use zero Limits
// only for changes from a trusted source (such as automerge itself).
type Limits struct {
	// MaxOps is the most operations (rows, after run-length expansion)
	// one change may hold.
	MaxOps int
	// MaxExpandedBytes is the most bytes one change may expand to; see
	// Change.Expanded for what is counted. It also caps how far a
	// compressed chunk is inflated.
	MaxExpandedBytes int64
	// ListOps asks for the change's operations in Change.OpList.
	ListOps bool
	// BeforeList, if set, is told how many operations and predecessors
	// the list will hold before it is made; an error it returns is the
	// change's, and no list is made. A caller charges the list's memory
	// with it.
	BeforeList func(ops, preds int) error
	// Canonical refuses a change whose columns automerge's encoder would
	// write otherwise (canonical.go): automerge cannot load a document
	// saved with such a change.
	Canonical bool
}

// Change is what ParseChange reads from a change chunk.
type Change struct {
	// Hash is the change's hash, as automerge computes it: SHA-256 over
	// the chunk type (1), the length and the uncompressed chunk data.
	Hash [32]byte
	// Deps are the hashes of the changes this one depends on.
	Deps [][32]byte
	// Actor is the actor ID of the change's author (non-empty).
	Actor []byte
	// Seq is the change's sequence number among its actor's changes
	// (at least 1).
	Seq uint64
	// StartOp is the counter of the change's first operation (at least
	// 1); its operations take counters StartOp to StartOp+Ops-1.
	StartOp uint64
	// Time is the change's timestamp, in milliseconds since the epoch.
	Time int64
	// Message is the change's commit message.
	Message string
	// Ops is the number of operations, counted after run-length
	// expansion.
	Ops int
	// Expanded is what the change expands to in bytes: the uncompressed
	// chunk, plus, for every operation, its map key, its mark name and
	// its value as automerge materializes them (a run-length run of one
	// key repeated N times counts N times), plus 8 bytes for every
	// predecessor reference.
	Expanded int64
	// OtherActors is the number of other actors the change's operations
	// refer to.
	OtherActors int
	// Actors are the actor IDs the change's ops name by index: its own
	// actor first, then the others in the order the change lists them.
	Actors [][]byte
	// OpList holds the change's operations, when Limits.ListOps asked
	// for them (oplist.go), and Values their values' bytes, one after
	// another (Op.ValueAt).
	OpList []Op
	Values []byte
	// Extra is what the chunk holds after its columns, which automerge
	// keeps with the change but does not read.
	Extra []byte
	// Compressed reports a compressed (type 2) chunk. automerge's sync
	// message decoder does not inflate such chunks (it reads their
	// compressed bytes as if they were a change body), so a change from a
	// sync message must not be compressed: ParseSyncChange refuses them.
	Compressed bool
}

// ActorHex returns the change's actor ID in automerge's hex form.
func (c *Change) ActorHex() string { return hex.EncodeToString(c.Actor) }

var magic = [4]byte{0x85, 0x6f, 0x4a, 0x83}

const (
	chunkDocument   = 0
	chunkChange     = 1
	chunkCompressed = 2

	// maxInflate caps inflating a compressed chunk when no
	// MaxExpandedBytes is set.
	maxInflate = 1 << 30
	// maxCounter is the largest op counter automerge can hold (it keeps
	// counters as u32 and panics beyond).
	maxCounter = math.MaxUint32
)

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

func tooLarge(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrTooLarge, fmt.Sprintf(format, args...))
}

// Chunks counts the chunks b holds one after another, reading only their
// headers: a caller's estimate, as it stops at the first bytes that do
// not begin a chunk and checks nothing else.
func Chunks(b []byte) int {
	n := 0
	for len(b) >= 9 && bytes.Equal(b[:4], magic[:]) {
		size, k, err := strictUvarint(b[9:])
		if err != nil || size > uint64(len(b)-9-k) {
			break
		}
		b = b[9+k+int(size):]
		n++
	}
	return n
}

// ParseChange checks the change chunk at the start of b and returns its
// header, its sizes and the number of bytes the chunk takes; bytes after
// the chunk are not looked at. It accepts plain (type 1) and compressed
// (type 2) change chunks; document chunks are refused.
//
// The error wraps ErrMalformed or ErrTooLarge.
func ParseChange(b []byte, lim Limits) (Change, int, error) {
	if len(b) < 4 {
		return Change{}, 0, malformed("%d bytes, too short for a chunk", len(b))
	}
	if !bytes.Equal(b[:4], magic[:]) {
		return Change{}, 0, malformed("bad magic % x", b[:4])
	}
	if len(b) < 9 {
		return Change{}, 0, malformed("chunk header truncated at %d bytes", len(b))
	}
	var sum [4]byte
	copy(sum[:], b[4:8])
	typ := b[8]
	n, k, err := strictUvarint(b[9:])
	if err != nil {
		return Change{}, 0, malformed("chunk length: %v", err)
	}
	hdr := 9 + k
	if n > uint64(len(b)-hdr) {
		return Change{}, 0, malformed("chunk says %d bytes of data, %d follow", n, len(b)-hdr)
	}
	end := hdr + int(n)
	data := b[hdr:end]

	var c Change
	switch typ {
	case chunkChange:
	case chunkCompressed:
		c.Compressed = true
		data, err = inflate(data, lim)
		if err != nil {
			return Change{}, 0, err
		}
	case chunkDocument:
		return Change{}, 0, malformed("document chunk, not a change")
	default:
		return Change{}, 0, malformed("unknown chunk type %d", typ)
	}

	c.Hash = chunkHash(chunkChange, data)
	if !bytes.Equal(c.Hash[:4], sum[:]) {
		return Change{}, 0, malformed("checksum mismatch: header has %x, data hashes to %x", sum, c.Hash[:4])
	}
	// The chunk as automerge holds it: header and uncompressed data.
	c.Expanded = int64(9 + ulebLen(uint64(len(data))) + len(data))
	if lim.MaxExpandedBytes > 0 && c.Expanded > lim.MaxExpandedBytes {
		return Change{}, 0, tooLarge("chunk is %d bytes, MaxExpandedBytes is %d", c.Expanded, lim.MaxExpandedBytes)
	}
	if err := parseBody(&c, data, lim); err != nil {
		return Change{}, 0, err
	}
	return c, end, nil
}

// ParseChanges checks a sequence of change chunks back to back, as
// automerge.SaveChanges writes them, each against lim.
func ParseChanges(b []byte, lim Limits) ([]Change, error) {
	var out []Change
	for off := 0; off < len(b); {
		c, n, err := ParseChange(b[off:], lim)
		if err != nil {
			return nil, fmt.Errorf("change %d at byte %d: %w", len(out), off, err)
		}
		out = append(out, c)
		off += n
	}
	return out, nil
}

// ParseSyncChange checks one entry of a sync message's changes list. It
// is ParseChange, stricter in the two ways automerge's sync message
// decoder needs: the entry must be exactly one chunk, and the chunk must
// not be compressed (that decoder neither checks the chunk type nor
// inflates, so it would read a compressed chunk's deflate stream as a
// change body that ParseChange never saw).
func ParseSyncChange(entry []byte, lim Limits) (Change, error) {
	c, n, err := ParseChange(entry, lim)
	if err != nil {
		return Change{}, err
	}
	if c.Compressed {
		return Change{}, malformed("compressed chunk in a sync message")
	}
	if n != len(entry) {
		return Change{}, malformed("%d bytes after the chunk", len(entry)-n)
	}
	return c, nil
}

func chunkHash(typ byte, data []byte) [32]byte {
	h := sha256.New()
	var pre [11]byte
	p := append(pre[:0], typ)
	p = appendUleb(p, uint64(len(data)))
	h.Write(p)
	h.Write(data)
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// inflate decompresses a type 2 chunk's deflate stream, refusing to go
// past the limit.
func inflate(z []byte, lim Limits) ([]byte, error) {
	max := int64(maxInflate)
	if lim.MaxExpandedBytes > 0 && lim.MaxExpandedBytes < max {
		max = lim.MaxExpandedBytes
	}
	src := bytes.NewReader(z)
	r := flate.NewReader(src)
	defer r.Close()
	var buf bytes.Buffer
	n, err := io.Copy(&buf, io.LimitReader(r, max+1))
	if err != nil {
		return nil, malformed("compressed chunk: %v", err)
	}
	if n > max {
		if lim.MaxExpandedBytes > 0 && max == lim.MaxExpandedBytes {
			return nil, tooLarge("compressed chunk inflates to over %d bytes (MaxExpandedBytes)", max)
		}
		return nil, tooLarge("compressed chunk inflates to over %d bytes", max)
	}
	if src.Len() != 0 {
		return nil, malformed("compressed chunk: %d bytes after the deflate stream", src.Len())
	}
	return buf.Bytes(), nil
}

// body reads the change header fields in automerge's strict dialect.
type body struct {
	b   []byte
	off int
}

func (r *body) uvarint(what string) (uint64, error) {
	v, n, err := strictUvarint(r.b[r.off:])
	if err != nil {
		return 0, malformed("%s at byte %d: %v", what, r.off, err)
	}
	r.off += n
	return v, nil
}

func (r *body) varint(what string) (int64, error) {
	v, n, err := strictVarint(r.b[r.off:])
	if err != nil {
		return 0, malformed("%s at byte %d: %v", what, r.off, err)
	}
	r.off += n
	return v, nil
}

func (r *body) take(n uint64, what string) ([]byte, error) {
	if n > uint64(len(r.b)-r.off) {
		return nil, malformed("%s: %d bytes at byte %d, %d left", what, n, r.off, len(r.b)-r.off)
	}
	p := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return p, nil
}

func (r *body) left() int { return len(r.b) - r.off }

// parseBody reads the change header (deps, actor, seq, start op, time,
// message, other actors), the column metadata and the columns.
func parseBody(c *Change, data []byte, lim Limits) error {
	r := &body{b: data}
	nd, err := r.uvarint("dependency count")
	if err != nil {
		return err
	}
	if nd > uint64(r.left()/32) {
		return malformed("%d dependencies, %d bytes left", nd, r.left())
	}
	if nd > 0 {
		c.Deps = make([][32]byte, nd)
		for i := range c.Deps {
			copy(c.Deps[i][:], r.b[r.off:r.off+32])
			r.off += 32
		}
		if nd > 1 {
			seen := make(map[[32]byte]struct{}, nd)
			for _, d := range c.Deps {
				if _, dup := seen[d]; dup {
					return malformed("dependency %x listed twice", d)
				}
				seen[d] = struct{}{}
			}
		}
	}

	actor, err := lengthPrefixed(r, "actor ID")
	if err != nil {
		return err
	}
	if len(actor) == 0 {
		return malformed("empty actor ID")
	}
	c.Actor = bytes.Clone(actor)

	if c.Seq, err = r.uvarint("seq"); err != nil {
		return err
	}
	if c.Seq == 0 {
		return malformed("seq is 0")
	}
	if c.StartOp, err = r.uvarint("start op"); err != nil {
		return err
	}
	if c.StartOp == 0 {
		return malformed("start op is 0")
	}
	if c.StartOp > maxCounter {
		return malformed("start op %d exceeds automerge's counter limit %d", c.StartOp, uint64(maxCounter))
	}
	if c.Time, err = r.varint("time"); err != nil {
		return err
	}
	msg, err := lengthPrefixed(r, "message")
	if err != nil {
		return err
	}
	if !utf8.Valid(msg) {
		return malformed("message is not UTF-8")
	}
	c.Message = string(msg)

	na, err := r.uvarint("other actor count")
	if err != nil {
		return err
	}
	if na > uint64(r.left()) {
		return malformed("%d other actors, %d bytes left", na, r.left())
	}
	if na > math.MaxUint32-1 {
		return malformed("%d other actors", na)
	}
	c.OtherActors = int(na)
	actors := [][]byte{c.Actor}
	if na > 0 {
		actors = make([][]byte, 1, na+1)
		actors[0] = c.Actor
		seen := make(map[string]struct{}, na+1)
		seen[string(actor)] = struct{}{}
		for i := 0; i < int(na); i++ {
			a, err := lengthPrefixed(r, "other actor ID")
			if err != nil {
				return err
			}
			if len(a) == 0 {
				return malformed("other actor %d is empty", i)
			}
			if _, dup := seen[string(a)]; dup {
				return malformed("actor %x listed twice", a)
			}
			seen[string(a)] = struct{}{}
			actors = append(actors, a)
		}
	}

	cols, err := readColumnMeta(r)
	if err != nil {
		return err
	}
	// The column data follows the metadata; anything after it is extra
	// bytes, which automerge keeps but does not interpret.
	var total uint64
	for _, col := range cols {
		total += col.length
	}
	colData, err := r.take(total, "column data")
	if err != nil {
		return err
	}
	if r.left() > 0 {
		c.Extra = bytes.Clone(r.b[r.off:])
	}
	c.Actors = make([][]byte, len(actors))
	for i := range actors {
		c.Actors[i] = c.actorID(uint64(i), actors)
	}
	return checkOps(c, actors, cols, colData, lim)
}

func lengthPrefixed(r *body, what string) ([]byte, error) {
	n, err := r.uvarint(what + " length")
	if err != nil {
		return nil, err
	}
	return r.take(n, what)
}

// actorID returns a copy of the actor ID at index i (0 is the change's
// own actor, already copied).
func (c *Change) actorID(i uint64, actors [][]byte) []byte {
	if i == 0 {
		return c.Actor
	}
	return bytes.Clone(actors[i])
}
