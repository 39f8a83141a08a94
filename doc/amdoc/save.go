package amdoc

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/tandemhq/tandem/doc/amcheck"
)

// Save returns the document the changes make, saved as automerge saves a
// document: one document chunk. changes are change chunks one after
// another, each after every change it depends on (a change log's order);
// they are trusted (checked when they were taken: amcheck's Canonical
// encoding, references to what exists), and a change given twice is
// taken once.
func Save(changes []byte) ([]byte, error) {
	return save(context.Background(), changes, maxOps)
}

// SaveContext is Save, ending early with ctx.
func SaveContext(ctx context.Context, changes []byte) ([]byte, error) {
	return save(ctx, changes, maxOps)
}

// maxOps bounds the ops Save reads, and apart their predecessors: a
// document may hold no more than its budget pays for (guard.Limits: 16
// bytes an op, 256 MiB by default, so 16 M), and what Save holds and does
// grows with them.
const maxOps = 1 << 25

var errTooManyOps = errors.New("amdoc: the changes hold more operations than a save reads")

// save is Save with a budget of ops, which ends early with ctx.
func save(ctx context.Context, changes []byte, budget int) ([]byte, error) {
	s, err := read(ctx, changes, budget)
	if err != nil {
		return nil, err
	}
	return s.save(ctx)
}

func newOpSet() *opSet {
	return &opSet{
		byHash:  make(map[[32]byte]int32),
		actorNo: make(map[string]uint32),
		keyNo:   make(map[string]uint32),
	}
}

