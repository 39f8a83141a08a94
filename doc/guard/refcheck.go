package guard

import (
	"bytes"
	"fmt"
	"math"

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
// on it), and a change's ops start right after the last op of its past,
// as automerge starts them. Tables, and deletions that carry a value, a
// mark name or an expand flag, are refused: automerge 3 cannot hold them.

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
	mine := newOverlay(x)
	if !selfKnown {
		mine.actorNo[string(c.Actors[0])] = self
		mine.actorID[self] = string(c.Actors[0])
		mine.actors = int(self) + 1
	}
	lookup := func(g uint64) (opRun, bool) { return mine.op(g) }
	// runObj is the object of the op before, if it was an element
	// inserted into a list or text and indexed as one (runs is set).
	var runObj uint64
	runs := false
	for i := range c.OpList {
		op := &c.OpList[i]
		ctr := c.StartOp + uint64(i)
		id := uint64(self)<<32 | ctr

		// The rest of a run: an element inserted, with no predecessors,
		// right after the op before, which is an element of the same
		// object (a paste, text typed). The checks below would pass it
		// as they passed the op before: the same object, resolved the
		// same way, older than both; an element that is the op before,
		// of that object, older, not an overwrite; no mark. So it is
		// indexed as they would index it.
		if runs && op.Insert && !op.MapKey && len(op.Preds) == 0 && op.Obj == c.OpList[i-1].Obj &&
			op.Elem.Actor == 0 && op.Elem.Counter != 0 && uint64(op.Elem.Counter) == ctr-1 {
			if kind, ok := opKind(op); ok && roleOf(kind) == roleElem && holdsOf(kind) != holdsTable {
				mine.addOp(id, runObj, id-1, kind)
				continue
			}
		}
		runs = false
		older := func(g uint64) bool { return uint64(uint32(g)) < ctr }

		switch {
		case op.Action == amcheck.MakeTable:
			// automerge 3 keeps no index of a table's contents: an op in
			// one fails there. No stock client makes tables.
			return fail(i, "a table")
		case op.Action == amcheck.Delete && (op.Value != amcheck.ValueNull || op.MarkStart || op.Expand):
			// automerge keeps a deletion only as its target's successor:
			// a value, a mark name or an expand flag on it is lost, and the
			// change rebuilds to another hash.
			return fail(i, "a deletion that carries a value, a mark name or an expand flag")
		}

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
			runs, runObj = op.Insert && !op.MapKey && roleOf(kind) == roleElem, obj
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
	found, ok := x.inPast(c.Deps, need)
	if !ok {
		return fmt.Errorf("%w: change %x: its past is too long to check (over %d changes walked for the message)", ErrLimit, c.Hash[:4], maxPastSteps)
	}
	if !found {
		return fmt.Errorf("%w: change %x names ops of changes it does not depend on", ErrRefused, c.Hash[:4])
	}
	// automerge starts a change's ops right after the last op of its
	// past: a stock client fails to load one that starts lower, and one
	// that starts higher spends op counters nobody used, which automerge
	// keeps as it loads a saved document (one whose counters reach 2^25
	// does not load in automerge 3.5).
	var pastMax uint32
	for _, d := range c.Deps {
		if dn, ok := x.change(d); ok {
			pastMax = max(pastMax, dn.maxOp)
		}
	}
	if c.StartOp != uint64(pastMax)+1 {
		return fmt.Errorf("%w: change %x starts its ops at %d, not right after its past's last, %d", ErrRefused, c.Hash[:4], c.StartOp, pastMax)
	}
	x.add(c)
	return nil
}

// maxPastSteps bounds the changes one message's causal checks may walk.
const maxPastSteps = 1 << 20

// inPast reports whether, for every actor in need, the changes deps
// depend on (deps included) hold the actor's change with that sequence
// number. An actor's change depends on the actor's previous one, so a
// later change of the actor in the past is as good; a change whose cover
// passes the needed change's index has it in its past; and a change taken
// before the needed one cannot lead to it, so the walk covers only what
// was taken between the two. ok is false if the walk passed the message's
// budget.
func (x *refIndex) inPast(deps [][32]byte, need map[uint32]uint64) (found, ok bool) {
	if len(need) == 0 {
		return true, true
	}
	if len(deps) == x.nHeads {
		all := true
		for _, d := range deps {
			if !x.isHead(d) {
				all = false
				break
			}
		}
		if all {
			return true, true // it depends on the whole document
		}
	}
	// Each change needed, by the order the index took it in.
	taken := make(map[uint32]uint64, len(need))
	lowest := uint64(math.MaxUint64)
	for a, s := range need {
		ac, ok := x.changeOf(a, s)
		if !ok {
			return false, true
		}
		taken[a] = uint64(ac.index)
		lowest = min(lowest, uint64(ac.index))
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
		if !ok || n.index < lowest {
			continue
		}
		if x.steps++; x.steps > maxPastSteps {
			return false, false
		}
		if s, ok := need[n.actor]; ok && n.seq >= s {
			delete(need, n.actor)
		}
		lowest = math.MaxUint64
		for a := range need {
			if taken[a] < n.cover {
				delete(need, a)
			} else {
				lowest = min(lowest, taken[a])
			}
		}
		if len(need) == 0 {
			return true, true
		}
		if n.index > lowest {
			stack = x.appendDeps(stack, n)
		}
	}
	return false, true
}
