package amcheck

import (
	"fmt"
	"math"
	"unicode/utf8"
)

// A column specification is a u32: column ID << 4 | deflate bit (8) |
// column type (0-7). These are the columns of a change chunk automerge
// 0.5 reads; it requires specs in increasing order and no duplicates.
const (
	specObjActor  = 0x01 // obj ID actor index, RLE uint
	specObjCtr    = 0x02 // obj ID counter, RLE uint
	specKeyActor  = 0x11 // list element key actor index, RLE uint
	specKeyCtr    = 0x13 // list element key counter, delta
	specKeyStr    = 0x15 // map key, RLE string
	specInsert    = 0x34 // insert flag, boolean
	specAction    = 0x42 // action, RLE uint
	specValMeta   = 0x56 // value type and length, RLE uint
	specValRaw    = 0x57 // value bytes, raw
	specPredNum   = 0x70 // predecessor count (group), RLE uint
	specPredActor = 0x71 // predecessor actor index, RLE uint
	specPredCtr   = 0x73 // predecessor counter, delta
	specExpand    = 0x94 // mark expand flag, boolean
	specMarkName  = 0xa5 // mark name, RLE string

	deflateBit = 0x08
)

var columnNames = map[uint32]string{
	specObjActor:  "obj actor",
	specObjCtr:    "obj counter",
	specKeyActor:  "key actor",
	specKeyCtr:    "key counter",
	specKeyStr:    "key string",
	specInsert:    "insert",
	specAction:    "action",
	specValMeta:   "value metadata",
	specValRaw:    "value raw",
	specPredNum:   "pred group",
	specPredActor: "pred actor",
	specPredCtr:   "pred counter",
	specExpand:    "expand",
	specMarkName:  "mark name",
}

type colMeta struct {
	spec   uint32
	length uint64
}

func readColumnMeta(r *body) ([]colMeta, error) {
	n, err := r.uvarint("column count")
	if err != nil {
		return nil, err
	}
	if n > uint64(r.left()/2) {
		return nil, malformed("%d columns, %d bytes left", n, r.left())
	}
	cols := make([]colMeta, 0, n)
	var total uint64
	for i := uint64(0); i < n; i++ {
		spec, err := r.uvarint("column spec")
		if err != nil {
			return nil, err
		}
		if spec > math.MaxUint32 {
			return nil, malformed("column spec %d does not fit 32 bits", spec)
		}
		length, err := r.uvarint("column length")
		if err != nil {
			return nil, err
		}
		total += length
		if length > uint64(r.left()) || total > uint64(r.left()) {
			return nil, malformed("columns take %d or more bytes, %d left", total, r.left())
		}
		s := uint32(spec)
		if s&deflateBit != 0 {
			// automerge refuses compressed columns in change chunks
			// ("change contained compressed columns").
			return nil, malformed("column spec %#x is deflate-compressed; automerge refuses compressed columns in a change", s)
		}
		if _, ok := columnNames[s]; !ok {
			return nil, malformed("unknown column spec %#x (id %d, type %d)", s, s>>4, s&7)
		}
		if len(cols) > 0 && s <= cols[len(cols)-1].spec {
			return nil, malformed("column spec %#x after %#x: columns must be in strictly increasing order", s, cols[len(cols)-1].spec)
		}
		cols = append(cols, colMeta{spec: s, length: length})
	}
	return cols, nil
}

// Column kinds, by how their data is encoded.
const (
	kindUint  = iota // RLE of unsigned LEB128
	kindDelta        // RLE of signed LEB128 deltas
	kindStr          // RLE of length-prefixed UTF-8
	kindBool         // alternating run counts, starting with false
)

// seg is a stretch of rows of one column with one value: a repeated run,
// one value of a literal run, a null run, or a boolean run. Segments are
// what lets a run of 10^12 rows be counted in one step.
type seg struct {
	n    uint64 // rows
	null bool
	u    uint64 // kindUint value; kindBool value (0 or 1)
	d    int64  // kindDelta: the delta each row adds
	s    []byte // kindStr value
}

// colIter walks one column's segments. A column that is absent from the
// change yields one endless null segment.
type colIter struct {
	name    string
	kind    int
	present bool
	b       []byte
	off     int
	lit     uint64 // values left in the current literal run
	counts  int    // boolean counts read
}

func newCol(name string, kind int, data []byte, present bool) colIter {
	return colIter{name: name, kind: kind, b: data, present: present}
}

func (c *colIter) errf(format string, args ...any) error {
	return malformed("column %s at byte %d: %s", c.name, c.off, fmt.Sprintf(format, args...))
}

// next returns the next segment, or ok false at the end of the column.
func (c *colIter) next() (s seg, ok bool, err error) {
	if !c.present {
		return seg{n: math.MaxUint64, null: true}, true, nil
	}
	if c.kind == kindBool {
		return c.nextBool()
	}
	if c.lit > 0 {
		c.lit--
		s.n = 1
		err = c.value(&s)
		return s, err == nil, err
	}
	if c.off >= len(c.b) {
		return seg{}, false, nil
	}
	count, k, err := looseVarint(c.b[c.off:])
	if err != nil {
		return seg{}, false, c.errf("run length: %v", err)
	}
	c.off += k
	switch {
	case count > 0:
		s.n = uint64(count)
		err = c.value(&s)
	case count < 0:
		if count == math.MinInt64 {
			return seg{}, false, c.errf("literal run length %d", count)
		}
		c.lit = uint64(-count) - 1
		s.n = 1
		err = c.value(&s)
	default:
		var nulls uint64
		nulls, k, err = looseUvarint(c.b[c.off:])
		if err != nil {
			return seg{}, false, c.errf("null run length: %v", err)
		}
		c.off += k
		if nulls == 0 {
			return seg{}, false, c.errf("null run of length 0")
		}
		s.n, s.null = nulls, true
	}
	return s, err == nil, err
}

func (c *colIter) value(s *seg) error {
	switch c.kind {
	case kindUint:
		v, k, err := looseUvarint(c.b[c.off:])
		if err != nil {
			return c.errf("value: %v", err)
		}
		c.off += k
		s.u = v
	case kindDelta:
		v, k, err := looseVarint(c.b[c.off:])
		if err != nil {
			return c.errf("value: %v", err)
		}
		c.off += k
		s.d = v
	case kindStr:
		n, k, err := looseUvarint(c.b[c.off:])
		if err != nil {
			return c.errf("string length: %v", err)
		}
		if n > uint64(len(c.b)-c.off-k) {
			return c.errf("string of %d bytes, %d left", n, len(c.b)-c.off-k)
		}
		c.off += k
		p := c.b[c.off : c.off+int(n)]
		if !utf8.Valid(p) {
			return c.errf("string is not UTF-8")
		}
		c.off += int(n)
		s.s = p
	}
	return nil
}

func (c *colIter) nextBool() (seg, bool, error) {
	for {
		if c.off >= len(c.b) {
			return seg{}, false, nil
		}
		n, k, err := looseUvarint(c.b[c.off:])
		if err != nil {
			return seg{}, false, c.errf("run length: %v", err)
		}
		c.off += k
		c.counts++
		// The first count is of false values, then they alternate.
		v := c.counts%2 == 0
		if n == 0 {
			// Only a column starting with true has a zero (its first
			// count); automerge skips others, we refuse them.
			if c.counts != 1 || c.off >= len(c.b) {
				return seg{}, false, c.errf("boolean run of length 0")
			}
			continue
		}
		var u uint64
		if v {
			u = 1
		}
		return seg{n: n, u: u}, true, nil
	}
}
