package amdoc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/tandemhq/tandem/doc/amcheck"
)

// The document's content, as automerge's toJS shows it: a map as an
// object of its keys' winning values, a list as an array of its visible
// elements, a text as its string, a counter as its value with its
// increments, a timestamp as the ISO string a JS Date turns into in
// JSON. A value is visible while no op overwrote or deleted it (a
// counter's increments do neither); of a map key's or a list element's
// visible values, the one with the highest Lamport ID wins, as in
// automerge. Marks do not show in a text's string.

// MaxViewDepth bounds how deeply a document's objects may nest for View:
// a deeper document is refused (ErrTooDeep) rather than walked, so that
// no document can make a read recurse without end.
const MaxViewDepth = 10_000

// ErrTooDeep is View's error for a document whose objects nest deeper
// than MaxViewDepth.
var ErrTooDeep = errors.New("amdoc: the document's objects nest too deeply to show")

// View returns the content the changes make (change chunks one after
// another, each after the changes it depends on, as Save takes them) as
// automerge's toJS shows it, in Go values that encoding/json writes as
// toJS's JSON: map[string]any, []any, string, int64, uint64, float64
// (NaN and infinities as nil, as JSON.stringify writes them), bool, nil
// and []byte for bytes (base64 in JSON, where toJS has a Uint8Array).
// It reads at most Save's ops and allocates about as much as a save.
func View(ctx context.Context, changes []byte) (map[string]any, error) {
	s, err := read(ctx, changes, maxOps)
	if err != nil {
		return nil, err
	}
	return s.view(ctx)
}

func (s *opSet) view(ctx context.Context) (map[string]any, error) {
	v, err := s.viewer(ctx)
	if err != nil {
		return nil, err
	}
	root, err := v.value(v.objects[id{}], 0)
	if err != nil {
		return nil, err
	}
	return root.(map[string]any), nil
}

// viewer reads which op shows at each map key and list element of
// every object.
func (s *opSet) viewer(ctx context.Context) (*viewer, error) {
	succ, succAt, order, err := s.ordered(ctx)
	if err != nil {
		return nil, err
	}
	v := viewer{s: s, succ: succ, succAt: succAt, order: order, objects: map[id]*object{{}: {}}}
	for i := range s.ops {
		if o := &s.ops[i]; o.action.Makes() {
			v.objects[o.id] = &object{list: o.action == amcheck.MakeList, text: o.action == amcheck.MakeText}
		}
	}
	// order lists each object's ops together: a map's by key, then in
	// Lamport order; a list's element by element, its insertion first.
	var cur *object
	var curObj id
	var key uint32
	for k, i := range order {
		if k%4096 == 4095 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		o := &s.ops[i]
		if cur == nil || o.obj != curObj {
			cur, curObj, key = v.objects[o.obj], o.obj, 0
		}
		if cur.list || cur.text {
			if o.flags&flagInsert != 0 {
				cur.elems = append(cur.elems, entry{op: -1, from: int32(k)})
			}
			if n := len(cur.elems); n > 0 {
				cur.elems[n-1].to = int32(k + 1)
				if v.visible(int(i)) {
					cur.elems[n-1].op = i // later ops come in Lamport order
				}
			}
			continue
		}
		if o.key != key {
			key = o.key
			cur.keys = append(cur.keys, entry{key: o.key, op: -1, from: int32(k)})
		}
		cur.keys[len(cur.keys)-1].to = int32(k + 1)
		if v.visible(int(i)) {
			cur.keys[len(cur.keys)-1].op = i
		}
	}
	return &v, nil
}

// object is what the view keeps of one object while it reads the ops.
type object struct {
	list, text bool
	keys       []entry // a map's keys, each with its winning op (-1: none)
	elems      []entry // a list's elements, each with its winning op (-1: none visible)
}

// entry is a map key or a list element: its winning op, and where its
// ops are in the document's order (from, to).
type entry struct {
	key      uint32
	op       int32
	from, to int32
}

type viewer struct {
	s       *opSet
	succ    []id
	succAt  []uint32
	order   []int32
	objects map[id]*object
}

// visible reports whether op i shows a value: a put or an object not
// overwritten nor deleted (a counter's increments leave it showing).
func (v *viewer) visible(i int) bool {
	o := &v.s.ops[i]
	if o.action != amcheck.Put && !o.action.Makes() {
		return false
	}
	for _, x := range v.succ[v.succAt[i]:v.succAt[i+1]] {
		j, ok := v.s.opIndex(x)
		if !ok || v.s.ops[j].action != amcheck.Increment || o.vtype != amcheck.ValueCounter {
			return false
		}
	}
	return true
}

