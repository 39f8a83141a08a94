package mention

import (
	"bytes"
	"iter"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/tandemhq/tandem/doc/amcheck"
)

// content is what the node knows of a document's content: the values of
// the mention fields (Fields), followed in Go from the changes the room's
// log takes (doc.Observer.Applied), for the tracker. It keeps the registers of
// the keys on the fields' paths, and each text object made at a field's
// last key, in runs of elements (textObj), in automerge's order: an
// element comes right after the one it was inserted after, and of the
// elements inserted at one place, the later (higher counter, then higher
// actor ID) first. A document's other content is not kept.
//
// Every change it takes passed the guard (or came from the store or
// another node, where it had), in an order in which each comes after
// what it depends on. Its methods are called under the room's apply lock
// (Applying, Applied, doc.Room.Hold).
type content struct {
	paths    [][]string        // the text field's keys, then the title field's
	keys     map[string]bool   // every key on the paths
	ends     map[string]bool   // the keys that end a path
	actors   map[string]uint32 // actor ID → number
	actorIDs []string
	regs     map[register][]value
	texts    map[uint64]*textObj // by the id of the op that made it
}

// An op's id as the index keeps it: actor number << 32 | counter; 0 is
// the root (and, as an element, the head of a text).

// register is a map key of an object.
type register struct {
	obj uint64
	key string
}

// value is what an op put in a register.
type value struct {
	id   uint64
	kind uint8 // valueMap, valueText, valueString or valueOther
	s    string
}

const (
	valueOther = iota
	valueMap
	valueText
	valueString
)

// textObj is a text's elements, in runs: a run is elements of one actor
// with consecutive counters, each inserted right after the one before it,
// with nothing else inserted after any but the last; so a paste, or a
// stretch typed without moving the cursor, is one run however long. kid
// and next link the runs as automerge orders the elements: kid is the
// first run inserted after the run's last element, next the run inserted
// after the same element as the run's first, that comes after it (-1 for
// none).
type textObj struct {
	runs []textRun
	// starts are each actor's runs by their first counter, in order.
	starts map[uint32][]runStart
	head   int32 // the first run inserted at the head
	// gone marks the deleted elements of runs that have some, a bit per
	// element; over are the elements whose value an op put over the one
	// they were inserted with (by that op's id), each a run of its own.
	gone map[int32][]uint64
	over map[uint64]uint64
	// ats counts the @ in the live values, and size their bytes: a text
	// without an @ holds no mention, and is not read out for one.
	ats, size int
}

type textRun struct {
	id        uint64 // its first element's id; the k-th's is id+k
	n         uint32
	kid, next int32
	// val is the elements' values: one rune each in a run of several,
	// or none (marks, and values that are not strings); a single element
	// may hold any string.
	val []byte
	// valID is the op whose value val is, if not the element's insertion
	// (then the run is one element).
	valID uint64
}

type runStart struct {
	ctr uint32
	run int32
}

func newTextObj() *textObj {
	return &textObj{starts: map[uint32][]runStart{}, head: -1, gone: map[int32][]uint64{}, over: map[uint64]uint64{}}
}

// find returns the run holding element id and its place in the run.
func (t *textObj) find(id uint64) (int32, uint32, bool) {
	ss := t.starts[uint32(id>>32)]
	ctr := uint32(id)
	i := sort.Search(len(ss), func(i int) bool { return ss[i].ctr > ctr }) - 1
	if i < 0 {
		return 0, 0, false
	}
	r := ss[i].run
	if k := ctr - ss[i].ctr; k < t.runs[r].n {
		return r, k, true
	}
	return 0, 0, false
}

// addRun adds a run and indexes it.
func (t *textObj) addRun(x textRun) int32 {
	n := int32(len(t.runs))
	t.runs = append(t.runs, x)
	actor, ctr := uint32(x.id>>32), uint32(x.id)
	ss := t.starts[actor]
	i := sort.Search(len(ss), func(i int) bool { return ss[i].ctr > ctr })
	t.starts[actor] = slices.Insert(ss, i, runStart{ctr, n})
	return n
}

// split splits run r before its k-th element (0 < k < n) and returns the
// run that now starts there.
func (t *textObj) split(r int32, k uint32) int32 {
	a := t.runs[r]
	off := k // byte offset of the k-th value
	if len(a.val) != int(a.n) && len(a.val) > 0 {
		off = 0
		for range k {
			_, w := utf8.DecodeRune(a.val[off:])
			off += uint32(w)
		}
	}
	if len(a.val) == 0 {
		off = 0
	}
	b := t.addRun(textRun{id: a.id + uint64(k), n: a.n - k, kid: a.kid, next: -1, val: a.val[off:]})
	a.n, a.kid, a.val = k, b, a.val[:off:off]
	t.runs[r] = a
	if g, ok := t.gone[r]; ok {
		lo, hi := make([]uint64, (k+63)/64), make([]uint64, (t.runs[b].n+63)/64)
		for i := range min(a.n+t.runs[b].n, uint32(len(g))*64) {
			if g[i/64]&(1<<(i%64)) != 0 {
				if i < k {
					lo[i/64] |= 1 << (i % 64)
				} else {
					j := i - k
					hi[j/64] |= 1 << (j % 64)
				}
			}
		}
		t.gone[r], t.gone[b] = lo, hi
	}
	return b
}

