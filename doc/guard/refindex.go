package guard

import (
	"sort"

	"github.com/tandemhq/tandem/doc/amcheck"
	"github.com/tandemhq/tandem/doc/amsync"
)

// The reference index: what a document's ops may be named by later ops
// (refcheck.go checks the naming). Ops are kept in runs of consecutive
// counters per actor, so that text typed one character after another
// costs a run, not an entry per character; each change keeps its actor,
// sequence number and dependencies for the causal check.

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
	// maxOp is the highest op counter of the change and its past: the
	// next change's ops start after it.
	maxOp uint32
	// index is the order in which the index took the change (its
	// dependencies were all taken before it); every change taken before
	// cover is the change or in its past (coverOf).
	index uint64
	cover uint64
	// inLog says the change is the document's: its deps are not kept
	// here but in the log, at index (deps is nil).
	inLog bool
}

// baseNode is a changeNode of the document's index, whose hash and
// dependencies are in the log and whose index is its log index.
type baseNode struct {
	actor uint32
	maxOp uint32
	seq   uint32 // a document holds fewer changes (Limits.DocumentChanges)
	cover uint32
}

// actorChange places one of an actor's changes among its op counters.
type actorChange struct {
	startOp uint32
	seq     uint32
	index   uint32 // changeNode.index
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
	// changes are an overlay's changes. The document's index keeps its
	// changes' hashes and dependencies in the room's log instead (one
	// owner for them), and the rest, by log index, in nodes.
	changes map[[32]byte]changeNode
	log     *amsync.Log
	nodes   []baseNode
	count   uint64 // changes taken, the parent's included
	// The document's heads: an overlay keeps what its changes added and
	// removed, over its parent's.
	heads, unheaded map[[32]byte]struct{}
	nHeads          int
}

// newBaseIndex returns the index of a document whose changes log holds,
// nil for a log of its own.
func newBaseIndex(log *amsync.Log) *refIndex {
	x := newRefIndex(nil)
	if log == nil {
		log = amsync.NewLog()
	}
	x.log = log
	return x
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
		x.count, x.nHeads = parent.count, parent.nHeads
		x.unheaded = make(map[[32]byte]struct{})
	}
	return x
}

// newOverlay returns an overlay for one change's ops: it takes no
// changes, so it keeps no heads.
func newOverlay(parent *refIndex) *refIndex {
	return &refIndex{
		parent:  parent,
		actorNo: make(map[string]uint32),
		actorID: make(map[uint32]string),
		runs:    make(map[uint32][]opRun),
		keys:    make(map[uint64]uint64),
		names:   make(map[string]uint32),
		actors:  parent.actors,
		nNames:  parent.nNames,
	}
}

// isHead reports whether no change of the index depends on h's.
func (x *refIndex) isHead(h [32]byte) bool {
	for i := x; i != nil; i = i.parent {
		if _, ok := i.heads[h]; ok {
			return true
		}
		if _, ok := i.unheaded[h]; ok {
			return false
		}
	}
	return false
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
		if i.log != nil {
			return i.baseChange(h)
		}
	}
	return changeNode{}, false
}

// baseChange returns a change of the document's index, from nodes; its
// deps stay in the log (appendDeps).
func (x *refIndex) baseChange(h [32]byte) (changeNode, bool) {
	at, ok := x.log.IndexOf(h)
	if !ok || int(at) >= len(x.nodes) {
		return changeNode{}, false
	}
	b := x.nodes[at]
	return changeNode{actor: b.actor, seq: uint64(b.seq), maxOp: b.maxOp, index: uint64(at), cover: uint64(b.cover), inLog: true}, true
}

// appendDeps appends the hashes n depends on.
func (x *refIndex) appendDeps(hs [][32]byte, n changeNode) [][32]byte {
	if !n.inLog {
		return append(hs, n.deps...)
	}
	for i := x; i != nil; i = i.parent {
		if i.log != nil {
			for _, d := range i.log.DepsAt(int32(n.index)) {
				hs = append(hs, i.log.HashAt(d))
			}
			break
		}
	}
	return hs
}

