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
	used := map[uint32]bool{}
	note := func(x id) {
		if x.ctr != 0 && x.actor != actor {
			used[x.actor] = true
		}
	}
	for i := range ops {
		note(ops[i].obj)
		if !ops[i].mapKey {
			note(ops[i].elem)
		}
		for _, p := range ops[i].preds {
			note(p)
		}
	}
	others := make([]uint32, 0, len(used))
	for a := range used {
		others = append(others, a)
	}
	slices.SortFunc(others, func(a, b uint32) int { return bytes.Compare(s.actors[a], s.actors[b]) })
	local := map[uint32]uint64{actor: 0}
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
	)
	for i := range ops {
		o := &ops[i]
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
			keyStr.add(o.key)
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
		vals.add(o.vtype, values[o.valAt:o.valAt+o.valLen])
		preds := slices.Clone(o.preds)
		slices.SortFunc(preds, func(a, b id) int {
			if a.ctr != b.ctr {
				return int(a.ctr) - int(b.ctr)
			}
			return bytes.Compare(s.actors[a.actor], s.actors[b.actor])
		})
		predNum.add(uint64(len(preds)))
		for _, p := range preds {
			predActor.add(local[p.actor])
			predCtr.add(int64(p.ctr))
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
	slices.SortFunc(deps, func(a, b [32]byte) int { return bytes.Compare(a[:], b[:]) })
	var b []byte
	b = binary.AppendUvarint(b, uint64(len(deps)))
	for _, d := range deps {
		b = append(b, d[:]...)
	}
	b = binary.AppendUvarint(b, uint64(len(s.actors[actor])))
	b = append(b, s.actors[actor]...)
	b = binary.AppendUvarint(b, seq)
	b = binary.AppendUvarint(b, startOp)
	b = amcheck.AppendSleb(b, time)
	b = binary.AppendUvarint(b, 0) // no message
	b = binary.AppendUvarint(b, uint64(len(others)))
	for _, a := range others {
		b = binary.AppendUvarint(b, uint64(len(s.actors[a])))
		b = append(b, s.actors[a]...)
	}
	b = appendMeta(b, cols)
	b = appendData(b, cols)

	head := binary.AppendUvarint([]byte{1}, uint64(len(b)))
	h := sha256.New()
	h.Write(head)
	h.Write(b)
	var hash [32]byte
	h.Sum(hash[:0])
	out := make([]byte, 0, 8+len(head)+len(b))
	out = append(out, 0x85, 0x6f, 0x4a, 0x83)
	out = append(out, hash[:4]...)
	out = append(out, head...)
	return append(out, b...), hash
}