func read(ctx context.Context, changes []byte, budget int) (*opSet, error) {
	s := newOpSet()
	s.budget = budget
	n := amcheck.Chunks(changes)
	s.changes = make([]change, 0, n)
	s.byHash = make(map[[32]byte]int32, n)
	for off, k := 0, 0; off < len(changes); k++ {
		if k%1024 == 1023 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		n, err := s.addPlain(changes[off:])
		if err == nil {
			off += n
			continue
		}
		if !errors.Is(err, errNotPlain) {
			return nil, fmt.Errorf("change at byte %d: %w", off, err)
		}
		// Not a plain change chunk (a compressed one, say): amcheck reads
		// it, within what is left of the budget (8 expanded bytes a
		// predecessor).
		c, n, err := amcheck.ParseChange(changes[off:], amcheck.Limits{ListOps: true,
			MaxOps: max(budget-len(s.ops), 1), MaxExpandedBytes: 8 * int64(max(budget-len(s.preds), 1))})
		if err != nil {
			return nil, fmt.Errorf("change at byte %d: %w", off, err)
		}
		off += n
		if err := s.add(&c); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// ordered ranks the actors and keys, and returns every op's successors
// (successors) and the ops in the document's order (docOrder): what a
// save and a view both start from. It ends early with ctx.
func (s *opSet) ordered(ctx context.Context) (succ []id, succAt []uint32, order []int32, err error) {
	s.sortActors()
	s.sortKeys()
	if succ, succAt, err = s.successors(); err != nil {
		return nil, nil, nil, err
	}
	if ctx.Err() != nil {
		return nil, nil, nil, ctx.Err()
	}
	if order, err = s.docOrder(); err != nil {
		return nil, nil, nil, err
	}
	return succ, succAt, order, ctx.Err()
}

func (s *opSet) save(ctx context.Context) ([]byte, error) {
	succ, succAt, order, err := s.ordered(ctx)
	if err != nil {
		return nil, err
	}
	ops := s.opColumns(order, succ, succAt)
	chs := s.changeColumns()

	var body []byte
	sorted := slices.Clone(s.actors)
	slices.SortFunc(sorted, bytes.Compare)
	body = binary.AppendUvarint(body, uint64(len(sorted)))
	for _, a := range sorted {
		body = binary.AppendUvarint(body, uint64(len(a)))
		body = append(body, a...)
	}
	heads := s.heads()
	body = binary.AppendUvarint(body, uint64(len(heads)))
	for _, h := range heads {
		body = append(body, s.changes[h].hash[:]...)
	}
	body = appendMeta(body, chs)
	body = appendMeta(body, ops)
	body = appendData(body, chs)
	body = appendData(body, ops)
	for _, h := range heads {
		body = binary.AppendUvarint(body, uint64(h))
	}
	return chunk(body), nil
}

// chunk frames a document chunk's body.
func chunk(body []byte) []byte {
	var head []byte
	head = append(head, 0) // the chunk type: a document
	head = binary.AppendUvarint(head, uint64(len(body)))
	sum := sha256.New()
	sum.Write(head)
	sum.Write(body)
	out := make([]byte, 0, 8+len(head)+len(body))
	out = append(out, 0x85, 0x6f, 0x4a, 0x83)
	out = append(out, sum.Sum(nil)[:4]...)
	out = append(out, head...)
	return append(out, body...)
}

// heads returns the changes nothing depends on, as indices, in their
// hashes' order.
func (s *opSet) heads() []int {
	depended := make([]bool, len(s.changes))
	for i := range s.changes {
		for _, d := range s.changes[i].deps {
			depended[d] = true
		}
	}
	var heads []int
	for i, d := range depended {
		if !d {
			heads = append(heads, i)
		}
	}
	slices.SortFunc(heads, func(a, b int) int { return bytes.Compare(s.changes[a].hash[:], s.changes[b].hash[:]) })
	return heads
}

// successors returns, for every op, the ops that overwrite, delete or
// increment it, in Lamport order: op i's are succ[succAt[i]:succAt[i+1]].
func (s *opSet) successors() (succ []id, succAt []uint32, err error) {
	succAt = make([]uint32, len(s.ops)+1)
	for i := range s.ops {
		for _, p := range s.predsOf(i) {
			j, ok := s.opIndex(p)
			if !ok {
				return nil, nil, fmt.Errorf("op %d@%x names %d@%x, which is not in the document", s.ops[i].id.ctr, s.actors[s.ops[i].id.actor], p.ctr, s.actors[p.actor])
			}
			succAt[j+1]++
		}
	}
	for i := 1; i < len(succAt); i++ {
		succAt[i] += succAt[i-1]
	}
	succ = make([]id, succAt[len(s.ops)])
	fill := slices.Clone(succAt[:len(s.ops)])
	for i := range s.ops {
		for _, p := range s.predsOf(i) {
			j, _ := s.opIndex(p)
			succ[fill[j]] = s.ops[i].id
			fill[j]++
		}
	}
	for i := range s.ops {
		if n := succAt[i+1] - succAt[i]; n > 1 {
			slices.SortFunc(succ[succAt[i]:succAt[i+1]], s.lamport)
		}
	}
	return succ, succAt, nil
}

// docOrder returns the ops a document lists, in its order: object by
// object (the root, then the others in Lamport order of their IDs); in a
// map, by key, then Lamport order; in a list or text, element by element
// in the list's order, each element's insertion first, then the ops on
// it in Lamport order. Deletions are left out: a document has them only
// as successors.
func (s *opSet) docOrder() ([]int32, error) {
	// Objects, numbered: the root is 0.
	objNo := map[id]int32{{}: 0}
	objs := []id{{}}
	isList := []bool{false}
	for i := range s.ops {
		if o := &s.ops[i]; o.action.Makes() {
			objNo[o.id] = int32(len(objs))
			objs = append(objs, o.id)
			isList = append(isList, o.action == amcheck.MakeList || o.action == amcheck.MakeText)
		}
	}
	// The ops of each object, in op order.
	at := make([]int32, len(objs)+1)
	of := make([]int32, len(s.ops))
	for i := range s.ops {
		o := &s.ops[i]
		if o.action == amcheck.Delete {
			of[i] = -1
			continue
		}
		n, ok := objNo[o.obj]
		if !ok {
			return nil, fmt.Errorf("op %d@%x is in %d@%x, which is no object", o.id.ctr, s.actors[o.id.actor], o.obj.ctr, s.actors[o.obj.actor])
		}
		of[i] = n
		at[n+1]++
	}
	for i := 1; i < len(at); i++ {
		at[i] += at[i-1]
	}
	grouped := make([]int32, at[len(objs)])
	fill := slices.Clone(at[:len(objs)])
	for i, n := range of {
		if n >= 0 {
			grouped[fill[n]] = int32(i)
			fill[n]++
		}
	}
	of = nil

	objOrder := make([]int32, len(objs))
	for i := range objOrder {
		objOrder[i] = int32(i)
	}
	slices.SortFunc(objOrder[1:], func(a, b int32) int { return s.lamport(objs[a], objs[b]) })

	order := make([]int32, 0, len(grouped))
	l := lister{s: s, local: make([]int32, len(s.ops))}
	for _, n := range objOrder {
		group := grouped[at[n]:at[n+1]]
		if !isList[n] {
			for _, i := range group {
				if s.ops[i].key == 0 {
					return nil, fmt.Errorf("op %d@%x addresses a map by position", s.ops[i].id.ctr, s.actors[s.ops[i].id.actor])
				}
			}
			slices.SortFunc(group, func(a, b int32) int {
				x, y := &s.ops[a], &s.ops[b]
				if c := cmp.Compare(s.keyRank[x.key-1], s.keyRank[y.key-1]); c != 0 {
					return c
				}
				return s.lamport(x.id, y.id)
			})
			order = append(order, group...)
			continue
		}
		var err error
		if order, err = l.list(order, group); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// lister orders the ops of lists, reusing its buffers from one list to
// the next.
type lister struct {
	s        *opSet
	local    []int32 // an element's op index → 1 + its place in elems, for the list being ordered
	elems    []int32 // the list's elements (insertions)
	childAt  []int32 // element e's children are children[childAt[e]:childAt[e+1]]; the head is the last
	children []int32
	updAt    []int32 // element e's other ops are upd[updAt[e]:updAt[e+1]]
	upd      []int32
	parent   []int32
	target   []int32
	stack    [][2]int32
}

func (l *lister) list(order, group []int32) ([]int32, error) {
	s := l.s
	start := len(order)
	l.elems = l.elems[:0]
	for _, i := range group {
		if s.ops[i].flags&flagInsert != 0 {
			l.elems = append(l.elems, i)
			l.local[i] = int32(len(l.elems))
		}
	}
	defer func() {
		for _, i := range l.elems {
			l.local[i] = 0
		}
	}()
	n := int32(len(l.elems))
	head := n
	// Where each element hangs, and what each other op is on.
	l.parent = slices.Grow(l.parent[:0], int(n))[:n]
	l.target = l.target[:0]
	l.childAt = resize(l.childAt, int(n)+3)
	l.updAt = resize(l.updAt, int(n)+3)
	for _, i := range group {
		o := &s.ops[i]
		e := head
		if o.elem.ctr != 0 {
			j, ok := s.opIndex(o.elem)
			if ok && l.local[j] > 0 {
				e = l.local[j] - 1
			} else {
				return nil, fmt.Errorf("op %d@%x names element %d@%x, which is not in its list", o.id.ctr, s.actors[o.id.actor], o.elem.ctr, s.actors[o.elem.actor])
			}
		}
		if o.flags&flagInsert != 0 {
			l.parent[l.local[i]-1] = e
			l.childAt[e+2]++
			continue
		}
		if e == head {
			return nil, fmt.Errorf("op %d@%x sets the head of a list", o.id.ctr, s.actors[o.id.actor])
		}
		l.target = append(l.target, e)
		l.updAt[e+2]++
	}
	l.children = fillGroups(l.childAt, l.children, l.parent)
	l.upd = fillGroups(l.updAt, l.upd, l.target)
	// Children later inserted first; other ops in Lamport order.
	for e := int32(0); e <= n; e++ {
		if c := l.children[l.childAt[e]:l.childAt[e+1]]; len(c) > 1 {
			slices.SortFunc(c, func(a, b int32) int { return s.lamport(s.ops[l.elems[b]].id, s.ops[l.elems[a]].id) })
		}
	}
	// The group's non-insert ops, by their place among the group's.
	others := l.others(group)
	for e := int32(0); e < n; e++ {
		u := l.upd[l.updAt[e]:l.updAt[e+1]]
		for k := range u {
			u[k] = others[u[k]]
		}
		if len(u) > 1 {
			slices.SortFunc(u, func(a, b int32) int { return s.lamport(s.ops[a].id, s.ops[b].id) })
		}
	}
	// Depth first from the head, each element before its children.
	l.stack = append(l.stack[:0], [2]int32{l.childAt[head], l.childAt[head+1]})
	for len(l.stack) > 0 {
		top := &l.stack[len(l.stack)-1]
		if top[0] == top[1] {
			l.stack = l.stack[:len(l.stack)-1]
			continue
		}
		e := l.children[top[0]]
		top[0]++
		if top[0] == top[1] {
			l.stack = l.stack[:len(l.stack)-1] // its last child: nothing to come back to
		}
		order = append(order, l.elems[e])
		order = append(order, l.upd[l.updAt[e]:l.updAt[e+1]]...)
		if l.childAt[e] < l.childAt[e+1] {
			l.stack = append(l.stack, [2]int32{l.childAt[e], l.childAt[e+1]})
		}
	}
	if len(order)-start != len(group) {
		return nil, fmt.Errorf("%d of a list's %d ops do not hang from its head", len(group)-(len(order)-start), len(group))
	}
	return order, nil
}

// others returns the group's ops that are not insertions, in order.
func (l *lister) others(group []int32) []int32 {
	var out []int32
	for _, i := range group {
		if l.s.ops[i].flags&flagInsert == 0 {
			out = append(out, i)
		}
	}
	return out
}

func resize(b []int32, n int) []int32 {
	b = slices.Grow(b[:0], n)[:n]
	clear(b)
	return b
}

// fillGroups turns counts (at[g+2] holding group g's count) into groups
// (group g is out[at[g]:at[g+1]]) of the members k, each in its owner's
// group owner[k].
func fillGroups(at, out []int32, owner []int32) []int32 {
	for i := 2; i < len(at); i++ {
		at[i] += at[i-1]
	}
	// at[g+1] is now group g's start; fill moves it to its end.
	total := at[len(at)-1]
	out = slices.Grow(out[:0], int(total))[:total]
	for k, g := range owner {
		out[at[g+1]] = int32(k)
		at[g+1]++
	}
	return out
}

// Op columns of a document (id << 4 | type).
var (
	specObjActor  = spec(0, typeActor)
	specObjCtr    = spec(0, typeUint)
	specKeyActor  = spec(1, typeActor)
	specKeyCtr    = spec(1, typeDelta)
	specKeyStr    = spec(1, typeString)
	specIDActor   = spec(2, typeActor)
	specIDCtr     = spec(2, typeDelta)
	specInsert    = spec(3, typeBool)
	specAction    = spec(4, typeUint)
	specValMeta   = spec(5, typeValueMeta)
	specValRaw    = spec(5, typeValueRaw)
	specSuccNum   = spec(8, typeGroup)
	specSuccActor = spec(8, typeActor)
	specSuccCtr   = spec(8, typeDelta)
	specExpand    = spec(9, typeBool)
	specMarkName  = spec(10, typeString)
)

func (s *opSet) opColumns(order []int32, succ []id, succAt []uint32) []column {
	var (
		objActor, objCtr, keyActor uintCol
		keyCtr                     = newDelta()
		keyStr                     = newString()
		idActor                    uintCol
		idCtr                      = newDelta()
		insert                     boolCol
		action                     uintCol
		value                      valueCols
		succNum, succActor         uintCol
		succCtr                    = newDelta()
		expand                     boolCol
		markName                   = newString()
	)
	for _, i := range order {
		o := &s.ops[i]
		if o.obj.ctr == 0 {
			objActor.null()
			objCtr.null()
		} else {
			objActor.add(uint64(s.rank[o.obj.actor]))
			objCtr.add(uint64(o.obj.ctr))
		}
		switch {
		case o.key != 0:
			keyActor.null()
			keyCtr.null()
			keyStr.add(s.keys[o.key-1])
		case o.elem.ctr == 0:
			keyActor.null()
			keyCtr.add(0)
			keyStr.null()
		default:
			keyActor.add(uint64(s.rank[o.elem.actor]))
			keyCtr.add(int64(o.elem.ctr))
			keyStr.null()
		}
		idActor.add(uint64(s.rank[o.id.actor]))
		idCtr.add(int64(o.id.ctr))
		insert.add(o.flags&flagInsert != 0)
		action.add(uint64(o.action))
		value.add(o.vtype, s.values[o.valAt:o.valAt+o.valLen])
		sc := succ[succAt[i]:succAt[i+1]]
		succNum.add(uint64(len(sc)))
		for _, x := range sc {
			succActor.add(uint64(s.rank[x.actor]))
			succCtr.add(int64(x.ctr))
		}
		expand.add(o.flags&flagExpand != 0)
		if o.mark != 0 {
			markName.add(s.keys[o.mark-1])
		} else {
			markName.null()
		}
	}
	cols := []column{
		{specObjActor, objActor.finish()},
		{specObjCtr, objCtr.finish()},
		{specKeyActor, keyActor.finish()},
		{specKeyCtr, keyCtr.finish()},
		{specKeyStr, keyStr.finish()},
		{specIDActor, idActor.finish()},
		{specIDCtr, idCtr.finish()},
		{specInsert, insert.finish()},
		{specAction, action.finish()},
		{specValMeta, value.meta.finish()},
		{specValRaw, value.raw},
		{specSuccNum, succNum.finish()},
		{specSuccActor, succActor.finish()},
		{specSuccCtr, succCtr.finish()},
	}
	if expand.any { // left out when all false, as automerge does
		cols = append(cols, column{specExpand, expand.finish()})
	}
	return append(cols, column{specMarkName, markName.finish()})
}

// Change columns of a document.
var (
	specChActor     = spec(0, typeActor)
	specChSeq       = spec(0, typeDelta)
	specChMaxOp     = spec(1, typeDelta)
	specChTime      = spec(2, typeDelta)
	specChMessage   = spec(3, typeString)
	specChDepsNum   = spec(4, typeGroup)
	specChDepsIndex = spec(4, typeDelta)
	specChExtraMeta = spec(5, typeValueMeta)
	specChExtraRaw  = spec(5, typeValueRaw)
)

func (s *opSet) changeColumns() []column {
	var (
		actor     uintCol
		seq       = newDelta()
		maxOp     = newDelta()
		time      = newDelta()
		message   = newString()
		depsNum   uintCol
		depsIndex = newDelta()
		extra     valueCols
	)
	for i := range s.changes {
		c := &s.changes[i]
		actor.add(uint64(s.rank[c.actor]))
		seq.add(int64(c.seq))
		maxOp.add(int64(c.startOp) + int64(c.ops) - 1)
		time.add(c.time)
		if c.message == "" {
			message.null()
		} else {
			message.add(c.message)
		}
		depsNum.add(uint64(len(c.deps)))
		for _, d := range c.deps {
			depsIndex.add(int64(d))
		}
		extra.add(amcheck.ValueBytes, c.extra)
	}
	return []column{
		{specChActor, actor.finish()},
		{specChSeq, seq.finish()},
		{specChMaxOp, maxOp.finish()},
		{specChTime, time.finish()},
		{specChMessage, message.finish()},
		{specChDepsNum, depsNum.finish()},
		{specChDepsIndex, depsIndex.finish()},
		{specChExtraMeta, extra.meta.finish()},
		{specChExtraRaw, extra.raw},
	}
}
