package amcheck

import (
	"bytes"
	"encoding/binary"
)

// Canonical encoding. automerge saves a document as its ops, not as the
// changes that made them, and rebuilds each change from those ops when it
// loads the document: a change whose columns were not written the way
// automerge writes them rebuilds to other bytes, another hash, and the
// saved document no longer loads ("mismatching heads"). So a change from a
// client must be in the one encoding automerge's own encoder gives its
// values: runs of two or more equal values as runs, other values in
// literal runs, nulls in null runs, boolean runs alternating, and a
// column left out when it would be empty.

// canonicalColumn re-encodes a column from its values and reports whether
// the result is the column as given. It holds nothing per value: the
// encoding is compared with the column as it is made (runsMatch).
func canonicalColumn(it colIter, data []byte) (bool, error) {
	if it.kind == kindBool {
		return bytes.Equal(canonicalBools(it), data), nil
	}
	return runsMatch(it, data)
}

// run is a stretch of equal values in a column being re-encoded.
type run struct {
	n    uint64
	null bool
	u    uint64
	d    int64
	s    []byte
}

func (r *run) sameValue(s seg) bool {
	return r.null == s.null && r.u == s.u && r.d == s.d && bytes.Equal(r.s, s.s)
}

// runReader reads a column's values as runs of equal values, one segment
// read ahead. It is a value: a copy reads on from where the original is,
// and leaves it there.
type runReader struct {
	it      colIter
	pend    seg
	hasPend bool
}

func (r *runReader) next() (run, bool, error) {
	var cur run
	if r.hasPend {
		cur, r.hasPend = run(r.pend), false
	} else {
		s, ok, err := r.it.next()
		if err != nil || !ok {
			return run{}, false, err
		}
		cur = run(s)
	}
	for {
		s, ok, err := r.it.next()
		if err != nil {
			return run{}, false, err
		}
		if !ok {
			return cur, true, nil
		}
		if !cur.sameValue(s) {
			r.pend, r.hasPend = s, true
			return cur, true, nil
		}
		cur.n += s.n
	}
}

// matcher compares bytes written to it with a column's, as they come.
type matcher struct {
	data []byte
	off  int
	ok   bool
}

func (m *matcher) write(b []byte) {
	if m.ok && len(b) <= len(m.data)-m.off && bytes.Equal(b, m.data[m.off:m.off+len(b)]) {
		m.off += len(b)
		return
	}
	m.ok = false
}

func (m *matcher) uvarint(v uint64) {
	var b [binary.MaxVarintLen64]byte
	m.write(binary.AppendUvarint(b[:0], v))
}

func (m *matcher) sleb(v int64) {
	var b [binary.MaxVarintLen64]byte
	m.write(AppendSleb(b[:0], v))
}

// runsMatch reports whether data is the column of it's values as
// automerge writes it: runs of two or more equal values as runs, single
// values in literal runs, nulls in null runs, a column of nulls only as
// nothing. It reads the column three times at most (once to see whether
// it is all null, and each literal run twice: once to count it, once to
// compare it), holding no more than a run.
func runsMatch(it colIter, data []byte) (bool, error) {
	if !it.present {
		return len(data) == 0, nil
	}
	allNull := true
	for look := (runReader{it: it}); ; {
		r, ok, err := look.next()
		if err != nil {
			return false, err
		}
		if !ok {
			break
		}
		if !r.null {
			allNull = false
			break
		}
	}
	if allNull {
		return len(data) == 0, nil
	}
	m := &matcher{data: data, ok: true}
	value := func(r run) {
		switch it.kind {
		case kindUint:
			m.uvarint(r.u)
		case kindDelta:
			m.sleb(r.d)
		case kindStr:
			m.uvarint(uint64(len(r.s)))
			m.write(r.s)
		}
	}
	rr := runReader{it: it}
	for m.ok {
		r, ok, err := rr.next()
		if err != nil {
			return false, err
		}
		if !ok {
			break
		}
		switch {
		case r.null:
			m.sleb(0)
			m.uvarint(r.n)
		case r.n > 1:
			m.sleb(int64(r.n))
			value(r)
		default:
			// A literal run: this value and the single values after it.
			count := int64(1)
			for look := rr; ; count++ {
				l, ok, err := look.next()
				if err != nil {
					return false, err
				}
				if !ok || l.null || l.n != 1 {
					break
				}
			}
			m.sleb(-count)
			value(r)
			for range count - 1 {
				l, _, err := rr.next()
				if err != nil {
					return false, err
				}
				value(l)
			}
		}
	}
	return m.ok && m.off == len(data), nil
}

func canonicalBools(it colIter) []byte {
	if !it.present {
		return nil
	}
	var out []byte
	cur, n := false, uint64(0)
	for {
		s, ok, err := it.next()
		if err != nil || !ok {
			break
		}
		if v := s.u == 1; v != cur {
			out = binary.AppendUvarint(out, n)
			cur, n = v, 0
		}
		n += s.n
	}
	if n > 0 {
		out = binary.AppendUvarint(out, n)
	}
	return out
}

// checkCanonical refuses a change whose columns automerge would write
// otherwise, or whose other actors are not those its ops name, in byte
// order.
func (o *opsCheck) checkCanonical() error {
	if err := o.checkActors(); err != nil {
		return err
	}
	for slot := range nCols {
		if o.has[slot] && len(o.data[slot]) == 0 {
			return malformed("column %s is listed with no data; automerge leaves such a column out", columnNames[slotSpecs[slot]])
		}
		if slot == cValRaw {
			continue
		}
		if slot == cExpand && o.has[slot] && allFalse(o.col(slot)) {
			return malformed("column %s is all false; automerge leaves it out", columnNames[slotSpecs[slot]])
		}
		ok, err := canonicalColumn(o.col(slot), o.data[slot])
		if err != nil {
			return err
		}
		if !ok {
			return malformed("column %s is not encoded as automerge encodes it", columnNames[slotSpecs[slot]])
		}
	}
	return nil
}

// checkActors refuses other actors that no op names, or that are not in
// byte order: automerge rebuilds a change's actor list from its ops.
func (o *opsCheck) checkActors() error {
	if len(o.others) <= 1 {
		return nil
	}
	for i := 2; i < len(o.others); i++ {
		if bytes.Compare(o.others[i-1], o.others[i]) >= 0 {
			return malformed("other actors are not in byte order")
		}
	}
	used := make([]bool, len(o.others))
	for _, slot := range [...]int{cObjActor, cKeyActor, cPredActor} {
		it := o.col(slot)
		for it.present {
			s, ok, err := it.next()
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			if !s.null && s.u < uint64(len(used)) {
				used[s.u] = true
			}
		}
	}
	for i := 1; i < len(used); i++ {
		if !used[i] {
			return malformed("other actor %d is named by no op", i)
		}
	}
	return nil
}

func allFalse(it colIter) bool {
	for {
		s, ok, err := it.next()
		if err != nil || !ok {
			return err == nil
		}
		if s.u == 1 {
			return false
		}
	}
}
