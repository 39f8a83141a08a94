package main

import (
	"errors"
	"math"
)

// A CBOR scanner for what the presence bench receives. Its 500 peers
// decode half a million presence updates a second on the machine that
// runs the server they measure; a reflection decoder spent a core on it
// and made the generator, not the server, the figure. The scanner reads
// every item of a frame, as a client's decoder does, without reflection
// or copies.

var errScan = errors.New("scan: malformed or unexpected CBOR")

type scanner struct {
	b   []byte
	err error
}

// head reads an item's major type and argument. Indefinite lengths are
// refused: no peer sends them.
func (s *scanner) head() (major byte, arg uint64) {
	if s.err != nil || len(s.b) == 0 {
		s.fail()
		return 0, 0
	}
	major, info := s.b[0]>>5, s.b[0]&0x1f
	s.b = s.b[1:]
	var n int
	switch {
	case info < 24:
		return major, uint64(info)
	case info == 24:
		n = 1
	case info == 25:
		n = 2
	case info == 26:
		n = 4
	case info == 27:
		n = 8
	default:
		s.fail()
		return 0, 0
	}
	if len(s.b) < n {
		s.fail()
		return 0, 0
	}
	for _, c := range s.b[:n] {
		arg = arg<<8 | uint64(c)
	}
	s.b = s.b[n:]
	return major, arg
}

func (s *scanner) fail() {
	if s.err == nil {
		s.err = errScan
	}
	s.b = nil
}

// take returns the next n bytes.
func (s *scanner) take(n uint64) []byte {
	if s.err != nil || n > uint64(len(s.b)) {
		s.fail()
		return nil
	}
	out := s.b[:n]
	s.b = s.b[n:]
	return out
}

// text reads a text string, returned as bytes of the frame.
func (s *scanner) text() []byte {
	major, n := s.head()
	if major != 3 {
		s.fail()
		return nil
	}
	return s.take(n)
}

// bytes reads a byte string, with or without the typed-array tag (64)
// stock peers put on data.
func (s *scanner) bytes() []byte {
	major, n := s.head()
	if major == 6 && n == 64 {
		major, n = s.head()
	}
	if major != 2 {
		s.fail()
		return nil
	}
	return s.take(n)
}

// int reads an integer.
func (s *scanner) int() int64 {
	major, n := s.head()
	switch {
	case major == 0 && n <= math.MaxInt64:
		return int64(n)
	case major == 1 && n <= math.MaxInt64:
		return -1 - int64(n)
	}
	s.fail()
	return 0
}

// mapLen reads a map's head.
func (s *scanner) mapLen() uint64 { return s.count(5) }

// arrayLen reads an array's head.
func (s *scanner) arrayLen() uint64 { return s.count(4) }

// count reads the head of a map or an array (major) and its length: no
// more than the bytes left could hold.
func (s *scanner) count(major byte) uint64 {
	m, n := s.head()
	if m != major || n > uint64(len(s.b)) {
		s.fail()
		return 0
	}
	return n
}

// maxDepth bounds how deeply skip follows nested items: a frame nested a
// million deep would otherwise take the stack with it.
const maxDepth = 16

// skip reads past one item, checking it is well formed.
func (s *scanner) skip() { s.skipAt(0) }

func (s *scanner) skipAt(depth int) {
	if depth > maxDepth {
		s.fail()
		return
	}
	major, n := s.head()
	switch major {
	case 2, 3:
		s.take(n)
	case 4, 5:
		if n > uint64(len(s.b)) {
			s.fail()
			return
		}
		if major == 5 {
			n *= 2
		}
		for i := uint64(0); i < n && s.err == nil; i++ {
			s.skipAt(depth + 1)
		}
	case 6:
		s.skipAt(depth + 1)
	case 7:
		// simple values and floats: the head held them
	}
}

// batchEntry is one presence message of a received frame.
type batchEntry struct {
	sender []byte
	data   []byte
}

// scannedFrame is what the bench needs of a frame from the server.
type scannedFrame struct {
	typ     []byte
	sender  []byte
	data    []byte
	entries []batchEntry // a presence batch's, in order
}

// scanFrame reads a whole frame, every field of it.
func scanFrame(b []byte, f *scannedFrame) error {
	s := scanner{b: b}
	*f = scannedFrame{entries: f.entries[:0]}
	for n := s.mapLen(); n > 0 && s.err == nil; n-- {
		switch string(s.text()) {
		case "type":
			f.typ = s.text()
		case "senderId":
			f.sender = s.text()
		case "data":
			f.data = s.bytes()
		case "batch":
			for k := s.arrayLen(); k > 0 && s.err == nil; k-- {
				if s.arrayLen() != 3 {
					s.fail()
					break
				}
				var e batchEntry
				e.sender = s.text()
				s.int() // the relay count
				e.data = s.bytes()
				f.entries = append(f.entries, e)
			}
		default:
			s.skip()
		}
	}
	if s.err == nil && len(s.b) != 0 {
		s.fail()
	}
	return s.err
}

// scannedPresence is a presence message: its type and channel, and the
// cursor it carries when it moves one.
type scannedPresence struct {
	typ, channel []byte
	cursor       cursor
	isCursor     bool
}

// scanPresence reads an ephemeral's payload: {"__presence": {type,
// channel, value, ...}}, every item of it.
func scanPresence(b []byte, p *scannedPresence) error {
	s := scanner{b: b}
	*p = scannedPresence{}
	for n := s.mapLen(); n > 0 && s.err == nil; n-- {
		if string(s.text()) != "__presence" {
			s.skip()
			continue
		}
		for k := s.mapLen(); k > 0 && s.err == nil; k-- {
			switch string(s.text()) {
			case "type":
				p.typ = s.text()
			case "channel":
				p.channel = s.text()
			case "value":
				p.isCursor = scanCursor(&s, &p.cursor)
			default:
				s.skip()
			}
		}
	}
	if s.err == nil && len(s.b) != 0 {
		s.fail()
	}
	return s.err
}

// scanCursor reads a value, which is a bench cursor if it is a map of
// "s" and "t".
func scanCursor(s *scanner, c *cursor) bool {
	if len(s.b) == 0 || s.b[0]>>5 != 5 {
		s.skip()
		return false
	}
	seen := 0
	for n := s.mapLen(); n > 0 && s.err == nil; n-- {
		switch string(s.text()) {
		case "s":
			c.Seq = uint64(s.int())
			seen++
		case "t":
			c.Sent = s.int()
			seen++
		default:
			s.skip()
		}
	}
	return seen == 2
}
