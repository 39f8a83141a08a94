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
// It fills the list a column at a time, each stretch of rows with one
// value in one loop, over a block of rows that stays in the cache: a
// paste of a megabyte is a few such stretches per column, and walking
// the columns side by side, row by row, cost several times as much.
func (o *opsCheck) listOps() error {
	ops := make([]Op, o.rows)
	var (
		err    error // the first a column met; the columns were checked, so none is expected
		keyAbs int64
		valAt  uint64
	)
	// Each column sets its fields of rows [from, to), which hold one
	// value. The object's actor comes after its counter and says whether
	// there is one (the root has neither); an element's counter sums the
	// deltas of every row before it, and is named where there is a key
	// actor and no map key.
	fills := []struct {
		rows colRows
		set  func(from, to int, s seg)
	}{
		{rowsOf(o.col(cObjCtr), &err), func(from, to int, s seg) {
			if !s.null {
				for k := from; k < to; k++ {
					ops[k].Obj.Counter = uint32(s.u)
				}
			}
		}},
		{rowsOf(o.col(cObjActor), &err), func(from, to int, s seg) {
			for k := from; k < to; k++ {
				if s.null {
					ops[k].Obj = OpID{}
				} else {
					ops[k].Obj.Actor = uint32(s.u)
				}
			}
		}},
		{rowsOf(o.col(cKeyCtr), &err), func(from, to int, s seg) {
			for k := from; k < to; k++ {
				if !s.null {
					keyAbs += s.d
				}
				ops[k].Elem.Counter = uint32(keyAbs)
			}
		}},
		{rowsOf(o.col(cKeyActor), &err), func(from, to int, s seg) {
			for k := from; k < to; k++ {
				if s.null {
					ops[k].Elem = OpID{}
				} else {
					ops[k].Elem.Actor = uint32(s.u)
				}
			}
		}},
		{rowsOf(o.col(cKeyStr), &err), func(from, to int, s seg) {
			if s.null {
				return
			}
			key := string(s.s)
			for k := from; k < to; k++ {
				ops[k].MapKey, ops[k].Key, ops[k].Elem = true, key, OpID{}
			}
		}},
		{rowsOf(o.col(cInsert), &err), func(from, to int, s seg) {
			for k := from; k < to; k++ {
				ops[k].Insert = s.u == 1
			}
		}},
		{rowsOf(o.col(cAction), &err), func(from, to int, s seg) {
			for k := from; k < to; k++ {
				ops[k].Action = Action(s.u)
			}
		}},
		{rowsOf(o.col(cValMeta), &err), func(from, to int, s seg) {
			for k := from; k < to; k++ {
				ops[k].Value = ValueType(s.u & 0xf)
				ops[k].ValueAt, ops[k].ValueLen = uint32(valAt), uint32(s.u>>4)
				valAt += s.u >> 4
			}
		}},
		{rowsOf(o.col(cMarkName), &err), func(from, to int, s seg) {
			if s.null {
				return
			}
			name := string(s.s)
			for k := from; k < to; k++ {
				ops[k].MarkStart, ops[k].Key = true, name
			}
		}},
		{rowsOf(o.col(cExpand), &err), func(from, to int, s seg) {
			for k := from; k < to; k++ {
				ops[k].Expand = s.u == 1
			}
		}},
	}
	const block = 2048 // rows: 150 KB of ops
	for from := 0; from < len(ops) && err == nil; from += block {
		to := min(from+block, len(ops))
		for i := range fills {
			fills[i].rows.stretches(from, to, fills[i].set)
		}
	}
	if err == nil {
		err = o.listPreds(ops)
	}
	if err != nil {
		return err
	}
	o.c.OpList = ops
	o.c.Values = append([]byte(nil), o.data[cValRaw]...)
	return nil
}

// listPreds decodes each op's predecessors: the pred group says how many
// of the pred columns' rows are the op's.
func (o *opsCheck) listPreds(ops []Op) error {
	var (
		err    error // the first a column met
		pnum   = rowsOf(o.col(cPredNum), &err)
		predA  = rowsOf(o.col(cPredActor), &err)
		predC  = rowsOf(o.col(cPredCtr), &err)
		prdAbs int64
	)
	preds := make([]OpID, 0, min(o.preds, 1<<16))
	pnum.stretches(0, len(ops), func(from, to int, s seg) {
		switch {
		case err != nil || s.u == 0:
			return
		case s.u > math.MaxUint32:
			err = malformed("op %d: %d predecessors", from, s.u)
			return
		}
		for k := from; k < to && err == nil; k++ {
			start := len(preds)
			for range s.u {
				pa, pc := predA.row(), predC.row()
				prdAbs += pc.d
				preds = append(preds, OpID{Counter: uint32(prdAbs), Actor: uint32(pa.u)})
			}
			ops[k].Preds = preds[start:len(preds):len(preds)]
		}
	})
	return err
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

// stretches hands set the column's rows [from, to), the next rows it has
// not handed out, a stretch of rows with one value at a time. Past the
// first error it hands out nothing.
func (r *colRows) stretches(from, to int, set func(from, to int, s seg)) {
	for from < to && *r.err == nil {
		if r.left == 0 {
			r.row() // reads the next segment and hands out its first row
			if *r.err != nil {
				return
			}
			r.left++
		}
		n := to
		if r.left < uint64(to-from) {
			n = from + int(r.left)
		}
		set(from, n, r.cur)
		r.left -= uint64(n - from)
		from = n
	}
}
