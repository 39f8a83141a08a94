package doc

import (
	"bytes"
	"fmt"
	"sort"

	"github.com/tandemhq/tandem/doc/amcheck"
)

// The reference check. automerge-go applies a change whose ops name things
// the document lacks (an object never made, a list element that is not
// there, a predecessor in another object, a mark's end without its start)
// without complaint; automerge 3 in every stock client then fails on the
// document for good, and a snapshot saved from it no longer loads. So
// before a client's change is applied, every reference each of its ops
// makes is checked against what the document holds, and against the
// change's causal past: a change that names an op of a change it does not
// depend on can reach a client before that op does.
//
// What an op may name:
//   - its object: the root map, or an object an earlier op made (in the
//     change's past, or earlier in the change), of the kind its key needs:
//     a map or table for a map key, a list or text for a list element;
//   - its element, in a list or text: an element of that object (an
//     inserted value, object or mark boundary) to insert after, or the
//     head; an op that does not insert (an overwrite, a deletion, an
//     increment) names an inserted value or object, never a mark;
//   - its predecessors: ops of the same object at the same key or
//     element that hold a value (an inserted element, or an earlier
//     overwrite), listed in automerge's order (counter, then actor), each
//     older than the op; a deletion, an increment and an overwrite of an
//     element have at least one; an insertion has none; an increment's
//     are counters;
//   - a mark's end is the op right after its start, in the same object
//     (automerge pairs them by op ID), and marks live in text.
// An actor's change after its first also has the actor's previous change
// in its past (automerge's changes always do, and the causal check relies
// on it).

// Roles of an indexed op: what may name it.
const (
	roleElem      = iota // an inserted list or text element
	rolePut              // a value or object set at a map key or over an element
	roleMarkStart        // a mark's start, inserted into text
	roleMarkEnd          // a mark's end
)

// What an indexed op holds.
const (
	holdsScalar = iota
	holdsCounter
	holdsMap
	holdsTable
	holdsList
	holdsText
)

func kindOf(role, holds uint8) uint8 { return role | holds<<2 }
func roleOf(kind uint8) uint8        { return kind & 3 }
func holdsOf(kind uint8) uint8       { return kind >> 2 }
func isObject(holds uint8) bool      { return holds >= holdsMap }
func isMapObject(holds uint8) bool   { return holds == holdsMap || holds == holdsTable }

// opRun is a run of an actor's ops with consecutive counters, in one
// object, of one kind; inserted elements only where each was inserted
// after the one before (typing), so that a run is a chain of the list's
// tree.
type opRun struct {
	start, n uint32
	obj      uint64 // the object's op id (actor number << 32 | counter); 0 is the root
	parent   uint64 // inserted elements: what the run's first was inserted after (0: the head)
	kind     uint8
}

// changeNode is what the index keeps of a change: who made it and what it
// depends on, for the causal check.
type changeNode struct {
	actor uint32
	seq   uint64
	deps  [][32]byte
}

// actorChange places one of an actor's changes among its op counters.
type actorChange struct {
	startOp uint32
	seq     uint64
}

// keyName marks a keys value that is a map key's number, not an element.
const keyName = 1 << 63

// refIndex is what a document holds that a change's ops may name. An
// index with a parent is an overlay: the changes of one message, checked
// in the order automerge will apply them, over the document's index,
// which the overlay never changes.
type refIndex struct {
	parent  *refIndex
	actorNo map[string]uint32 // actor ID → number; an overlay numbers from its parent's count
	actorID map[uint32]string // the reverse
	actors  int
	steps   int                // tree steps taken ordering elements (before), in an overlay
	runs    map[uint32][]opRun // by actor number
	byActor map[uint32][]actorChange
	keys    map[uint64]uint64 // a put's op id → its map key (keyName | name number) or element
	names   map[string]uint32 // map key → number; an overlay numbers from its parent's count
	nNames  int
	changes map[[32]byte]changeNode
	heads   map[[32]byte]struct{}
}

