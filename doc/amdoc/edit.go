package amdoc

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/tandemhq/tandem/doc/amcheck"
)

// Edits made in Go, as one change: what a backend asks for in JSON
// (put, delete, splice, increment at a path) turned into automerge ops
// on the document the changes make, as automerge's JS API would make
// them: a JSON string becomes a text object (as automerge-repo's
// repo.create makes one), an integer an int, another number a float, an
// object a map, an array a list. A text's indices count UTF-16 code
// units, as automerge's JS API does; an index inside a character is
// refused. Edits see those before them in the same change.

// ErrBadEdit is the error of an edit that cannot apply to the document;
// its message says which and why.
var ErrBadEdit = errors.New("bad edit")

// Edit is one edit. Path names the object from the root, as map keys
// (strings) and list indices (numbers); for put, delete and increment
// its last entry is the key or index edited, for splice the path is the
// text or list spliced. Type, for a put, puts Value as a scalar of
// that type rather than as its JSON type says (see typedValue).
type Edit struct {
	Op     string `json:"op"`
	Path   []any  `json:"path"`
	Index  int    `json:"index,omitempty"`
	Delete int    `json:"delete,omitempty"`
	Insert any    `json:"insert,omitempty"`
	Value  any    `json:"value"`
	Type   string `json:"type,omitempty"`
}

// maxDateMillis bounds a timestamp's milliseconds either side of 1970:
// a JS Date holds no more, and stock clients show it as one.
const maxDateMillis = 8_640_000_000_000_000

// typed is a scalar an edit puts as its Type names.
type typed struct {
	vtype amcheck.ValueType
	raw   []byte
}

// typedValue reads a put's value as a scalar of type t: "counter" (an
// integer, which increment then adds to), "timestamp" (milliseconds
// since 1970, or an RFC 3339 string), "bytes" (base64), "string" (a
// string as one value, not a collaborative text: automerge JS's
// ImmutableString), "int" or "uint" (exact, up to 64 bits, where a
// plain JSON number past 2^53 becomes a float, as in JS) or "float".
func typedValue(t string, v any) (typed, error) {
	integer := func() (int64, error) {
		n, ok := v.(json.Number)
		if !ok {
			f, isNum := number(v)
			if !isNum || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
				return 0, fmt.Errorf("a %s's value must be an integer", t)
			}
			return int64(f), nil
		}
		i, err := strconv.ParseInt(string(n), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("a %s's value must be an integer of at most 64 bits, not %s", t, n)
		}
		return i, nil
	}
	switch t {
	case "counter", "int":
		i, err := integer()
		if err != nil {
			return typed{}, err
		}
		vt := amcheck.ValueInt
		if t == "counter" {
			vt = amcheck.ValueCounter
		}
		return typed{vt, amcheck.AppendSleb(nil, i)}, nil
	case "uint":
		n, ok := v.(json.Number)
		u, err := strconv.ParseUint(string(n), 10, 64)
		if !ok || err != nil {
			return typed{}, fmt.Errorf("a uint's value must be an integer from 0 to 2^64-1")
		}
		return typed{amcheck.ValueUint, binary.AppendUvarint(nil, u)}, nil
	case "float":
		f, ok := number(v)
		if !ok || math.IsInf(f, 0) || math.IsNaN(f) {
			return typed{}, fmt.Errorf("a float's value must be a finite number")
		}
		return typed{amcheck.ValueFloat, binary.LittleEndian.AppendUint64(nil, math.Float64bits(f))}, nil
	case "timestamp":
		if s, ok := v.(string); ok {
			at, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				return typed{}, fmt.Errorf("a timestamp's string must be RFC 3339: %v", err)
			}
			if ms := at.UnixMilli(); ms < -maxDateMillis || ms > maxDateMillis {
				return typed{}, fmt.Errorf("a timestamp must be within %d ms of 1970, as a JS Date is", maxDateMillis)
			}
			return typed{amcheck.ValueTimestamp, amcheck.AppendSleb(nil, at.UnixMilli())}, nil
		}
		ms, err := integer()
		if err != nil {
			return typed{}, errors.New("a timestamp's value must be milliseconds since 1970 or an RFC 3339 string")
		}
		if ms < -maxDateMillis || ms > maxDateMillis {
			return typed{}, fmt.Errorf("a timestamp must be within %d ms of 1970, as a JS Date is", maxDateMillis)
		}
		return typed{amcheck.ValueTimestamp, amcheck.AppendSleb(nil, ms)}, nil
	case "bytes":
		s, ok := v.(string)
		b, err := base64.StdEncoding.DecodeString(s)
		if !ok || err != nil {
			return typed{}, errors.New("a bytes value must be a base64 string")
		}
		return typed{amcheck.ValueBytes, b}, nil
	case "string":
		s, ok := v.(string)
		if !ok {
			return typed{}, errors.New("a string value must be a JSON string")
		}
		return typed{amcheck.ValueString, []byte(s)}, nil
	}
	return typed{}, fmt.Errorf("type must be counter, timestamp, bytes, string, int, uint or float, not %q", t)
}