// isolate makes the k-th element of run r a run of its own and returns it.
func (t *textObj) isolate(r int32, k uint32) int32 {
	if k > 0 {
		r = t.split(r, k)
	}
	if t.runs[r].n > 1 {
		t.split(r, 1)
	}
	return r
}

func (t *textObj) setGone(r int32, k uint32) {
	g := t.gone[r]
	if g == nil {
		g = make([]uint64, (t.runs[r].n+63)/64)
	}
	for len(g) < int(t.runs[r].n+63)/64 {
		g = append(g, 0)
	}
	if g[k/64]&(1<<(k%64)) == 0 {
		v := t.value(r, k)
		t.ats -= bytes.Count(v, at)
		t.size -= len(v)
	}
	g[k/64] |= 1 << (k % 64)
	t.gone[r] = g
}

var at = []byte{'@'}

// value returns the value of the k-th element of run r, deleted or not.
func (t *textObj) value(r int32, k uint32) []byte {
	x := &t.runs[r]
	switch {
	case len(x.val) == 0:
		return nil
	case x.n == 1:
		return x.val
	case len(x.val) == int(x.n):
		return x.val[k : k+1]
	}
	off := 0
	for range k {
		_, w := utf8.DecodeRune(x.val[off:])
		off += w
	}
	_, w := utf8.DecodeRune(x.val[off:])
	return x.val[off : off+w]
}

func (t *textObj) isGone(r int32, k uint32) bool {
	g := t.gone[r]
	return int(k/64) < len(g) && g[k/64]&(1<<(k%64)) != 0
}

// element returns where the element whose value op p set is, if p set
// the value it holds (or held until it was deleted).
func (t *textObj) element(p uint64) (int32, uint32, bool) {
	if e, ok := t.over[p]; ok {
		r, k, found := t.find(e)
		return r, k, found && t.runs[r].valID == p
	}
	r, k, found := t.find(p)
	return r, k, found && t.runs[r].valID == 0
}

func newContent(f Fields) *content {
	c := &content{
		paths:  [][]string{strings.Split(f.Text, "."), strings.Split(f.Title, ".")},
		keys:   map[string]bool{},
		ends:   map[string]bool{},
		actors: map[string]uint32{},
		regs:   map[register][]value{},
		texts:  map[uint64]*textObj{},
	}
	for _, p := range c.paths {
		for _, k := range p {
			c.keys[k] = true
		}
		c.ends[p[len(p)-1]] = true
	}
	return c
}

// later reports whether op id a is later than b in automerge's order:
// the higher counter, then the higher actor ID.
func (c *content) later(a, b uint64) bool {
	if uint32(a) != uint32(b) {
		return uint32(a) > uint32(b)
	}
	return c.actorIDs[a>>32] > c.actorIDs[b>>32]
}

// take follows the changes the log took, in its order.
func (c *content) take(cs iter.Seq[*amcheck.Change]) {
	for ch := range cs {
		c.takeOne(ch)
	}
}

func (c *content) takeOne(ch *amcheck.Change) {
	nums := make([]uint64, len(ch.Actors))
	for i, a := range ch.Actors {
		n, ok := c.actors[string(a)]
		if !ok {
			n = uint32(len(c.actorIDs))
			c.actors[string(a)] = n
			c.actorIDs = append(c.actorIDs, string(a))
		}
		nums[i] = uint64(n)
	}
	global := func(id amcheck.OpID) uint64 {
		if id.Counter == 0 {
			return 0
		}
		return nums[id.Actor]<<32 | uint64(id.Counter)
	}
	for i := range ch.OpList {
		op := &ch.OpList[i]
		id := nums[0]<<32 | (ch.StartOp + uint64(i))
		obj := global(op.Obj)
		str := ""
		if op.Value == amcheck.ValueString {
			str = string(ch.Values[op.ValueAt : op.ValueAt+op.ValueLen])
		}
		if op.MapKey {
			if c.keys[op.Key] {
				c.put(register{obj, op.Key}, id, op, str, global)
			}
			continue
		}
		t := c.texts[obj]
		if t == nil {
			continue
		}
		switch {
		case op.Insert:
			v := ""
			if op.Action == amcheck.Put {
				v = str
			}
			t.insert(c, id, global(op.Elem), v)
		case op.Action == amcheck.Put || op.Action == amcheck.Delete:
			for _, p := range op.Preds {
				r, k, ok := t.element(global(p))
				if !ok {
					continue
				}
				if op.Action == amcheck.Delete {
					t.setGone(r, k)
					continue
				}
				r = t.isolate(r, k)
				if x := t.runs[r]; x.valID != 0 {
					delete(t.over, x.valID)
				}
				if !t.isGone(r, 0) {
					t.ats -= bytes.Count(t.runs[r].val, at)
					t.size -= len(t.runs[r].val)
				}
				t.ats += strings.Count(str, "@")
				t.size += len(str)
				t.runs[r].val, t.runs[r].valID = []byte(str), id
				delete(t.gone, r)
				t.over[id] = t.runs[r].id
			}
		}
	}
}

