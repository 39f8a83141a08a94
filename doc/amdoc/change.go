package amdoc

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"slices"

	"github.com/tandemhq/tandem/doc/amcheck"
)

// A change chunk written in Go, for the edits of edit.go: the ops of
// one change, encoded as automerge encodes a change, so that the guard's
// Canonical rule admits it and a saved document holding it loads.

// encodeChange writes a change chunk of the ops, by actor, as automerge
// encodes one (amcheck's Canonical rule): the author first among the
// actors, then the others the ops name, in byte order; every column
// written with the forms automerge writes, and left out when automerge
// leaves it out.
func (s *opSet) encodeChange(actor uint32, seq, startOp uint64, time int64, deps [][32]byte, ops []changeOp, values []byte) ([]byte, [32]byte) {
	slices.SortFunc(deps, func(a, b [32]byte) int { return bytes.Compare(a[:], b[:]) })
	preds := make([][]id, len(ops))
	for i := range ops {
		preds[i] = slices.Clone(ops[i].preds)
		slices.SortFunc(preds[i], func(a, b id) int {
			if a.ctr != b.ctr {
				return int(a.ctr) - int(b.ctr)
			}
			return bytes.Compare(s.actors[a.actor], s.actors[b.actor])
		})
	}
	h := changeHead{deps: deps, seq: seq, startOp: startOp, time: time}
	return appendChange(nil, s.actors, actor, &h, len(ops), func(k int, e *encOp) {
		o := &ops[k]
		*e = encOp{obj: o.obj, elem: o.elem, mapKey: o.mapKey, key: []byte(o.key), insert: o.insert,
			action: o.action, vtype: o.vtype, value: values[o.valAt : o.valAt+o.valLen], preds: preds[k]}
	})
}

// changeHead is what a change chunk holds besides its ops.
type changeHead struct {
	deps    [][32]byte // in the order the chunk lists them
	seq     uint64
	startOp uint64
	time    int64
	message []byte
	extra   []byte
}

// encOp is one op as appendChange writes it; its IDs number actors as
// the actors given to appendChange do.
type encOp struct {
	obj, elem id // elem: a list op's element (ctr 0: the head)
	mapKey    bool
	key       []byte // a map op's key
	insert    bool
	expand    bool
	action    amcheck.Action
	vtype     amcheck.ValueType
	value     []byte
	preds     []id // in the order the change lists them (Lamport order)
	mark      []byte
	hasMark   bool
}

// appendChange appends to dst a change chunk by author (an index into
// actors) of n ops, read by at (which may reuse the encOp it is given;
// it is called twice for each op), and returns it with its hash. It
// writes the chunk as automerge writes one: the author first among the
// actors, then the others the ops name (objects, elements,
// predecessors), in byte order; every column with the forms automerge
// writes, left out when automerge leaves it out; the extra bytes after
// the columns.
func appendChange(dst []byte, actors [][]byte, author uint32, h *changeHead, n int, at func(k int, o *encOp)) ([]byte, [32]byte) {
	used := map[uint32]bool{}
	note := func(x id) {
		if x.ctr != 0 && x.actor != author {
			used[x.actor] = true
		}
	}
	var o encOp
	for k := range n {
		at(k, &o)
		note(o.obj)
		if !o.mapKey {
			note(o.elem)
		}
		for _, p := range o.preds {
			note(p)
		}
	}
	others := make([]uint32, 0, len(used))
	for a := range used {
		others = append(others, a)
	}
	slices.SortFunc(others, func(a, b uint32) int { return bytes.Compare(actors[a], actors[b]) })
	local := map[uint32]uint64{author: 0}
	for i, a := range others {
		local[a] = uint64(i + 1)
	}
	var (
		objActor, objCtr, keyActor uintCol
		keyCtr                     = newDelta()
		keyStr                     = newString()
		insert                     boolCol
		action, predNum, predActor uintCol
		predCtr                    = newDelta()
		vals                       valueCols
		expand                     boolCol
		markName                   = newString()
	)
	for k := range n {
		at(k, &o)
		if o.obj.ctr == 0 {
			objActor.null()
			objCtr.null()
		} else {
			objActor.add(local[o.obj.actor])
			objCtr.add(uint64(o.obj.ctr))
		}
		switch {
		case o.mapKey:
			keyActor.null()
			keyCtr.null()
			keyStr.add(string(o.key))
		case o.elem.ctr == 0:
			keyActor.null()
			keyCtr.add(0)
			keyStr.null()
		default:
			keyActor.add(local[o.elem.actor])
			keyCtr.add(int64(o.elem.ctr))
			keyStr.null()
		}
		insert.add(o.insert)
		action.add(uint64(o.action))
		vals.add(o.vtype, o.value)
		predNum.add(uint64(len(o.preds)))
		for _, p := range o.preds {
			predActor.add(local[p.actor])
			predCtr.add(int64(p.ctr))
		}
		expand.add(o.expand)
		if o.hasMark {
			markName.add(string(o.mark))
		} else {
			markName.null()
		}
	}
	cols := []column{
		{spec(0, typeActor), objActor.finish()},
		{spec(0, typeUint), objCtr.finish()},
		{spec(1, typeActor), keyActor.finish()},
		{spec(1, typeDelta), keyCtr.finish()},
		{spec(1, typeString), keyStr.finish()},
		{spec(3, typeBool), insert.finish()},
		{spec(4, typeUint), action.finish()},
		{spec(5, typeValueMeta), vals.meta.finish()},
		{spec(5, typeValueRaw), vals.raw},
		{spec(7, typeGroup), predNum.finish()},
		{spec(7, typeActor), predActor.finish()},
		{spec(7, typeDelta), predCtr.finish()},
	}
	if expand.any { // left out when all false, as automerge does
		cols = append(cols, column{spec(9, typeBool), expand.finish()})
	}
	cols = append(cols, column{spec(10, typeString), markName.finish()})
	var b []byte
	b = binary.AppendUvarint(b, uint64(len(h.deps)))
	for _, d := range h.deps {
		b = append(b, d[:]...)
	}
	b = binary.AppendUvarint(b, uint64(len(actors[author])))
	b = append(b, actors[author]...)
	b = binary.AppendUvarint(b, h.seq)
	b = binary.AppendUvarint(b, h.startOp)
	b = amcheck.AppendSleb(b, h.time)
	b = binary.AppendUvarint(b, uint64(len(h.message)))
	b = append(b, h.message...)
	b = binary.AppendUvarint(b, uint64(len(others)))
	for _, a := range others {
		b = binary.AppendUvarint(b, uint64(len(actors[a])))
		b = append(b, actors[a]...)
	}
	b = appendMeta(b, cols)
	b = appendData(b, cols)
	b = append(b, h.extra...)

	head := binary.AppendUvarint([]byte{1}, uint64(len(b)))
	sum := sha256.New()
	sum.Write(head)
	sum.Write(b)
	var hash [32]byte
	sum.Sum(hash[:0])
	dst = slices.Grow(dst, 8+len(head)+len(b))
	dst = append(dst, 0x85, 0x6f, 0x4a, 0x83)
	dst = append(dst, hash[:4]...)
	dst = append(dst, head...)
	return append(dst, b...), hash
}
