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
	Key    string
	Elem   OpID
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
}

// listOps decodes every op of a change whose columns checkOps accepted.
func (o *opsCheck) listOps() error {
	n := o.rows
	ops := make([]Op, n)
	preds := make([]OpID, 0, min(o.preds, 1<<16))
	var (
		objA   = rowsOf(o.col(cObjActor))
		objC   = rowsOf(o.col(cObjCtr))
		keyA   = rowsOf(o.col(cKeyActor))
		keyC   = rowsOf(o.col(cKeyCtr))
		keyS   = rowsOf(o.col(cKeyStr))
		ins    = rowsOf(o.col(cInsert))
		act    = rowsOf(o.col(cAction))
		meta   = rowsOf(o.col(cValMeta))
		pnum   = rowsOf(o.col(cPredNum))
		predA  = rowsOf(o.col(cPredActor))
		predC  = rowsOf(o.col(cPredCtr))
		mark   = rowsOf(o.col(cMarkName))
		expand = rowsOf(o.col(cExpand))
		keyAbs int64
		prdAbs int64
	)
	for i := range ops {
		op := &ops[i]
		oa, err := objA.row()
		if err != nil {
			return err
		}
		oc, err := objC.row()
		if err != nil {
			return err
		}
		if !oa.null {
			op.Obj = OpID{Counter: uint32(oc.u), Actor: uint32(oa.u)}
		}
		ka, err := keyA.row()
		if err != nil {
			return err
		}
		kc, err := keyC.row()
		if err != nil {
			return err
		}
		if !kc.null {
			keyAbs += kc.d
		}
		ks, err := keyS.row()
		if err != nil {
			return err
		}
		switch {
		case !ks.null:
			op.MapKey, op.Key = true, string(ks.s)
		case !ka.null:
			op.Elem = OpID{Counter: uint32(keyAbs), Actor: uint32(ka.u)}
		}
		in, err := ins.row()
		if err != nil {
			return err
		}
		op.Insert = in.u == 1
		a, err := act.row()
		if err != nil {
			return err
		}
		op.Action = Action(a.u)
		m, err := meta.row()
		if err != nil {
			return err
		}
		op.Value = ValueType(m.u & 0xf)
		mk, err := mark.row()
		if err != nil {
			return err
		}
		op.MarkStart = !mk.null
		ex, err := expand.row()
		if err != nil {
			return err
		}
		op.Expand = ex.u == 1
		pn, err := pnum.row()
		if err != nil {
			return err
		}
		if pn.u > math.MaxUint32 {
			return malformed("op %d: %d predecessors", i, pn.u)
		}
		start := len(preds)
		for range pn.u {
			pa, err := predA.row()
			if err != nil {
				return err
			}
			pc, err := predC.row()
			if err != nil {
				return err
			}
			prdAbs += pc.d
			preds = append(preds, OpID{Counter: uint32(prdAbs), Actor: uint32(pa.u)})
		}
		if len(preds) > start {
			op.Preds = preds[start:len(preds):len(preds)]
		}
	}
	o.c.OpList = ops
	return nil
}

// colRows hands out a column's values row by row.
type colRows struct {
	it   colIter
	cur  seg
	left uint64
}

func rowsOf(it colIter) colRows { return colRows{it: it} }

func (r *colRows) row() (seg, error) {
	if r.left == 0 {
		s, ok, err := r.it.next()
		if err != nil {
			return seg{}, err
		}
		if !ok {
			// Row counts were checked before; this cannot happen.
			return seg{}, malformed("column %s ends early", r.it.name)
		}
		r.cur, r.left = s, s.n
	}
	r.left--
	return r.cur, nil
}