// objectReplacement is what a text shows for an element that is not a
// string (a block marker, say), as automerge's JS API shows it.
const objectReplacement = '\uFFFC'

// value returns an object's content, depth objects below the root.
func (v *viewer) value(obj *object, depth int) (any, error) {
	if depth > MaxViewDepth {
		return nil, ErrTooDeep
	}
	switch {
	case obj.text:
		var b strings.Builder
		for _, e := range obj.elems {
			switch {
			case e.op < 0:
			case v.s.ops[e.op].vtype == amcheck.ValueString:
				b.Write(v.raw(int(e.op)))
			default:
				b.WriteRune(objectReplacement) // a block marker or any other value
			}
		}
		return b.String(), nil
	case obj.list:
		out := make([]any, 0, len(obj.elems))
		for _, e := range obj.elems {
			if e.op < 0 {
				continue
			}
			x, err := v.opValue(int(e.op), depth)
			if err != nil {
				return nil, err
			}
			out = append(out, x)
		}
		return out, nil
	}
	out := make(map[string]any, len(obj.keys))
	for _, e := range obj.keys {
		if e.op < 0 {
			continue
		}
		x, err := v.opValue(int(e.op), depth)
		if err != nil {
			return nil, err
		}
		out[v.s.keys[e.key-1]] = x
	}
	return out, nil
}

func (v *viewer) raw(i int) []byte {
	o := &v.s.ops[i]
	return v.s.values[o.valAt : o.valAt+o.valLen]
}

// opValue returns the value a visible op shows.
func (v *viewer) opValue(i int, depth int) (any, error) {
	o := &v.s.ops[i]
	if o.action.Makes() {
		obj, ok := v.objects[o.id]
		if !ok {
			return nil, fmt.Errorf("amdoc: object %d@%x is not in the document", o.id.ctr, v.s.actors[o.id.actor])
		}
		return v.value(obj, depth+1)
	}
	raw := v.raw(i)
	switch o.vtype {
	case amcheck.ValueNull:
		return nil, nil
	case amcheck.ValueFalse:
		return false, nil
	case amcheck.ValueTrue:
		return true, nil
	case amcheck.ValueUint:
		u, _ := binary.Uvarint(raw)
		return u, nil
	case amcheck.ValueInt:
		n, _ := sleb(raw)
		return n, nil
	case amcheck.ValueFloat:
		if len(raw) != 8 {
			return nil, nil
		}
		f := math.Float64frombits(binary.LittleEndian.Uint64(raw))
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, nil
		}
		return f, nil
	case amcheck.ValueString:
		return string(raw), nil
	case amcheck.ValueBytes:
		return append([]byte{}, raw...), nil
	case amcheck.ValueCounter:
		n, _ := sleb(raw)
		for _, x := range v.succ[v.succAt[i]:v.succAt[i+1]] {
			j, _ := v.s.opIndex(x)
			n += v.increment(j)
		}
		return n, nil
	case amcheck.ValueTimestamp:
		n, _ := sleb(raw)
		return isoTime(n), nil
	}
	return nil, nil // a type automerge does not know: toJS has none either
}

// increment returns what increment op j adds.
func (v *viewer) increment(j int) int64 {
	raw := v.raw(j)
	switch v.s.ops[j].vtype {
	case amcheck.ValueUint:
		u, _ := binary.Uvarint(raw)
		return int64(u)
	case amcheck.ValueInt, amcheck.ValueCounter:
		n, _ := sleb(raw)
		return n
	}
	return 0
}

// isoTime writes milliseconds since 1970 as a JS Date's toJSON does.
func isoTime(ms int64) any {
	const maxDate = 8.64e15 // a JS Date's range, either side of 1970
	if ms > maxDate || ms < -maxDate {
		return nil // an invalid Date, which JSON writes as null
	}
	t := time.UnixMilli(ms).UTC()
	if y := t.Year(); y < 0 || y > 9999 {
		sign := "+"
		if y < 0 {
			sign, y = "-", -y
		}
		return fmt.Sprintf("%s%06d%s", sign, y, t.Format("-01-02T15:04:05.000Z"))
	}
	return t.Format("2006-01-02T15:04:05.000Z")
}
