package amdoc

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/tandemhq/tandem/doc/amcheck"
)

// The op set: every op of every change, as a saved document holds them.
// Ops are kept in the order their changes came, each change's ops
// together (change.base), so that an op is found from its ID through its
// actor's changes (opIndex); a deletion is kept too, though a saved
// document lists it only among the successors of what it deleted.

// id is an op's ID: its counter and its actor's number. Numbers are
// given as actors are met; rank orders them as the document lists its
// actors (by their bytes).
type id struct {
	ctr   uint32
	actor uint32
}

// op is one op, as compact as the document's columns allow.
type op struct {
	id     id
	obj    id     // ctr 0: the root
	elem   id     // a list op's element (ctr 0: the head)
	key    uint32 // a map op's key: 1 + its index in opSet.keys; 0 for a list op
	mark   uint32 // a mark's start: 1 + its name's index in opSet.keys
	valAt  uint32 // its value's bytes in opSet.values
	valLen uint32
	action amcheck.Action
	vtype  amcheck.ValueType
	flags  uint8
}

const (
	flagInsert = 1 << iota
	flagExpand
)

// change is what a document keeps of a change besides its ops.
type change struct {
	actor   uint32
	seq     uint64
	startOp uint64
	ops     int
	base    int // its first op's index in opSet.ops
	time    int64
	message string
	deps    []int32 // the changes it depends on, as indices, in its order
	extra   []byte
	hash    [32]byte
}

type opSet struct {
	changes []change
	byHash  map[[32]byte]int32
	actors  [][]byte
	actorNo map[string]uint32
	byActor [][]int32 // each actor's changes, in op counter order
	ops     []op
	preds   []id     // every op's predecessors, in op order (predAt)
	predAt  []uint32 // op i's predecessors are preds[predAt[i]:predAt[i+1]]
	keys    []string
	keyNo   map[string]uint32
	keyRank []uint32 // key number → place in the sorted keys (sortKeys)
	values  []byte
	rank    []uint32 // actor number → place in the sorted actors
	// budget bounds the ops, and apart the predecessors, the set takes.
	budget int
}

func (s *opSet) actor(a []byte) uint32 {
	if n, ok := s.actorNo[string(a)]; ok {
		return n
	}
	n := uint32(len(s.actors))
	s.actors = append(s.actors, a)
	s.actorNo[string(a)] = n
	s.byActor = append(s.byActor, nil)
	return n
}

func (s *opSet) key(k string) uint32 {
	if n, ok := s.keyNo[k]; ok {
		return n + 1
	}
	n := uint32(len(s.keys))
	s.keys = append(s.keys, k)
	s.keyNo[k] = n
	return n + 1
}

// add takes a change, which must come after every change it depends on.
func (s *opSet) add(c *amcheck.Change) error {
	if _, dup := s.byHash[c.Hash]; dup {
		return nil
	}
	ch := change{
		seq: c.Seq, startOp: c.StartOp, ops: len(c.OpList), base: len(s.ops),
		time: c.Time, message: c.Message, extra: c.Extra, hash: c.Hash,
	}
	for _, d := range c.Deps {
		i, ok := s.byHash[d]
		if !ok {
			return fmt.Errorf("change %x depends on %x, which comes after it or not at all", c.Hash[:4], d[:4])
		}
		ch.deps = append(ch.deps, i)
	}
	nums := make([]uint32, len(c.Actors))
	for i, a := range c.Actors {
		nums[i] = s.actor(a)
	}
	ch.actor = nums[0]
	global := func(x amcheck.OpID) id {
		if x.Counter == 0 {
			return id{}
		}
		return id{ctr: x.Counter, actor: nums[x.Actor]}
	}
	if c.StartOp+uint64(len(c.OpList)) > 1<<32 {
		return fmt.Errorf("change %x: op counters past automerge's limit", c.Hash[:4])
	}
	if uint64(len(s.values))+uint64(len(c.Values)) >= 1<<32 {
		return fmt.Errorf("the document's values pass 4 GiB")
	}
	s.ops = slices.Grow(s.ops, len(c.OpList))
	s.predAt = slices.Grow(s.predAt, len(c.OpList))
	valBase := uint32(len(s.values))
	s.values = append(s.values, c.Values...)
	for i := range c.OpList {
		o := &c.OpList[i]
		r := op{
			id:     id{ctr: uint32(c.StartOp) + uint32(i), actor: ch.actor},
			obj:    global(o.Obj),
			action: o.Action,
			vtype:  o.Value,
			valAt:  valBase + o.ValueAt,
			valLen: o.ValueLen,
		}
		switch {
		case o.MapKey:
			r.key = s.key(o.Key)
		default:
			r.elem = global(o.Elem)
			if o.MarkStart {
				r.mark = s.key(o.Key)
			}
		}
		if o.Insert {
			r.flags |= flagInsert
		}
		if o.Expand {
			r.flags |= flagExpand
		}
		s.ops = append(s.ops, r)
		for _, p := range o.Preds {
			s.preds = append(s.preds, global(p))
		}
		s.predAt = append(s.predAt, uint32(len(s.preds)))
	}
	return s.commit(ch)
}