// put applies a map op on a key of the paths.
func (c *content) put(r register, id uint64, op *amcheck.Op, str string, global func(amcheck.OpID) uint64) {
	vals := c.regs[r]
	for _, p := range op.Preds {
		g := global(p)
		for j := 0; j < len(vals); j++ {
			if vals[j].id == g {
				vals = append(vals[:j], vals[j+1:]...)
				j--
			}
		}
	}
	switch op.Action {
	case amcheck.Put:
		kind := uint8(valueOther)
		if op.Value == amcheck.ValueString {
			kind = valueString
		}
		vals = append(vals, value{id: id, kind: kind, s: str})
	case amcheck.MakeMap, amcheck.MakeTable:
		vals = append(vals, value{id: id, kind: valueMap})
	case amcheck.MakeText:
		vals = append(vals, value{id: id, kind: valueText})
		if c.ends[r.key] {
			c.texts[id] = newTextObj()
		}
	case amcheck.MakeList:
		vals = append(vals, value{id: id})
	}
	if len(vals) == 0 {
		delete(c.regs, r)
		return
	}
	c.regs[r] = vals
}

// insert adds an element after parent (0: the head).
func (t *textObj) insert(c *content, id, parent uint64, val string) {
	first := &t.head
	if parent != 0 {
		r, k, ok := t.find(parent)
		if !ok {
			return // after an element it does not know: the guard let none through
		}
		if k < t.runs[r].n-1 {
			t.split(r, k+1)
		}
		// Typing on at the end of a run extends it.
		x := &t.runs[r]
		if x.kid < 0 && x.valID == 0 && id == x.id+uint64(x.n) &&
			(len(x.val) == 0) == (val == "") && (val == "" || utf8.RuneCountInString(val) == 1) &&
			(x.n > 1 || len(x.val) == 0 || utf8.RuneCount(x.val) == 1) {
			x.n++
			x.val = append(x.val, val...)
			t.ats += strings.Count(val, "@")
			t.size += len(val)
			return
		}
		first = &x.kid
	}
	// Among siblings, the later comes first.
	for *first >= 0 && c.later(t.runs[*first].id, id) {
		first = &t.runs[*first].next
	}
	next := *first
	n := t.addRun(textRun{id: id, n: 1, kid: -1, next: next, val: []byte(val)})
	t.ats += strings.Count(val, "@")
	t.size += len(val)
	// addRun may have moved the runs: find the link again.
	if parent == 0 {
		first = &t.head
	} else {
		r, _, _ := t.find(parent)
		first = &t.runs[r].kid
	}
	for *first != next {
		first = &t.runs[*first].next
	}
	*first = n
}

// String returns the text: its elements' values in order.
func (t *textObj) String() string {
	var b strings.Builder
	b.Grow(t.size)
	var stack []int32
	for e := t.head; e >= 0 || len(stack) > 0; {
		if e < 0 {
			e = stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			continue
		}
		x := &t.runs[e]
		if g, ok := t.gone[e]; len(t.gone) == 0 || !ok {
			b.Write(x.val)
		} else if len(x.val) > 0 {
			v := x.val
			for k := uint32(0); k < x.n; k++ {
				w := 1
				if len(x.val) != int(x.n) {
					_, w = utf8.DecodeRune(v)
					if x.n == 1 {
						w = len(v)
					}
				}
				if int(k/64) >= len(g) || g[k/64]&(1<<(k%64)) == 0 {
					b.Write(v[:w])
				}
				v = v[w:]
			}
		}
		if x.next >= 0 {
			stack = append(stack, x.next)
		}
		e = x.kid
	}
	return b.String()
}

// field returns the value at path i (0: the text field, 1: the title
// field) if it is a text or a string, else "".
func (c *content) field(i int) string {
	s, t := c.resolve(i)
	if t != nil {
		return t.String()
	}
	return s
}

// mentionText returns the text field, or "" if it holds no @ (and so no
// mention): a text without one is not read out.
func (c *content) mentionText() string {
	s, t := c.resolve(0)
	if t != nil {
		if t.ats == 0 {
			return ""
		}
		return t.String()
	}
	return s
}

// resolve returns the value at path i: a string, or a text object.
func (c *content) resolve(i int) (string, *textObj) {
	obj := uint64(0)
	path := c.paths[i]
	for k, key := range path {
		vals := c.regs[register{obj, key}]
		if len(vals) == 0 {
			return "", nil
		}
		win := vals[0]
		for _, v := range vals[1:] {
			if c.later(v.id, win.id) {
				win = v
			}
		}
		if k < len(path)-1 {
			if win.kind != valueMap {
				return "", nil
			}
			obj = win.id
			continue
		}
		switch win.kind {
		case valueString:
			return win.s, nil
		case valueText:
			if t := c.texts[win.id]; t != nil {
				return "", t
			}
		}
	}
	return "", nil
}
