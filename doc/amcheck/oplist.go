package amcheck

import "math"

// The operations of a change, one by one, for callers that check what each
// names against a document: ParseChange lists them in Change.OpList when
// Limits.ListOps is set, after every check above has passed (so the list
// is never longer than Limits.MaxOps).

// Action is an operation's type, in automerge's numbering.
type Action uint8

// The actions automerge knows.
const (
	MakeMap   Action = actMakeMap
	Put       Action = actPut
	MakeList  Action = actMakeList
	Delete    Action = actDelete
	MakeText  Action = actMakeText
	Increment Action = actInc
	MakeTable Action = actMakeTbl
	Mark      Action = actMark
)

// Makes reports whether the action makes an object.
func (a Action) Makes() bool { return isMake(uint64(a)) }

// ValueType is the type of an operation's value: the low four bits of its
// value metadata.
type ValueType uint8

// The value types.
const (
	ValueNull      ValueType = valNull
	ValueFalse     ValueType = valFalse
	ValueTrue      ValueType = valTrue
	ValueUint      ValueType = valUint
	ValueInt       ValueType = valInt
	ValueFloat     ValueType = valFloat
	ValueString    ValueType = valString
	ValueBytes     ValueType = valBytes
	ValueCounter   ValueType = valCounter
	ValueTimestamp ValueType = valTimestamp
)

// OpID names an operation by its counter and its actor, an index into
// Change.Actors (0 is the change's own actor).
type OpID struct {
	Counter uint32
	Actor   uint32
}

// Op is one operation of a change. Its own ID is the change's StartOp plus
// its index in Change.OpList, with actor 0.
type Op struct {
	// Obj is the object the op is in; Counter 0 is the root map.
	Obj OpID
	// MapKey reports an op addressing its object by Key; otherwise it
	// addresses the list or text element Elem (Counter 0: the head, for
	// an insert at the start).
	MapKey bool
	// Key is a map op's key, and a mark's start's name (MarkStart).
	Key  string
	Elem OpID
	// Insert reports an op that inserts a new element after Elem.
	Insert bool
	Action Action
	Value  ValueType
	// MarkStart reports an op with a mark name: for a Mark op, the start
	// of a mark; otherwise the op ends one.
	MarkStart bool
	// Expand is the op's mark expand flag.
	Expand bool
	// Preds are the ops this one overwrites, deletes or increments.
	Preds []OpID
	// ValueAt and ValueLen place the op's value in Change.Values.
	ValueAt, ValueLen uint32
}

// listOps decodes every op of a change whose columns checkOps accepted.
func (o *opsCheck) listOps() error {
	ops := make([]Op, o.rows)
	preds := make([]OpID, 0, min(o.preds, 1<<16))
	var (
		err    error // the first a column met; the columns were checked, so none is expected
		objA   = rowsOf(o.col(cObjActor), &err)
		objC   = rowsOf(o.col(cObjCtr), &err)
		keyA   = rowsOf(o.col(cKeyActor), &err)
		keyC   = rowsOf(o.col(cKeyCtr), &err)
		keyS   = rowsOf(o.col(cKeyStr), &err)
		ins    = rowsOf(o.col(cInsert), &err)
		act    = rowsOf(o.col(cAction), &err)
		meta   = rowsOf(o.col(cValMeta), &err)
		pnum   = rowsOf(o.col(cPredNum), &err)
		predA  = rowsOf(o.col(cPredActor), &err)
		predC  = rowsOf(o.col(cPredCtr), &err)
		mark   = rowsOf(o.col(cMarkName), &err)
		expand = rowsOf(o.col(cExpand), &err)
		keyAbs int64
		prdAbs int64
		valAt  uint64
	)
	for i := range ops {
		op := &ops[i]
		if oa, oc := objA.row(), objC.row(); !oa.null {
			op.Obj = OpID{Counter: uint32(oc.u), Actor: uint32(oa.u)}
		}
		ka, kc, ks := keyA.row(), keyC.row(), keyS.row()
		if !kc.null {
			keyAbs += kc.d
		}
		switch {
		case !ks.null:
			op.MapKey, op.Key = true, string(ks.s)
		case !ka.null:
			op.Elem = OpID{Counter: uint32(keyAbs), Actor: uint32(ka.u)}
		}
		op.Insert = ins.row().u == 1
		op.Action = Action(act.row().u)
		m := meta.row().u
		op.Value = ValueType(m & 0xf)
		op.ValueAt, op.ValueLen = uint32(valAt), uint32(m>>4)
		valAt += m >> 4
		if name := mark.row(); !name.null {
			op.MarkStart, op.Key = true, string(name.s)
		}
		op.Expand = expand.row().u == 1
		n := pnum.row().u
		if n > math.MaxUint32 {
			return malformed("op %d: %d predecessors", i, n)
		}
		start := len(preds)
		for range n {
			pa, pc := predA.row(), predC.row()
			prdAbs += pc.d
			preds = append(preds, OpID{Counter: uint32(prdAbs), Actor: uint32(pa.u)})
		}
		if err != nil {
			return err
		}
		if len(preds) > start {
			op.Preds = preds[start:len(preds):len(preds)]
		}
	}
	o.c.OpList = ops
	o.c.Values = append([]byte(nil), o.data[cValRaw]...)
	return nil
}

// colRows hands out a column's values row by row; the first error it
// meets is kept in *err, and a zero value handed out from then on.
type colRows struct {
	it   colIter
	cur  seg
	left uint64
	err  *error
}

func rowsOf(it colIter, err *error) colRows { return colRows{it: it, err: err} }

func (r *colRows) row() seg {
	if r.left == 0 {
		s, ok, err := r.it.next()
		switch {
		case err != nil:
			if *r.err == nil {
				*r.err = err
			}
			return seg{}
		case !ok:
			if *r.err == nil {
				*r.err = malformed("column %s ends early", r.it.name)
			}
			return seg{}
		}
		r.cur, r.left = s, s.n
	}
	r.left--
	return r.cur
}