func newRefIndex(parent *refIndex) *refIndex {
	x := &refIndex{
		parent:  parent,
		actorNo: make(map[string]uint32),
		actorID: make(map[uint32]string),
		runs:    make(map[uint32][]opRun),
		byActor: make(map[uint32][]actorChange),
		keys:    make(map[uint64]uint64),
		names:   make(map[string]uint32),
		changes: make(map[[32]byte]changeNode),
		heads:   make(map[[32]byte]struct{}),
	}
	if parent != nil {
		x.actors, x.nNames = parent.actors, parent.nNames
		for h := range parent.heads {
			x.heads[h] = struct{}{}
		}
	}
	return x
}

func (x *refIndex) actorNumber(id []byte) (uint32, bool) {
	for i := x; i != nil; i = i.parent {
		if n, ok := i.actorNo[string(id)]; ok {
			return n, true
		}
	}
	return 0, false
}

func (x *refIndex) addActor(id []byte) uint32 {
	if n, ok := x.actorNumber(id); ok {
		return n
	}
	n := uint32(x.actors)
	x.actors++
	x.actorNo[string(id)] = n
	x.actorID[n] = string(id)
	return n
}

func (x *refIndex) actorBytes(n uint32) string {
	for i := x; i != nil; i = i.parent {
		if id, ok := i.actorID[n]; ok {
			return id
		}
	}
	return ""
}

func (x *refIndex) nameNumber(k string) (uint32, bool) {
	for i := x; i != nil; i = i.parent {
		if n, ok := i.names[k]; ok {
			return n, true
		}
	}
	return 0, false
}

func (x *refIndex) addName(k string) uint32 {
	if n, ok := x.nameNumber(k); ok {
		return n
	}
	n := uint32(x.nNames)
	x.nNames++
	x.names[k] = n
	return n
}

// op finds the indexed op with this id.
func (x *refIndex) op(id uint64) (opRun, bool) {
	actor, ctr := uint32(id>>32), uint32(id)
	for i := x; i != nil; i = i.parent {
		runs := i.runs[actor]
		j := sort.Search(len(runs), func(j int) bool { return runs[j].start+runs[j].n > ctr })
		if j < len(runs) && runs[j].start <= ctr {
			return runs[j], true
		}
	}
	return opRun{}, false
}

func (x *refIndex) key(id uint64) (uint64, bool) {
	for i := x; i != nil; i = i.parent {
		if k, ok := i.keys[id]; ok {
			return k, true
		}
	}
	return 0, false
}

func (x *refIndex) change(h [32]byte) (changeNode, bool) {
	for i := x; i != nil; i = i.parent {
		if n, ok := i.changes[h]; ok {
			return n, true
		}
	}
	return changeNode{}, false
}

// seqOf returns the sequence number of the actor's change that holds the
// op counter.
func (x *refIndex) seqOf(actor, ctr uint32) (uint64, bool) {
	for i := x; i != nil; i = i.parent {
		cs := i.byActor[actor]
		j := sort.Search(len(cs), func(j int) bool { return cs[j].startOp > ctr }) - 1
		if j >= 0 {
			return cs[j].seq, true
		}
	}
	return 0, false
}

// addOp indexes one op; parent is what an inserted element was inserted
// after. The caller adds an actor's ops in counter order.
func (x *refIndex) addOp(id, obj, parent uint64, kind uint8) {
	actor, ctr := uint32(id>>32), uint32(id)
	runs := x.runs[actor]
	if roleOf(kind) == rolePut {
		parent = 0
	}
	if n := len(runs); n > 0 {
		last := &runs[n-1]
		if last.start+last.n == ctr && last.obj == obj && last.kind == kind && (roleOf(kind) == rolePut || parent == id-1) {
			last.n++
			return
		}
		if last.start+last.n > ctr { // not in order: keep the runs sorted
			x.runs[actor] = append(runs, opRun{start: ctr, n: 1, obj: obj, parent: parent, kind: kind})
			sort.Slice(x.runs[actor], func(i, j int) bool { return x.runs[actor][i].start < x.runs[actor][j].start })
			return
		}
	}
	x.runs[actor] = append(runs, opRun{start: ctr, n: 1, obj: obj, parent: parent, kind: kind})
}