// commit adds a change whose ops the set took. An actor's changes must
// come in the order of their ops (opIndex searches them so), as a log
// that took them through the guard holds them.
func (s *opSet) commit(ch change) error {
	if prev := s.byActor[ch.actor]; len(prev) > 0 {
		if last := &s.changes[prev[len(prev)-1]]; ch.startOp < last.startOp+uint64(last.ops) {
			return fmt.Errorf("change %x: its ops start at %d, within or before its actor's change before it (%d ops from %d)",
				ch.hash[:4], ch.startOp, last.ops, last.startOp)
		}
	}
	s.byHash[ch.hash] = int32(len(s.changes))
	s.byActor[ch.actor] = append(s.byActor[ch.actor], int32(len(s.changes)))
	s.changes = append(s.changes, ch)
	return nil
}

// predsOf returns op i's predecessors.
func (s *opSet) predsOf(i int) []id {
	lo := uint32(0)
	if i > 0 {
		lo = s.predAt[i-1]
	}
	return s.preds[lo:s.predAt[i]]
}

// opIndex finds the op of an ID.
func (s *opSet) opIndex(x id) (int, bool) {
	if int(x.actor) >= len(s.byActor) {
		return 0, false
	}
	chs := s.byActor[x.actor]
	// The actor's last change starting at or before the counter.
	j, _ := slices.BinarySearchFunc(chs, uint64(x.ctr), func(ci int32, ctr uint64) int {
		return cmp.Compare(s.changes[ci].startOp, ctr+1)
	})
	if j == 0 {
		return 0, false
	}
	c := &s.changes[chs[j-1]]
	off := uint64(x.ctr) - c.startOp
	if off >= uint64(c.ops) {
		return 0, false
	}
	return c.base + int(off), true
}

// sortActors numbers the actors in byte order (rank).
func (s *opSet) sortActors() {
	order := make([]uint32, len(s.actors))
	for i := range order {
		order[i] = uint32(i)
	}
	slices.SortFunc(order, func(a, b uint32) int { return bytes.Compare(s.actors[a], s.actors[b]) })
	s.rank = make([]uint32, len(s.actors))
	for place, a := range order {
		s.rank[a] = uint32(place)
	}
}

// sortKeys ranks the map keys in byte order (keyRank), so that ops are
// sorted by key without comparing strings.
func (s *opSet) sortKeys() {
	order := make([]uint32, len(s.keys))
	for i := range order {
		order[i] = uint32(i)
	}
	slices.SortFunc(order, func(a, b uint32) int { return strings.Compare(s.keys[a], s.keys[b]) })
	s.keyRank = make([]uint32, len(s.keys))
	for place, k := range order {
		s.keyRank[k] = uint32(place)
	}
}

// lamport orders op IDs as automerge does: by counter, then by actor.
func (s *opSet) lamport(a, b id) int {
	if c := cmp.Compare(a.ctr, b.ctr); c != 0 {
		return c
	}
	return cmp.Compare(s.rank[a.actor], s.rank[b.actor])
}
