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
// the result is the column as given.
func canonicalColumn(it colIter, data []byte) (bool, error) {
	var out []byte
	if it.kind == kindBool {
		out = canonicalBools(it)
	} else {
		var err error
		if out, err = canonicalRuns(it); err != nil {
			return false, err
		}
	}
	return bytes.Equal(out, data), nil
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

func canonicalRuns(it colIter) ([]byte, error) {
	if !it.present {
		return nil, nil
	}
	var runs []run
	for {
		s, ok, err := it.next()
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		if n := len(runs); n > 0 && runs[n-1].sameValue(s) {
			runs[n-1].n += s.n
			continue
		}
		runs = append(runs, run(s))
	}
	// A column of nulls only is written as nothing.
	allNull := true
	for _, r := range runs {
		allNull = allNull && r.null
	}
	if allNull {
		return nil, nil
	}
	var out []byte
	value := func(r run) {
		switch it.kind {
		case kindUint:
			out = binary.AppendUvarint(out, r.u)
		case kindDelta:
			out = AppendSleb(out, r.d)
		case kindStr:
			out = binary.AppendUvarint(out, uint64(len(r.s)))
			out = append(out, r.s...)
		}
	}
	for i := 0; i < len(runs); {
		r := runs[i]
		switch {
		case r.null:
			out = AppendSleb(out, 0)
			out = binary.AppendUvarint(out, r.n)
			i++
		case r.n > 1:
			out = AppendSleb(out, int64(r.n))
			value(r)
			i++
		default:
			j := i
			for j < len(runs) && !runs[j].null && runs[j].n == 1 {
				j++
			}
			out = AppendSleb(out, -int64(j-i))
			for _, l := range runs[i:j] {
				value(l)
			}
			i = j
		}
	}
	return out, nil
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
