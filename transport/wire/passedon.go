package wire

// PassedOn reports whether frame is an ephemeral message in the name of a
// sender other than self, read without decoding the frame: what a stock
// client sends back of every ephemeral it receives (automerge-repo's Repo
// passes each on to its other peers of the document, under the original
// sender, and a client's one peer is the server that sent it), and its
// sessionId (nil if it has none). It reads the frame's top-level map no
// further than its type, senderId and sessionId, skips every other value
// without allocating, and reports false for anything it cannot read so
// (Decode then says what is wrong).
func PassedOn(frame []byte, self string) (session []byte, ok bool) {
	s := skimmer{b: frame}
	major, pairs, ok := s.head()
	if !ok || major != majorMap {
		return nil, false
	}
	var typ, sender []byte
	for ; pairs > 0; pairs-- {
		key, ok := s.text()
		if !ok {
			return nil, false
		}
		switch string(key) {
		case "type":
			typ, ok = s.text()
		case "senderId":
			sender, ok = s.text()
		case "sessionId":
			session, ok = s.text()
		default:
			ok = s.skip(1)
		}
		if !ok {
			return nil, false
		}
		if typ != nil && sender != nil && session != nil {
			break
		}
	}
	if string(typ) != TypeEphemeral || len(sender) == 0 || string(sender) == self {
		return nil, false
	}
	return session, true
}

// CBOR major types (RFC 8949 section 3.1).
const (
	majorBytes = 2
	majorText  = 3
	majorArray = 4
	majorMap   = 5
	majorTag   = 6
)

// skimmer reads CBOR items of definite length from the front of b.
type skimmer struct{ b []byte }

// head reads an item's head: its major type and its argument (a length, a
// count, a value or a float's bits). Indefinite lengths are not read.
func (s *skimmer) head() (major byte, arg uint64, ok bool) {
	if len(s.b) == 0 {
		return 0, 0, false
	}
	major, info := s.b[0]>>5, s.b[0]&0x1f
	s.b = s.b[1:]
	if info < 24 {
		return major, uint64(info), true
	}
	if info > 27 {
		return 0, 0, false // reserved, or an indefinite length
	}
	n := 1 << (info - 24)
	if len(s.b) < n {
		return 0, 0, false
	}
	for _, c := range s.b[:n] {
		arg = arg<<8 | uint64(c)
	}
	s.b = s.b[n:]
	return major, arg, true
}

// text reads a text string.
func (s *skimmer) text() ([]byte, bool) {
	major, n, ok := s.head()
	if !ok || major != majorText || n > uint64(len(s.b)) {
		return nil, false
	}
	t := s.b[:n:n]
	s.b = s.b[n:]
	return t, true
}

// skip skips one item, nested depth deep, and what it holds.
func (s *skimmer) skip(depth int) bool {
	if depth > MaxNesting {
		return false
	}
	major, arg, ok := s.head()
	if !ok {
		return false
	}
	switch major {
	case majorBytes, majorText:
		if arg > uint64(len(s.b)) {
			return false
		}
		s.b = s.b[arg:]
	case majorArray, majorMap:
		items := arg
		if major == majorMap {
			if items > uint64(len(s.b)) {
				return false // each item takes a byte at least
			}
			items *= 2
		}
		for ; items > 0; items-- {
			if !s.skip(depth + 1) {
				return false
			}
		}
	case majorTag:
		return s.skip(depth + 1)
	}
	return true
}
