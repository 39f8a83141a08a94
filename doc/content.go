package doc

import (
	"strings"

	"github.com/tandemhq/tandem/doc/amcheck"
)

// content is what the node knows of a document's content: the values of
// the mention fields (MentionFields), followed in Go from the changes the
// room's log takes, for the mention tracker. It keeps the registers of
// the keys on the fields' paths, and each text object made at a field's
// last key, element by element, in automerge's order: an element comes
// right after the one it was inserted after, and of the elements inserted
// at one place, the later (higher counter, then higher actor ID) first. A
// document's other content is not kept.
//
// Every change it takes passed the guard (or came from the store or
// another node, where it had), in an order in which each comes after
// what it depends on. Its methods are called under the room's applyMu:
// take with the room's lock too, the readers without it.
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

// textObj is a text's elements, in the order they came; kid and next
// link each element's first child and next sibling (-1 for none), in
// automerge's order.
type textObj struct {
	elems []textElem
	at    map[uint64]int32 // element id → index in elems
	byOp  map[uint64]int32 // the id of an op that set an element's value → index
	head  int32            // the first element inserted at the head
}

type textElem struct {
	id        uint64
	val       string // the character(s); "" for a mark or a deleted element
	valID     uint64 // the op whose value val is
	kid, next int32
}

func newContent(f MentionFields) *content {
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
func (c *content) take(cs []change) {
	for i := range cs {
		c.takeOne(&cs[i].Change)
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
				if e, ok := t.byOp[global(p)]; ok && t.elems[e].valID == global(p) {
					t.elems[e].val = ""
					if op.Action == amcheck.Put {
						t.elems[e].val, t.elems[e].valID = str, id
						t.byOp[id] = e
					}
				}
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
			c.texts[id] = &textObj{at: map[uint64]int32{}, byOp: map[uint64]int32{}, head: -1}
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
	n := int32(len(t.elems))
	t.elems = append(t.elems, textElem{id: id, val: val, valID: id, kid: -1, next: -1})
	t.at[id] = n
	if val != "" {
		t.byOp[id] = n
	}
	first := &t.head
	if parent != 0 {
		p, ok := t.at[parent]
		if !ok {
			return // after an element it does not know: the guard let none through
		}
		first = &t.elems[p].kid
	}
	// Among siblings, the later comes first.
	for *first >= 0 && c.later(t.elems[*first].id, id) {
		first = &t.elems[*first].next
	}
	t.elems[n].next = *first
	*first = n
}

// String returns the text: its elements' values in order.
func (t *textObj) String() string {
	var b strings.Builder
	var stack []int32
	for e := t.head; e >= 0 || len(stack) > 0; {
		if e < 0 {
			e = stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			continue
		}
		x := &t.elems[e]
		b.WriteString(x.val)
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
	obj := uint64(0)
	path := c.paths[i]
	for k, key := range path {
		vals := c.regs[register{obj, key}]
		if len(vals) == 0 {
			return ""
		}
		win := vals[0]
		for _, v := range vals[1:] {
			if c.later(v.id, win.id) {
				win = v
			}
		}
		if k < len(path)-1 {
			if win.kind != valueMap {
				return ""
			}
			obj = win.id
			continue
		}
		switch win.kind {
		case valueString:
			return win.s
		case valueText:
			if t := c.texts[win.id]; t != nil {
				return t.String()
			}
		}
	}
	return ""
}
