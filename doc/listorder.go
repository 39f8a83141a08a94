package doc

// The order of a list's or text's elements, as automerge places them: each
// element goes right after the one it was inserted after, before that
// one's earlier children (a later insertion at one place comes first).
// The guard needs it for one rule only: a mark's end must come after its
// start.

// maxOrderSteps bounds the work one message may cause placing mark ends
// in their text (before): walking an element's ancestors costs a step for
// each run of elements typed one after another.
const maxOrderSteps = 1 << 20

// ancestors returns the path from element e up to the head of its list, as
// segments: runs of elements each inserted after the one before (lo is
// the highest on the path, hi the lowest), innermost first.
type pathSeg struct {
	actor  uint32
	lo, hi uint32
}

func (x *refIndex) ancestors(e uint64, steps *int) ([]pathSeg, bool) {
	var path []pathSeg
	for e != 0 {
		*steps++
		if *steps > maxOrderSteps {
			return nil, false
		}
		r, ok := x.op(e)
		if !ok || roleOf(r.kind) == rolePut {
			return nil, false
		}
		path = append(path, pathSeg{actor: uint32(e >> 32), lo: r.start, hi: uint32(e)})
		e = r.parent
	}
	return path, true
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
// (both of one object, a != b); ok is false if the work passed the budget
// or an element is not indexed.
func (x *refIndex) before(a, b uint64, steps *int) (isBefore, ok bool) {
	pa, ok := x.ancestors(a, steps)
	if !ok {
		return false, false
	}
	pb, ok := x.ancestors(b, steps)
	if !ok {
		return false, false
	}
	// Find where the paths meet: the segment of b's path, lowest first,
	// that shares elements with one of a's.
	byActor := make(map[uint32][]int)
	for i, s := range pa {
		byActor[s.actor] = append(byActor[s.actor], i)
	}
	for j, sb := range pb {
		for _, i := range byActor[sb.actor] {
			sa := pa[i]
			lo, hi := max(sa.lo, sb.lo), min(sa.hi, sb.hi)
			if lo > hi {
				continue
			}
			// The paths meet at the chain element hi (the lowest common
			// ancestor); below it each goes its own way.
			switch {
			case sa.hi == sb.hi:
				// Same element on both paths: below it, a's path came
				// from pa[i-1] and b's from pb[j-1].
				if i == 0 {
					return true, true // a is b's ancestor
				}
				if j == 0 {
					return false, true // b is a's ancestor
				}
				ca := uint64(pa[i-1].actor)<<32 | uint64(pa[i-1].lo)
				cb := uint64(pb[j-1].actor)<<32 | uint64(pb[j-1].lo)
				return x.sibling(ca, cb), true
			case sa.hi < sb.hi:
				// b's path goes on down the chain past hi, to hi+1.
				if i == 0 {
					return true, true
				}
				ca := uint64(pa[i-1].actor)<<32 | uint64(pa[i-1].lo)
				return x.sibling(ca, uint64(sb.actor)<<32|uint64(hi+1)), true
			default:
				if j == 0 {
					return false, true
				}
				cb := uint64(pb[j-1].actor)<<32 | uint64(pb[j-1].lo)
				return x.sibling(uint64(sa.actor)<<32|uint64(hi+1), cb), true
			}
		}
	}
	// The paths meet only at the head: compare the topmost elements.
	ta, tb := pa[len(pa)-1], pb[len(pb)-1]
	return x.sibling(uint64(ta.actor)<<32|uint64(ta.lo), uint64(tb.actor)<<32|uint64(tb.lo)), true
}