// MaxEditDepth bounds how deeply a value an edit puts may nest.
const MaxEditDepth = 64

// MaxChangeOps bounds the ops the edits of one change may make (a
// character of text is one): what Change allocates grows with them,
// about 170 bytes each (a paste of the most, 45 MB), besides the
// document.
const MaxChangeOps = 1 << 18

var errTooManyEditOps = fmt.Errorf("the edits make more than %d operations: send them in several requests", MaxChangeOps)

// Change returns one change, by actor (which must not have made any
// change of the document: a new actor's first change), that makes the
// edits on the document the changes make (change chunks one after
// another, as View takes them), depending on its heads; and its hash.
// time is the change's time, in seconds since 1970 as automerge's JS
// API writes it. The ops it makes number at most a few per byte of the
// edits' JSON and per edit. No edits make an empty change (as automerge's
// emptyChange, which automerge-repo makes a new empty document with);
// edits that change nothing are refused.
func Change(ctx context.Context, changes []byte, actor []byte, time int64, edits []Edit) ([]byte, [32]byte, error) {
	made := Changes(ctx, changes, []Edits{{Actor: actor, Time: time, Edits: edits}})
	return made[0].Chunk, made[0].Hash, made[0].Err
}

// Edits are the edits of one change, by Actor at Time (as Change takes
// them).
type Edits struct {
	Actor []byte
	Time  int64
	Edits []Edit
}

// Made is a change Changes made, or why it was not.
type Made struct {
	Chunk []byte
	Hash  [32]byte
	Err   error
}

// Changes makes a change of each of batches, in order, as Change would
// make it on the document the changes make with the changes made before
// it: each depends on the one made before it (the first on the
// document's heads). The document is worked out once, unless a batch
// fails part way (a bad edit), which costs working it out again.
func Changes(ctx context.Context, changes []byte, batches []Edits) []Made {
	out := make([]Made, len(batches))
	fail := func(from int, err error) []Made {
		for i := from; i < len(out); i++ {
			out[i].Err = err
		}
		return out
	}
	var e *editor
	var deps [][32]byte
	var made []byte // changes made so far, for working the document out again
	for i, b := range batches {
		if e == nil {
			s, err := read(ctx, slices.Concat(changes, made), maxOps)
			if err != nil {
				return fail(i, err)
			}
			v, err := s.viewer(ctx)
			if err != nil {
				return fail(i, err)
			}
			root, err := v.tree(id{}, v.objects[id{}], amcheck.MakeMap, 0)
			if err != nil {
				return fail(i, err)
			}
			e = &editor{s: s, next: uint32(maxOp(s) + 1), root: root}
			deps = deps[:0]
			for _, h := range s.heads() {
				deps = append(deps, s.changes[h].hash)
			}
		}
		if _, known := e.s.actorNo[string(b.Actor)]; known || len(b.Actor) == 0 {
			out[i].Err = fmt.Errorf("amdoc: actor %x is not new to the document", b.Actor)
			continue
		}
		e.actor, e.ops, e.values = e.s.actor(b.Actor), nil, nil
		start := e.next
		var err error
		for j := range b.Edits {
			if err = e.apply(&b.Edits[j]); err != nil {
				err = fmt.Errorf("%w %d (%s): %v", ErrBadEdit, j, b.Edits[j].Op, err)
				break
			}
		}
		if err == nil && len(e.ops) == 0 && len(b.Edits) > 0 {
			err = fmt.Errorf("%w: the edits change nothing", ErrBadEdit)
		}
		if err != nil {
			out[i].Err = err
			e = nil // what the edits did before they failed stays in e: work it out again
			continue
		}
		out[i].Chunk, out[i].Hash = e.s.encodeChange(e.actor, 1, uint64(start), b.Time, deps, e.ops, e.values)
		made = append(made, out[i].Chunk...)
		deps = append(deps[:0], out[i].Hash)
	}
	return out
}

