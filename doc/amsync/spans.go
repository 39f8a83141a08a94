package amsync

import "slices"

// spanSet is a set of log indices kept as sorted, disjoint, half-open
// spans: what a peer was sent is nearly always a run of the log, so a
// peer sent a whole document costs a few bytes, not one entry per change.
type spanSet struct {
	s []span
}

type span struct{ lo, hi int32 } // [lo, hi)

func (s *spanSet) empty() bool { return len(s.s) == 0 }

func (s *spanSet) clear() { s.s = nil }

func (s *spanSet) min() int32 { return s.s[0].lo }

func (s *spanSet) has(x int32) bool {
	i := s.find(x)
	return i < len(s.s) && s.s[i].lo <= x
}

// find returns the first span whose hi is above x.
func (s *spanSet) find(x int32) int {
	i, _ := slices.BinarySearchFunc(s.s, x, func(sp span, x int32) int {
		if sp.hi <= x {
			return -1
		}
		return 1
	})
	return i
}

func (s *spanSet) add(x int32) {
	i := s.find(x)
	if i < len(s.s) && s.s[i].lo <= x {
		return
	}
	joinLeft := i > 0 && s.s[i-1].hi == x
	joinRight := i < len(s.s) && s.s[i].lo == x+1
	switch {
	case joinLeft && joinRight:
		s.s[i-1].hi = s.s[i].hi
		s.s = slices.Delete(s.s, i, i+1)
	case joinLeft:
		s.s[i-1].hi = x + 1
	case joinRight:
		s.s[i].lo = x
	default:
		s.s = slices.Insert(s.s, i, span{x, x + 1})
	}
}

func (s *spanSet) remove(x int32) {
	i := s.find(x)
	if i == len(s.s) || s.s[i].lo > x {
		return
	}
	sp := s.s[i]
	switch {
	case sp.lo == x && sp.hi == x+1:
		s.s = slices.Delete(s.s, i, i+1)
	case sp.lo == x:
		s.s[i].lo++
	case sp.hi == x+1:
		s.s[i].hi--
	default:
		s.s[i].hi = x
		s.s = slices.Insert(s.s, i+1, span{x + 1, sp.hi})
	}
	if len(s.s) == 0 {
		s.s = nil
	}
}

// gaps calls f with each x in [lo, hi) the set does not hold, in order,
// until f returns false: its cost is the spans it passes and the calls,
// not hi-lo.
func (s *spanSet) gaps(lo, hi int32, f func(x int32) bool) {
	for i := s.find(lo); lo < hi; i++ {
		next := hi
		if i < len(s.s) {
			next = min(hi, s.s[i].lo)
		}
		for x := lo; x < next; x++ {
			if !f(x) {
				return
			}
		}
		if i >= len(s.s) {
			return
		}
		lo = s.s[i].hi
	}
}

// countIn returns how many of [lo, hi) the set holds.
func (s *spanSet) countIn(lo, hi int32) int {
	n := 0
	for i := s.find(lo); i < len(s.s) && s.s[i].lo < hi; i++ {
		n += int(min(hi, s.s[i].hi) - max(lo, s.s[i].lo))
	}
	return n
}
