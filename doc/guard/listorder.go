package guard

// The order of a list's or text's elements, as automerge places them: each
// element goes right after the one it was inserted after, before that
// one's earlier children (a later insertion at one place comes first).
// The guard needs it for one rule only: a mark's end must come after its
// start.

// maxOrderSteps bounds the work one message may cause placing mark ends
// in their text (before): walking an element's ancestors costs a step for
// each run of elements typed one after another.
const maxOrderSteps = 1 << 20

// pathSeg is a stretch of an element's path up to the head of its list: a
// run of elements each inserted after the one before, of one actor, from
// counter hi (the lowest on the path) up to lo.
type pathSeg struct {
	actor  uint32
	lo, hi uint32
}

// climb walks an element's path to the head one segment at a time.
type climb struct {
	e       uint64 // the element the next segment starts at; 0: the head is reached
	path    []pathSeg
	byActor map[uint32][]int // indices into path
}

// step adds the next segment; false if the element is not indexed.
func (c *climb) step(x *refIndex) bool {
	r, ok := x.op(c.e)
	if !ok || roleOf(r.kind) == rolePut {
		return false
	}
	s := pathSeg{actor: uint32(c.e >> 32), lo: r.start, hi: uint32(c.e)}
	if c.byActor == nil {
		c.byActor = make(map[uint32][]int)
	}
	c.byActor[s.actor] = append(c.byActor[s.actor], len(c.path))
	c.path = append(c.path, s)
	c.e = r.parent
	return true
}

// meets returns the lowest segment of c's path that shares elements with
// s, or -1.
func (c *climb) meets(s pathSeg) int {
	for _, i := range c.byActor[s.actor] {
		if o := c.path[i]; max(o.lo, s.lo) <= min(o.hi, s.hi) {
			return i
		}
	}
	return -1
}

// sibling reports whether element a comes before its sibling b: automerge
// places a later insertion at the same place first (higher counter, then
// higher actor ID).
func (x *refIndex) sibling(a, b uint64) bool {
	if uint32(a) != uint32(b) {
		return uint32(a) > uint32(b)
	}
	return x.actorBytes(uint32(a>>32)) > x.actorBytes(uint32(b>>32))
}

// before reports whether element a comes before element b in their list
// (both of one object, a != b; 0 is the head); ok is false if the work passed the budget
// or an element is not indexed. The two paths are walked up in turn, so
// that elements close in the list's tree (a mark around a word just
// pasted) cost the steps to where their paths meet, not to the head.
func (x *refIndex) before(a, b uint64, steps *int) (isBefore, ok bool) {
	switch {
	case b == 0: // the head comes before everything
		return false, true
	case a == 0:
		return true, true
	}
	ca, cb := &climb{e: a}, &climb{e: b}
	for ca.e != 0 || cb.e != 0 {
		for _, c := range [2]*climb{ca, cb} {
			if c.e == 0 {
				continue
			}
			if *steps++; *steps > maxOrderSteps || !c.step(x) {
				return false, false
			}
			other := cb
			if c == cb {
				other = ca
			}
			if j := other.meets(c.path[len(c.path)-1]); j >= 0 {
				i := len(c.path) - 1
				if c == cb {
					i, j = j, i
				}
				return x.meet(ca.path, cb.path, i, j), true
			}
		}
	}
	// The paths meet only at the head: compare the topmost elements.
	ta, tb := ca.path[len(ca.path)-1], cb.path[len(cb.path)-1]
	return x.sibling(uint64(ta.actor)<<32|uint64(ta.lo), uint64(tb.actor)<<32|uint64(tb.lo)), true
}

// meet orders the elements whose paths pa and pb first share elements in
// their segments i and j: within that run the paths meet at the lower of
// the two entry points, and part below it.
func (x *refIndex) meet(pa, pb []pathSeg, i, j int) bool {
	sa, sb := pa[i], pb[j]
	hi := min(sa.hi, sb.hi)
	switch {
	case sa.hi == sb.hi:
		// The same element on both paths: below it, a's path came from
		// pa[i-1] and b's from pb[j-1].
		if i == 0 {
			return true // a is b's ancestor
		}
		if j == 0 {
			return false // b is a's ancestor
		}
		ca := uint64(pa[i-1].actor)<<32 | uint64(pa[i-1].lo)
		cb := uint64(pb[j-1].actor)<<32 | uint64(pb[j-1].lo)
		return x.sibling(ca, cb)
	case sa.hi < sb.hi:
		// b's path goes on down the run past hi, to hi+1.
		if i == 0 {
			return true
		}
		ca := uint64(pa[i-1].actor)<<32 | uint64(pa[i-1].lo)
		return x.sibling(ca, uint64(sb.actor)<<32|uint64(hi+1))
	default:
		if j == 0 {
			return false
		}
		cb := uint64(pb[j-1].actor)<<32 | uint64(pb[j-1].lo)
		return x.sibling(uint64(sa.actor)<<32|uint64(hi+1), cb)
	}
}