func maxOp(s *opSet) uint64 {
	var m uint64
	for i := range s.changes {
		if c := &s.changes[i]; c.ops > 0 {
			m = max(m, c.startOp+uint64(c.ops)-1)
		}
	}
	return m
}

// node is an object as the edits see it: a map's keys, or a list's or
// text's visible elements in order.
type node struct {
	id    id
	kind  amcheck.Action // MakeMap, MakeList or MakeText
	keys  map[string]*slot
	elems []*slot
}

// slot is a map key or a list element with a value: the ops that show
// there (which what replaces them names as predecessors) and the
// winner's object, if it is one.
type slot struct {
	elem    id   // a list element's ID (its insertion)
	vis     []id // the ops that show here, in Lamport order
	child   *node
	counter bool // the winner is a counter
	width   int  // a text element's UTF-16 code units
}

// tree builds the object obj for editing.
func (v *viewer) tree(x id, obj *object, kind amcheck.Action, depth int) (*node, error) {
	if depth > MaxViewDepth {
		return nil, ErrTooDeep
	}
	n := &node{id: x, kind: kind}
	fill := func(e entry) (*slot, error) {
		sl := &slot{}
		for _, i := range v.order[e.from:e.to] {
			if v.visible(int(i)) {
				sl.vis = append(sl.vis, v.s.ops[i].id)
			}
		}
		w := &v.s.ops[e.op]
		sl.counter = w.vtype == amcheck.ValueCounter && w.action == amcheck.Put
		if w.action.Makes() {
			k := w.action
			if k == amcheck.MakeTable {
				k = amcheck.MakeMap
			}
			c, err := v.tree(w.id, v.objects[w.id], k, depth+1)
			if err != nil {
				return nil, err
			}
			sl.child = c
		}
		return sl, nil
	}
	if kind == amcheck.MakeMap {
		n.keys = make(map[string]*slot, len(obj.keys))
	}
	for _, e := range obj.keys {
		if e.op >= 0 {
			sl, err := fill(e)
			if err != nil {
				return nil, err
			}
			n.keys[v.s.keys[e.key-1]] = sl
		}
	}
	for _, e := range obj.elems {
		if e.op < 0 {
			continue
		}
		sl, err := fill(e)
		if err != nil {
			return nil, err
		}
		sl.elem = v.s.ops[v.order[e.from]].id
		if kind == amcheck.MakeText {
			sl.width = 1 // a block marker or any other value: U+FFFC, as the view shows it
			if v.s.ops[e.op].vtype == amcheck.ValueString {
				sl.width = utf16Len(v.raw(int(e.op)))
			}
		}
		n.elems = append(n.elems, sl)
	}
	return n, nil
}

func utf16Len(b []byte) int {
	n := 0
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		b = b[size:]
		n += utf16.RuneLen(r)
		if utf16.RuneLen(r) < 0 {
			n++ // invalid: as the replacement character
		}
	}
	return n
}

// changeOp is an op the edits make.
type changeOp struct {
	obj    id
	mapKey bool
	key    string
	elem   id
	insert bool
	action amcheck.Action
	vtype  amcheck.ValueType
	valAt  uint32 // its value's bytes in editor.values
	valLen uint32
	preds  []id
}

type editor struct {
	s      *opSet
	actor  uint32
	next   uint32
	root   *node
	ops    []changeOp
	values []byte // the ops' values, one after another
}

