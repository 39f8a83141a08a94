package amdoc

import (
	"encoding/binary"

	"github.com/tandemhq/tandem/doc/amcheck"
)

// Column encoders, writing each value as automerge's encoder does: runs
// of two or more equal values as a run, other values in literal runs,
// nulls in null runs, a column of nulls only as nothing. amcheck reads
// the same forms (and refuses a change written otherwise); a saved
// document must use them too, because automerge rebuilds every change
// from the document's columns and checks the changes' hashes.

// Column types, the low three bits of a column's spec.
const (
	typeGroup = iota
	typeActor
	typeUint
	typeDelta
	typeBool
	typeString
	typeValueMeta
	typeValueRaw
)

func spec(id, typ uint32) uint32 { return id<<4 | typ }

// A value of an RLE column: a number or a string (nulls are counted
// apart: rle.nulls).
type rleValue struct {
	u uint64 // uint columns; a delta column's delta as int64 bits
	s string
}

// rle writes a run-length column of unsigned numbers, signed deltas or
// strings.
type rle struct {
	out []byte
	typ uint32 // typeUint, typeDelta (values are deltas) or typeString

	// The state of the value being written: nulls pending, or a run of
	// one value (n of it), or a literal run (litN values written to lit,
	// then cur) being built.
	nulls   uint64
	cur     rleValue
	n       uint64
	lit     []byte
	litN    int64
	anyVals bool
}

func (e *rle) put(v rleValue) {
	switch {
	case e.nulls > 0:
		e.flushNulls()
		e.cur, e.n = v, 1
	case e.n == 0 && e.litN == 0:
		e.cur, e.n = v, 1
	case e.litN > 0:
		// Building a literal run whose last value is cur (n == 1).
		if e.cur == v {
			e.flushLiteral(false)
			e.n = 2
			return
		}
		e.addLiteral(e.cur)
		e.cur = v
	case e.cur == v:
		e.n++
	case e.n == 1:
		e.addLiteral(e.cur)
		e.cur = v
	default:
		e.flushRun()
		e.cur, e.n = v, 1
	}
	e.anyVals = true
}

func (e *rle) putNull() {
	switch {
	case e.nulls > 0:
	case e.litN > 0 || e.n == 1:
		e.flushLiteral(true)
	case e.n > 1:
		e.flushRun()
	}
	e.n = 0
	e.nulls++
}

// appendValue writes one value as the column holds it.
func (e *rle) appendValue(out []byte, v rleValue) []byte {
	switch e.typ {
	case typeDelta:
		return amcheck.AppendSleb(out, int64(v.u))
	case typeString:
		out = binary.AppendUvarint(out, uint64(len(v.s)))
		return append(out, v.s...)
	default:
		return binary.AppendUvarint(out, v.u)
	}
}

func (e *rle) addLiteral(v rleValue) {
	e.lit = e.appendValue(e.lit, v)
	e.litN++
}

func (e *rle) flushNulls() {
	e.out = amcheck.AppendSleb(e.out, 0)
	e.out = binary.AppendUvarint(e.out, e.nulls)
	e.nulls = 0
}

func (e *rle) flushRun() {
	e.out = amcheck.AppendSleb(e.out, int64(e.n))
	e.out = e.appendValue(e.out, e.cur)
	e.n = 0
}

// flushLiteral writes the literal run, with cur at its end if withCur.
func (e *rle) flushLiteral(withCur bool) {
	if withCur {
		e.addLiteral(e.cur)
	}
	e.out = amcheck.AppendSleb(e.out, -e.litN)
	e.out = append(e.out, e.lit...)
	e.lit, e.litN = e.lit[:0], 0
	e.n = 0
}

// finish returns the column's bytes: nothing for a column of nulls only.
func (e *rle) finish() []byte {
	if !e.anyVals {
		return nil
	}
	switch {
	case e.nulls > 0:
		e.flushNulls()
	case e.litN > 0 || e.n == 1:
		e.flushLiteral(true)
	case e.n > 1:
		e.flushRun()
	}
	return e.out
}

// uintCol is a column of unsigned numbers (actor indices, counters,
// counts, value metadata).
type uintCol struct{ rle }

func (c *uintCol) add(v uint64) { c.put(rleValue{u: v}) }
func (c *uintCol) null()        { c.putNull() }

// deltaCol is a column of numbers written as the difference from the
// previous non-null one.
type deltaCol struct {
	rle
	prev int64
}

func newDelta() deltaCol { return deltaCol{rle: rle{typ: typeDelta}} }

func (c *deltaCol) add(v int64) {
	c.put(rleValue{u: uint64(v - c.prev)})
	c.prev = v
}
func (c *deltaCol) null() { c.putNull() }

// stringCol is a column of strings.
type stringCol struct{ rle }

func newString() stringCol { return stringCol{rle: rle{typ: typeString}} }

func (c *stringCol) add(s string) { c.put(rleValue{s: s}) }
func (c *stringCol) null()        { c.putNull() }

// boolCol is a column of booleans: the lengths of alternating runs,
// starting with false.
type boolCol struct {
	out []byte
	cur bool
	n   uint64
	any bool // a true was written
}

func (c *boolCol) add(v bool) {
	if v != c.cur {
		c.out = binary.AppendUvarint(c.out, c.n)
		c.cur, c.n = v, 0
	}
	c.n++
	c.any = c.any || v
}

func (c *boolCol) finish() []byte {
	if c.n > 0 {
		c.out = binary.AppendUvarint(c.out, c.n)
		c.n = 0
	}
	return c.out
}

// valueCols are a value's two columns: its type and length, and its bytes.
type valueCols struct {
	meta uintCol
	raw  []byte
}

func (c *valueCols) add(typ amcheck.ValueType, b []byte) {
	c.meta.add(uint64(len(b))<<4 | uint64(typ))
	c.raw = append(c.raw, b...)
}

// column is one written column: its spec and bytes.
type column struct {
	spec uint32
	data []byte
}

// appendColumns writes the metadata of the non-empty columns (in spec
// order, as given) to out, and returns it with their data after.
func appendMeta(out []byte, cols []column) []byte {
	n := 0
	for _, c := range cols {
		if len(c.data) > 0 {
			n++
		}
	}
	out = binary.AppendUvarint(out, uint64(n))
	for _, c := range cols {
		if len(c.data) > 0 {
			out = binary.AppendUvarint(out, uint64(c.spec))
			out = binary.AppendUvarint(out, uint64(len(c.data)))
		}
	}
	return out
}

func appendData(out []byte, cols []column) []byte {
	for _, c := range cols {
		out = append(out, c.data...)
	}
	return out
}