// add indexes a change automerge applied (or, in an overlay, will
// apply), without checking it.
func (x *refIndex) add(c *amcheck.Change) {
	if _, ok := x.change(c.Hash); ok {
		return
	}
	nums := make([]uint32, len(c.Actors))
	for i, a := range c.Actors {
		nums[i] = x.addActor(a)
	}
	self := nums[0]
	x.changes[c.Hash] = changeNode{actor: self, seq: c.Seq, deps: c.Deps}
	for _, d := range c.Deps {
		delete(x.heads, d)
	}
	x.heads[c.Hash] = struct{}{}
	cs := x.byActor[self]
	x.byActor[self] = append(cs, actorChange{startOp: uint32(c.StartOp), seq: c.Seq})
	if n := len(cs); n > 0 && cs[n-1].startOp > uint32(c.StartOp) {
		s := x.byActor[self]
		sort.Slice(s, func(i, j int) bool { return s[i].startOp < s[j].startOp })
	}
	global := func(id amcheck.OpID) uint64 {
		if id.Counter == 0 {
			return 0
		}
		return uint64(nums[id.Actor])<<32 | uint64(id.Counter)
	}
	for i := range c.OpList {
		op := &c.OpList[i]
		kind, ok := opKind(op)
		if !ok {
			continue
		}
		id := uint64(self)<<32 | (c.StartOp + uint64(i))
		x.addOp(id, global(op.Obj), global(op.Elem), kind)
		if roleOf(kind) == rolePut {
			if op.MapKey {
				x.keys[id] = keyName | uint64(x.addName(op.Key))
			} else {
				x.keys[id] = global(op.Elem)
			}
		}
	}
}

// opKind returns how an op is indexed, or false for ops nothing may name
// (deletions and increments).
func opKind(op *amcheck.Op) (uint8, bool) {
	var holds uint8
	switch op.Action {
	case amcheck.Delete, amcheck.Increment:
		return 0, false
	case amcheck.Mark:
		if op.MarkStart {
			return kindOf(roleMarkStart, holdsScalar), true
		}
		return kindOf(roleMarkEnd, holdsScalar), true
	case amcheck.MakeMap:
		holds = holdsMap
	case amcheck.MakeTable:
		holds = holdsTable
	case amcheck.MakeList:
		holds = holdsList
	case amcheck.MakeText:
		holds = holdsText
	default:
		if op.Value == amcheck.ValueCounter {
			holds = holdsCounter
		}
	}
	if op.Insert {
		return kindOf(roleElem, holds), true
	}
	return kindOf(rolePut, holds), true
}