// add makes op o, its value raw (copied), and returns its ID.
func (e *editor) add(o changeOp, raw []byte) id {
	x := id{ctr: e.next, actor: e.actor}
	e.next++
	o.valAt, o.valLen = uint32(len(e.values)), uint32(len(raw))
	e.values = append(e.values, raw...)
	e.ops = append(e.ops, o)
	return x
}

// room reports whether n more ops fit in the change.
func (e *editor) room(n int) error {
	if len(e.ops)+n > MaxChangeOps {
		return errTooManyEditOps
	}
	return nil
}

func (e *editor) apply(ed *Edit) error {
	switch ed.Op {
	case "splice":
		if ed.Type != "" {
			return errors.New("only a put has a type")
		}
		n, err := e.walk(ed.Path)
		if err != nil {
			return err
		}
		return e.splice(n, ed.Index, ed.Delete, ed.Insert)
	case "put", "delete", "increment":
	default:
		return fmt.Errorf("op must be put, delete, splice or increment, not %q", ed.Op)
	}
	if len(ed.Path) == 0 {
		return errors.New("path must name the key or index edited")
	}
	n, err := e.walk(ed.Path[:len(ed.Path)-1])
	if err != nil {
		return err
	}
	last := ed.Path[len(ed.Path)-1]
	if ed.Type != "" && ed.Op != "put" {
		return errors.New("only a put has a type")
	}
	switch ed.Op {
	case "put":
		if ed.Type != "" {
			v, err := typedValue(ed.Type, ed.Value)
			if err != nil {
				return err
			}
			return e.put(n, last, v)
		}
		return e.put(n, last, ed.Value)
	case "delete":
		return e.del(n, last)
	}
	by := int64(1)
	if ed.Value != nil {
		f, ok := number(ed.Value)
		if !ok || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
			return errors.New("an increment's value must be an integer")
		}
		by = int64(f)
	}
	sl, err := e.slotAt(n, last)
	if err != nil {
		return err
	}
	if !sl.counter {
		return fmt.Errorf("%v is not a counter", last)
	}
	o := changeOp{obj: n.id, action: amcheck.Increment, vtype: amcheck.ValueInt, preds: []id{sl.vis[len(sl.vis)-1]}}
	e.at(&o, n, last, sl)
	if err := e.room(1); err != nil {
		return err
	}
	e.add(o, amcheck.AppendSleb(nil, by))
	return nil
}

// walk follows a path from the root to an object.
func (e *editor) walk(path []any) (*node, error) {
	n := e.root
	for k, step := range path {
		sl, err := e.slotAt(n, step)
		if err != nil {
			return nil, fmt.Errorf("path %v: %v", path[:k+1], err)
		}
		if sl.child == nil {
			return nil, fmt.Errorf("path %v: not an object", path[:k+1])
		}
		n = sl.child
	}
	return n, nil
}

// slotAt returns the value at a map key or a list index.
func (e *editor) slotAt(n *node, step any) (*slot, error) {
	switch n.kind {
	case amcheck.MakeMap:
		k, ok := step.(string)
		if !ok {
			return nil, fmt.Errorf("%v: a map's key must be a string", step)
		}
		sl := n.keys[k]
		if sl == nil {
			return nil, fmt.Errorf("no key %q", k)
		}
		return sl, nil
	case amcheck.MakeList:
		i, err := index(step, len(n.elems)-1)
		if err != nil {
			return nil, err
		}
		return n.elems[i], nil
	}
	return nil, fmt.Errorf("%v: a text is edited with splice", step)
}

// at sets where op o acts: the key or element of slot sl at step.
func (e *editor) at(o *changeOp, n *node, step any, sl *slot) {
	if n.kind == amcheck.MakeMap {
		o.mapKey, o.key = true, step.(string)
	} else {
		o.elem = sl.elem
	}
}

func number(v any) (float64, bool) {
	switch x := v.(type) {
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	case float64:
		return x, true
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	}
	return 0, false
}

// index reads a list index between 0 and last.
func index(step any, last int) (int, error) {
	f, ok := number(step)
	if !ok || f != math.Trunc(f) {
		return 0, fmt.Errorf("%v: a list's index must be an integer", step)
	}
	if f < 0 || f > float64(last) {
		return 0, fmt.Errorf("index %v is outside the list (0 to %d)", step, last)
	}
	return int(f), nil
}