// seqOf returns the sequence number of the actor's change that holds the
// op counter.
func (x *refIndex) seqOf(actor, ctr uint32) (uint64, bool) {
	for i := x; i != nil; i = i.parent {
		cs := i.byActor[actor]
		j := sort.Search(len(cs), func(j int) bool { return cs[j].startOp > ctr }) - 1
		if j >= 0 {
			return uint64(cs[j].seq), true
		}
	}
	return 0, false
}

// changeOf returns the actor's change with sequence number seq.
func (x *refIndex) changeOf(actor uint32, seq uint64) (actorChange, bool) {
	for i := x; i != nil; i = i.parent {
		cs := i.byActor[actor]
		j := sort.Search(len(cs), func(j int) bool { return uint64(cs[j].seq) >= seq })
		if j < len(cs) && uint64(cs[j].seq) == seq {
			return cs[j], true
		}
	}
	return actorChange{}, false
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
	node := changeNode{actor: self, seq: c.Seq, deps: c.Deps, index: x.count,
		maxOp: uint32(c.StartOp + uint64(len(c.OpList)) - 1)}
	heads := 0
	for _, d := range c.Deps {
		if dn, ok := x.change(d); ok {
			node.maxOp = max(node.maxOp, dn.maxOp)
		}
		if x.isHead(d) {
			heads++
			delete(x.heads, d)
			if x.unheaded != nil {
				x.unheaded[d] = struct{}{}
			}
			x.nHeads--
		}
	}
	node.cover = x.coverOf(c.Deps, node.index, heads == len(c.Deps) && x.nHeads == 0)
	if x.log != nil {
		// The document's index: its log holds the change, at the next
		// index (the room records what its log took, in its order), or
		// is the index's own.
		at, ok := x.log.IndexOf(c.Hash)
		if !ok {
			deps := make([]amsync.Hash, len(c.Deps))
			for i, d := range c.Deps {
				deps[i] = d
			}
			x.log.Add(c.Hash, deps, nil)
			at, ok = x.log.IndexOf(c.Hash)
		}
		if ok && int(at) == len(x.nodes) {
			x.nodes = append(x.nodes, baseNode{actor: node.actor, maxOp: node.maxOp, seq: uint32(node.seq), cover: uint32(node.cover)})
		} else {
			x.changes[c.Hash] = node // out of the log's order: kept by hash
		}
	} else {
		x.changes[c.Hash] = node
	}
	x.count++
	x.heads[c.Hash] = struct{}{}
	x.nHeads++
	cs := x.byActor[self]
	x.byActor[self] = append(cs, actorChange{startOp: uint32(c.StartOp), seq: uint32(c.Seq), index: uint32(node.index)})
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

// maxCoverSteps bounds the changes one coverOf walks.
const maxCoverSteps = 128

// coverOf returns how many of the first changes the index took are all in
// the past of a change with these dependencies, taken at index at (the
// change itself counts): the causal check stops its walk at a change
// whose cover holds what it looks for. A change that depended on every
// head of its time covers all (complete). Otherwise the cover of the
// dependency that has the highest is a start; the walk then marks which
// of the changes taken since are in the past, and the cover grows by
// those taken in a row. While typists who see each other's changes a
// little late type together, no change depends on every head, but each
// one's cover reaches the oldest change its author had not seen: so the
// walk covers only those in flight. A longer walk (a branch made apart
// from the others, arriving) settles for the start, which is still true,
// until a change merges the branches.
func (x *refIndex) coverOf(deps [][32]byte, at uint64, complete bool) uint64 {
	if complete {
		return at + 1
	}
	var from uint64
	for _, d := range deps {
		if n, ok := x.change(d); ok {
			from = max(from, n.cover)
		}
	}
	if from >= at {
		return at + 1
	}
	seen := make(map[uint64]struct{})
	stack := append([][32]byte(nil), deps...)
	for len(stack) > 0 {
		h := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		n, ok := x.change(h)
		if !ok || n.index < from {
			continue
		}
		if _, ok := seen[n.index]; ok {
			continue
		}
		if len(seen) == maxCoverSteps {
			return from
		}
		seen[n.index] = struct{}{}
		stack = x.appendDeps(stack, n)
	}
	cover := from
	for {
		if _, ok := seen[cover]; !ok {
			break
		}
		cover++
	}
	if cover == at {
		return at + 1
	}
	return cover
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