// check checks every reference of a change's ops against the index (with
// what the change itself made before each op) and, if all hold, adds the
// change to the index, which must be an overlay. The change's
// dependencies are all in the index.
func (x *refIndex) check(c *amcheck.Change) error {
	fail := func(i int, format string, args ...any) error {
		return fmt.Errorf("%w: change %x op %d: %s", ErrRefused, c.Hash[:4], i, fmt.Sprintf(format, args...))
	}
	// The ops of other changes named, by actor number: the highest
	// counter, checked against the change's past below.
	past := make(map[uint32]uint32)
	nums := make([]uint32, len(c.Actors))
	known := make([]bool, len(c.Actors))
	for i, a := range c.Actors {
		nums[i], known[i] = x.actorNumber(a)
	}
	self, selfKnown := nums[0], known[0]
	if !selfKnown {
		self = uint32(x.actors) // the number add will give it
	}
	// resolve turns an op id of the change into the index's, and notes
	// it for the causal check if it is another change's.
	resolve := func(id amcheck.OpID) (uint64, bool) {
		if id.Actor == 0 {
			if uint64(id.Counter) >= c.StartOp {
				return uint64(self)<<32 | uint64(id.Counter), true // this change's own op
			}
			if !selfKnown {
				return 0, false
			}
		} else if !known[id.Actor] {
			return 0, false
		}
		n := nums[id.Actor]
		past[n] = max(past[n], id.Counter)
		return uint64(n)<<32 | uint64(id.Counter), true
	}
	// This change's ops, as they are checked: a later op may name an
	// earlier one (a paste inserts each character after the one before).
	mine := newRefIndex(x)
	if !selfKnown {
		mine.actorNo[string(c.Actors[0])] = self
		mine.actorID[self] = string(c.Actors[0])
		mine.actors = int(self) + 1
	}
	lookup := func(g uint64) (opRun, bool) { return mine.op(g) }
	for i := range c.OpList {
		op := &c.OpList[i]
		ctr := c.StartOp + uint64(i)
		id := uint64(self)<<32 | ctr
		older := func(g uint64) bool { return uint64(uint32(g)) < ctr }

		// The object.
		objHolds := uint8(holdsMap)
		var obj uint64
		if op.Obj.Counter != 0 {
			g, ok := resolve(op.Obj)
			r, found := lookup(g)
			if !ok || !found || !isObject(holdsOf(r.kind)) || roleOf(r.kind) >= roleMarkStart || !older(g) {
				return fail(i, "object %d@%x is not an object of the document", op.Obj.Counter, c.Actors[op.Obj.Actor])
			}
			obj, objHolds = g, holdsOf(r.kind)
		}
		if op.MapKey != isMapObject(objHolds) {
			if op.MapKey {
				return fail(i, "a map key in a list or text")
			}
			return fail(i, "a list position in a map")
		}

		// The element, in a list or text.
		var elem uint64
		if !op.MapKey {
			if op.Elem.Counter == 0 {
				if !op.Insert {
					return fail(i, "only an insertion may name the list head")
				}
			} else {
				g, ok := resolve(op.Elem)
				r, found := lookup(g)
				switch {
				case !ok || !found || r.obj != obj || !older(g):
					return fail(i, "element %d@%x is not in object %d", op.Elem.Counter, c.Actors[op.Elem.Actor], uint32(obj))
				case roleOf(r.kind) == rolePut:
					return fail(i, "element %d@%x is an overwrite, not an element", op.Elem.Counter, c.Actors[op.Elem.Actor])
				case !op.Insert && roleOf(r.kind) != roleElem:
					return fail(i, "only an insertion may name a mark boundary")
				}
				elem = g
			}
		}

		// Marks.
		if op.Action == amcheck.Mark {
			if !op.Insert || objHolds != holdsText {
				return fail(i, "a mark outside text")
			}
			if !op.MarkStart {
				if i == 0 || c.OpList[i-1].Action != amcheck.Mark || !c.OpList[i-1].MarkStart || c.OpList[i-1].Obj != op.Obj {
					return fail(i, "a mark's end without its start right before it")
				}
				// The end goes after the start in the text: the start is
				// the op before, and the end's place is right after
				// elem, but before elem's later children; so the start
				// must come before elem, or be elem.
				start := id - 1
				if elem != start {
					after, ok := mine.before(start, elem, &x.steps)
					if !ok {
						return fmt.Errorf("%w: change %x: the text is too deep to place its marks (over %d steps)", ErrLimit, c.Hash[:4], maxOrderSteps)
					}
					if !after {
						return fail(i, "a mark's end before its start")
					}
				}
			}
		}

		// Predecessors.
		switch {
		case op.Insert && len(op.Preds) > 0:
			return fail(i, "an insertion with predecessors")
		case !op.Insert && len(op.Preds) == 0 && (op.Action == amcheck.Delete || op.Action == amcheck.Increment || !op.MapKey):
			return fail(i, "an overwrite, deletion or increment of nothing")
		}
		var want uint64 // what a predecessor addresses
		if op.MapKey {
			n, ok := mine.nameNumber(op.Key)
			if !ok && len(op.Preds) > 0 {
				return fail(i, "predecessor at a key nothing was set at")
			}
			want = keyName | uint64(n)
		} else {
			want = elem
		}
		for j, p := range op.Preds {
			if j > 0 {
				q := op.Preds[j-1]
				if q.Counter > p.Counter || (q.Counter == p.Counter && bytes.Compare(c.Actors[q.Actor], c.Actors[p.Actor]) >= 0) {
					return fail(i, "predecessors out of order")
				}
			}
			g, ok := resolve(p)
			r, found := lookup(g)
			if !ok || !found || r.obj != obj || !older(g) {
				return fail(i, "predecessor %d@%x is not an op of its object", p.Counter, c.Actors[p.Actor])
			}
			switch roleOf(r.kind) {
			case roleElem:
				if op.MapKey || g != elem {
					return fail(i, "predecessor %d@%x is another element", p.Counter, c.Actors[p.Actor])
				}
			case rolePut:
				if k, _ := mine.key(g); k != want {
					return fail(i, "predecessor %d@%x is at another key", p.Counter, c.Actors[p.Actor])
				}
			default:
				return fail(i, "predecessor %d@%x is a mark", p.Counter, c.Actors[p.Actor])
			}
			if op.Action == amcheck.Increment && holdsOf(r.kind) != holdsCounter {
				return fail(i, "an increment of something not a counter")
			}
		}

		if kind, ok := opKind(op); ok {
			mine.addOp(id, obj, elem, kind)
			if roleOf(kind) == rolePut {
				if op.MapKey {
					mine.keys[id] = keyName | uint64(mine.addName(op.Key))
				} else {
					mine.keys[id] = elem
				}
			}
		}
	}

	// The causal check: every other change named is in this one's past,
	// and so is the actor's previous change.
	need := make(map[uint32]uint64, len(past)+1)
	for actor, ctr := range past {
		seq, ok := x.seqOf(actor, ctr)
		if !ok {
			return fmt.Errorf("%w: change %x names ops of no change of the document", ErrRefused, c.Hash[:4])
		}
		if actor == self && seq >= c.Seq {
			return fmt.Errorf("%w: change %x names ops of its actor's later changes", ErrRefused, c.Hash[:4])
		}
		need[actor] = seq
	}
	if c.Seq > 1 {
		need[self] = max(need[self], c.Seq-1)
	}
	if !x.inPast(c.Deps, need) {
		return fmt.Errorf("%w: change %x names ops of changes it does not depend on", ErrRefused, c.Hash[:4])
	}
	x.add(c)
	return nil
}

// inPast reports whether, for every actor in need, the changes deps
// depend on (deps included) hold the actor's change with that sequence
// number. An actor's change depends on the actor's previous one, so a
// later change of the actor in the past is as good.
func (x *refIndex) inPast(deps [][32]byte, need map[uint32]uint64) bool {
	if len(need) == 0 {
		return true
	}
	if len(deps) == len(x.heads) {
		all := true
		for _, d := range deps {
			if _, ok := x.heads[d]; !ok {
				all = false
				break
			}
		}
		if all {
			return true // it depends on the whole document
		}
	}
	seen := make(map[[32]byte]struct{})
	stack := append([][32]byte(nil), deps...)
	for len(stack) > 0 {
		h := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if _, ok := seen[h]; ok {
			continue
		}
		seen[h] = struct{}{}
		n, ok := x.change(h)
		if !ok {
			continue
		}
		if s, ok := need[n.actor]; ok && n.seq >= s {
			delete(need, n.actor)
			if len(need) == 0 {
				return true
			}
		}
		stack = append(stack, n.deps...)
	}
	return false
}

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