func (e *editor) put(n *node, step any, value any) error {
	switch n.kind {
	case amcheck.MakeText:
		return errors.New("a text is edited with splice")
	case amcheck.MakeList:
		if f, ok := number(step); ok && int(f) == len(n.elems) && f == math.Trunc(f) {
			return e.splice(n, len(n.elems), 0, []any{value}) // one past the end: appended
		}
	case amcheck.MakeMap:
		k, ok := step.(string)
		if !ok || k == "" {
			return fmt.Errorf("%v: a map's key must be a non-empty string", step)
		}
		old := n.keys[k]
		o := changeOp{obj: n.id, mapKey: true, key: k}
		if old != nil {
			o.preds = old.vis
		}
		sl, err := e.value(o, value, 0)
		if err != nil {
			return err
		}
		n.keys[k] = sl
		return nil
	}
	sl, err := e.slotAt(n, step)
	if err != nil {
		return err
	}
	o := changeOp{obj: n.id, elem: sl.elem, preds: sl.vis}
	nsl, err := e.value(o, value, 0)
	if err != nil {
		return err
	}
	nsl.elem = sl.elem
	i, _ := index(step, len(n.elems)-1)
	n.elems[i] = nsl
	return nil
}

func (e *editor) del(n *node, step any) error {
	if n.kind == amcheck.MakeText {
		return errors.New("a text is edited with splice")
	}
	sl, err := e.slotAt(n, step)
	if err != nil {
		return err
	}
	o := changeOp{obj: n.id, action: amcheck.Delete, preds: sl.vis}
	e.at(&o, n, step, sl)
	if err := e.room(1); err != nil {
		return err
	}
	e.add(o, nil)
	if n.kind == amcheck.MakeMap {
		delete(n.keys, step.(string))
	} else {
		i, _ := index(step, len(n.elems)-1)
		n.elems = slices.Delete(n.elems, i, i+1)
	}
	return nil
}

// splice deletes del elements (UTF-16 code units of a text) at index
// and inserts insert there: a string's characters into a text, an
// array's values into a list.
func (e *editor) splice(n *node, at, del int, insert any) error {
	if at < 0 || del < 0 {
		return errors.New("index and delete must not be negative")
	}
	var p int // the element at the index
	switch n.kind {
	case amcheck.MakeText:
		units := 0
		for p < len(n.elems) && units < at {
			units += n.elems[p].width
			p++
		}
		if units != at {
			return fmt.Errorf("index %d is past the text's end (%d) or inside a character", at, units)
		}
	case amcheck.MakeList:
		if at > len(n.elems) {
			return fmt.Errorf("index %d is past the list's end (%d)", at, len(n.elems))
		}
		p = at
	default:
		return errors.New("splice edits a text or a list")
	}
	end, gone := p, 0
	for end < len(n.elems) && gone < del {
		if n.kind == amcheck.MakeText {
			gone += n.elems[end].width
		} else {
			gone++
		}
		end++
	}
	if gone != del {
		return fmt.Errorf("cannot delete %d from index %d: the %s ends or a character would be cut", del, at, kind(n))
	}
	if err := e.room(end - p); err != nil {
		return err
	}
	for _, sl := range n.elems[p:end] {
		e.add(changeOp{obj: n.id, elem: sl.elem, action: amcheck.Delete, preds: sl.vis}, nil)
	}
	anchor := id{}
	if p > 0 {
		anchor = n.elems[p-1].elem
	}
	var added []*slot
	switch n.kind {
	case amcheck.MakeText:
		s, ok := insert.(string)
		if !ok && insert != nil {
			return errors.New("a text's insert must be a string")
		}
		if err := e.room(utf8.RuneCountInString(s)); err != nil {
			return err
		}
		count := utf8.RuneCountInString(s)
		e.ops = slices.Grow(e.ops, count)
		e.values = slices.Grow(e.values, len(s))
		// The new elements' slots and their one visible op, in one
		// allocation each.
		slots, ids := make([]slot, count), make([]id, count)
		added = make([]*slot, 0, count)
		var buf [utf8.UTFMax]byte
		for _, r := range s {
			x := e.add(changeOp{obj: n.id, elem: anchor, insert: true, action: amcheck.Put, vtype: amcheck.ValueString}, buf[:utf8.EncodeRune(buf[:], r)])
			k := len(added)
			ids[k] = x
			slots[k] = slot{elem: x, vis: ids[k : k+1 : k+1], width: utf16.RuneLen(r)}
			added = append(added, &slots[k])
			anchor = x
		}
	case amcheck.MakeList:
		vals, ok := insert.([]any)
		if !ok && insert != nil {
			return errors.New("a list's insert must be an array")
		}
		for _, v := range vals {
			sl, err := e.value(changeOp{obj: n.id, elem: anchor, insert: true}, v, 0)
			if err != nil {
				return err
			}
			sl.elem = sl.vis[0]
			added = append(added, sl)
			anchor = sl.elem
		}
	}
	n.elems = slices.Replace(n.elems, p, end, added...)
	return nil
}

