package amcheck

import (
	"errors"
	"math"
)

// Two LEB128 dialects appear in a change chunk, and automerge reads them
// differently, so we do too:
//
//   - The chunk header, the change header, the column metadata and the
//     integers inside the raw value column are read by automerge's own
//     parser, which refuses overlong encodings (a trailing 0x00 byte, or a
//     redundant sign byte) and anything that does not fit 64 bits.
//   - The column data (run lengths, RLE values, boolean counts) are read
//     with the leb128 crate, which accepts overlong encodings but still
//     stops at ten bytes and refuses overflow.

var (
	errTruncated = errors.New("unexpected end of input")
	errLEBLarge  = errors.New("LEB128 value does not fit 64 bits")
	errLEBLong   = errors.New("overlong LEB128 encoding")
)

// strictUvarint reads an unsigned LEB128 as automerge's header parser
// does. It returns the value and the bytes used.
func strictUvarint(b []byte) (uint64, int, error) {
	var v uint64
	shift := uint(0)
	for i := 0; ; i++ {
		if i >= len(b) {
			return 0, 0, errTruncated
		}
		c := b[i]
		v |= uint64(c&0x7f) << shift
		shift += 7
		if c&0x80 == 0 {
			switch {
			case shift > 64 && c > 1:
				return 0, 0, errLEBLarge
			case shift > 7 && c == 0:
				return 0, 0, errLEBLong
			}
			return v, i + 1, nil
		}
		if shift > 64 {
			return 0, 0, errLEBLarge
		}
	}
}

// strictVarint reads a signed LEB128 as automerge's header parser does.
func strictVarint(b []byte) (int64, int, error) {
	var v int64
	shift := uint(0)
	var prev byte
	for i := 0; ; i++ {
		if i >= len(b) {
			return 0, 0, errTruncated
		}
		c := b[i]
		v |= int64(c&0x7f) << shift
		shift += 7
		if c&0x80 == 0 {
			switch {
			case shift > 64 && c != 0 && c != 0x7f:
				return 0, 0, errLEBLarge
			case shift > 7 && ((c == 0 && prev&0x40 == 0) || (c == 0x7f && prev&0x40 != 0)):
				return 0, 0, errLEBLong
			case shift < 64 && c&0x40 != 0:
				v |= -1 << shift
			}
			return v, i + 1, nil
		}
		if shift > 64 {
			return 0, 0, errLEBLarge
		}
		prev = c
	}
}

// looseUvarint reads an unsigned LEB128 as the leb128 crate does: any
// length up to ten bytes, the tenth holding only bit 63.
func looseUvarint(b []byte) (uint64, int, error) {
	var v uint64
	shift := uint(0)
	for i := 0; ; i++ {
		if i >= len(b) {
			return 0, 0, errTruncated
		}
		c := b[i]
		if shift == 63 && c != 0 && c != 1 {
			return 0, 0, errLEBLarge
		}
		v |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			return v, i + 1, nil
		}
		shift += 7
	}
}

// looseVarint reads a signed LEB128 as the leb128 crate does.
func looseVarint(b []byte) (int64, int, error) {
	var v int64
	shift := uint(0)
	for i := 0; ; i++ {
		if i >= len(b) {
			return 0, 0, errTruncated
		}
		c := b[i]
		if shift == 63 && c != 0 && c != 0x7f {
			return 0, 0, errLEBLarge
		}
		v |= int64(c&0x7f) << shift
		shift += 7
		if c&0x80 == 0 {
			if shift < 64 && c&0x40 != 0 {
				v |= -1 << shift
			}
			return v, i + 1, nil
		}
	}
}

// ulebLen is the length of the minimal unsigned LEB128 encoding of v.
func ulebLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// appendUleb appends the minimal unsigned LEB128 encoding of v.
func appendUleb(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// satAdd adds two non-negative int64s, stopping at math.MaxInt64.
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// satMul multiplies a row count by a per-row size, stopping at
// math.MaxInt64.
func satMul(n uint64, size uint64) int64 {
	if n == 0 || size == 0 {
		return 0
	}
	if size > math.MaxInt64/n {
		return math.MaxInt64
	}
	return int64(n * size)
}

var (
	errNotUTF8    = errors.New("string is not UTF-8")
	errExtraBytes = errors.New("extra bytes after an integer value")
)

// AppendSleb appends v in signed LEB128, automerge's encoding of signed
// integers; amtest builds changes with it.
func AppendSleb(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}
