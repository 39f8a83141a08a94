package amtest

import (
	"fmt"
	"strings"

	"github.com/tandemhq/tandem/doc/amcheck"
)

// Actors for hand-built changes.
var (
	ActorA = []byte{0xaa, 0xaa, 0xaa, 0xaa}
	ActorB = []byte{0xbb, 0xbb, 0xbb, 0xbb}
	ActorC = []byte{0xcc, 0xcc, 0xcc, 0xcc}
)

// Insert is an op inserting the string s into the list or text obj after
// the element after (the head: the zero OpID).
func Insert(obj, after amcheck.OpID, s string) Op {
	v, raw := String(s)
	return Op{Obj: obj, Elem: after, Insert: true, Action: amcheck.Put, Value: v, Raw: raw}
}

// Typing returns n+1 changes: a text made by ActorA at the root's
// "text", then n characters typed by ActorA and ActorB in turn, each
// after the one before (the worst case for a reference index: no two
// neighbours share an actor, so no runs).
func Typing(n int) [][]byte {
	actors := [][]byte{ActorA, ActorB}
	first, prev := Encode(Change{Actors: actors[:1], Seq: 1, StartOp: 1,
		Ops: []Op{{MapKey: true, Key: "text", Action: amcheck.MakeText}}})
	out := [][]byte{first}
	seqs := []uint64{1, 0}
	last := amcheck.OpID{} // the last character: the head at first
	for i := range n {
		a := i % 2
		seqs[a]++
		ctr := uint64(i + 2)
		// Actor indices in the change: 0 is its author, 1 the other.
		fix := func(id amcheck.OpID, owner int) amcheck.OpID {
			if id.Counter == 0 {
				return id
			}
			if owner == a {
				id.Actor = 0
			} else {
				id.Actor = 1
			}
			return id
		}
		after := amcheck.OpID{}
		if last.Counter != 0 {
			after = fix(amcheck.OpID{Counter: last.Counter}, int(last.Actor))
		}
		op := Insert(fix(amcheck.OpID{Counter: 1}, 0), after, "x")
		var chunk []byte
		chunk, prev = Encode(Change{Deps: [][32]byte{prev}, Actors: [][]byte{actors[a], actors[1-a]},
			Seq: seqs[a], StartOp: ctr, Ops: []Op{op}})
		out = append(out, chunk)
		last = amcheck.OpID{Counter: uint32(ctr), Actor: uint32(a)}
	}
	return out
}

// Chain returns n changes by ActorC, each after the one before, each
// putting ops keys into the root map and carrying a message of msgLen
// bytes.
func Chain(n, ops, msgLen int) [][]byte {
	var out [][]byte
	var prev [32]byte
	ctr := uint64(1)
	for i := range n {
		var c Change
		c.Actors, c.Seq, c.StartOp = [][]byte{ActorC}, uint64(i+1), ctr
		if i > 0 {
			c.Deps = [][32]byte{prev}
		}
		c.Message = strings.Repeat("m", msgLen)
		for k := range ops {
			v, raw := Int(7)
			c.Ops = append(c.Ops, Op{MapKey: true, Key: fmt.Sprintf("k%d.%d", i, k), Action: amcheck.Put, Value: v, Raw: raw})
		}
		ctr += uint64(ops)
		var chunk []byte
		chunk, prev = Encode(c)
		out = append(out, chunk)
	}
	return out
}

// ID is the op ID of counter ctr by the change's actor index actor.
func ID(ctr, actor uint32) amcheck.OpID { return amcheck.OpID{Counter: ctr, Actor: actor} }

// Put is an op putting the integer 7 at key of the map obj, over preds.
func Put(obj amcheck.OpID, key string, preds ...amcheck.OpID) Op {
	v, raw := Int(7)
	return Op{Obj: obj, MapKey: true, Key: key, Action: amcheck.Put, Value: v, Raw: raw, Preds: preds}
}

// Paste returns one change by ActorA, as automerge makes a document
// created with n characters of text at the root's "text": the text
// object, then each character inserted after the one before.
func Paste(n int) []byte {
	ops := make([]Op, 0, n+1)
	ops = append(ops, Op{MapKey: true, Key: "text", Action: amcheck.MakeText})
	text := amcheck.OpID{Counter: 1}
	after := amcheck.OpID{}
	for i := range n {
		ops = append(ops, Insert(text, after, string(rune('a'+i%26))))
		after = amcheck.OpID{Counter: uint32(i + 2)}
	}
	chunk, _ := Encode(Change{Actors: [][]byte{ActorA}, Seq: 1, StartOp: 1, Ops: ops})
	return chunk
}