func kind(n *node) string {
	if n.kind == amcheck.MakeText {
		return "text"
	}
	return "list"
}

// value makes the ops that put v where o says, and returns what shows
// there then.
func (e *editor) value(o changeOp, v any, depth int) (*slot, error) {
	if depth > MaxEditDepth {
		return nil, fmt.Errorf("the value nests deeper than %d", MaxEditDepth)
	}
	if err := e.room(1); err != nil {
		return nil, err
	}
	var raw []byte
	o.action = amcheck.Put
	switch x := v.(type) {
	case typed:
		o.vtype, raw = x.vtype, x.raw
	case nil:
		o.vtype = amcheck.ValueNull
	case bool:
		o.vtype = amcheck.ValueFalse
		if x {
			o.vtype = amcheck.ValueTrue
		}
	case json.Number, float64, int, int64:
		f, ok := number(x)
		if !ok || math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, fmt.Errorf("%v is not a number automerge holds", x)
		}
		if n, ok := x.(json.Number); ok {
			if i, err := strconv.ParseInt(string(n), 10, 64); err == nil && i >= -(1<<53) && i <= 1<<53 {
				f = float64(i)
			}
		}
		if f == math.Trunc(f) && math.Abs(f) <= 1<<53 {
			o.vtype, raw = amcheck.ValueInt, amcheck.AppendSleb(nil, int64(f))
		} else {
			o.vtype = amcheck.ValueFloat
			raw = binary.LittleEndian.AppendUint64(nil, math.Float64bits(f))
		}
	case string:
		o.action = amcheck.MakeText
		x0 := e.add(o, nil)
		n := &node{id: x0, kind: amcheck.MakeText}
		if err := e.splice(n, 0, 0, x); err != nil {
			return nil, err
		}
		return &slot{vis: []id{x0}, child: n}, nil
	case []any:
		o.action = amcheck.MakeList
		x0 := e.add(o, nil)
		n := &node{id: x0, kind: amcheck.MakeList}
		anchor := id{}
		for _, item := range x {
			sl, err := e.value(changeOp{obj: x0, elem: anchor, insert: true}, item, depth+1)
			if err != nil {
				return nil, err
			}
			sl.elem = sl.vis[0]
			n.elems = append(n.elems, sl)
			anchor = sl.elem
		}
		return &slot{vis: []id{x0}, child: n}, nil
	case map[string]any:
		o.action = amcheck.MakeMap
		x0 := e.add(o, nil)
		n := &node{id: x0, kind: amcheck.MakeMap, keys: make(map[string]*slot, len(x))}
		keys := make([]string, 0, len(x))
		for k := range x {
			if k == "" {
				return nil, errors.New("a map's key must not be empty")
			}
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			sl, err := e.value(changeOp{obj: x0, mapKey: true, key: k}, x[k], depth+1)
			if err != nil {
				return nil, err
			}
			n.keys[k] = sl
		}
		return &slot{vis: []id{x0}, child: n}, nil
	default:
		return nil, fmt.Errorf("a value of type %T", v)
	}
	x0 := e.add(o, raw)
	return &slot{vis: []id{x0}, counter: o.vtype == amcheck.ValueCounter}, nil
}
