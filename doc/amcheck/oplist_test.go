package amcheck

import (
	"math"
	"reflect"
	"testing"
)

// listOpsByRow is the plain reading of a change's ops that listOps does a
// column at a time: every column walked side by side, row by row. The
// tests hold listOps to it.
func (o *opsCheck) listOpsByRow() ([]Op, error) {
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
			return nil, malformed("op %d: %d predecessors", i, n)
		}
		start := len(preds)
		for range n {
			pa, pc := predA.row(), predC.row()
			prdAbs += pc.d
			preds = append(preds, OpID{Counter: uint32(prdAbs), Actor: uint32(pa.u)})
		}
		if err != nil {
			return nil, err
		}
		if len(preds) > start {
			op.Preds = preds[start:len(preds):len(preds)]
		}
	}
	return ops, nil
}

// Every list of ops the tests and fuzz targets make is checked against
// the plain reading.
func init() {
	listed = func(o *opsCheck) {
		want, err := o.listOpsByRow()
		if err != nil {
			panic("listOps listed a change that listOpsByRow refuses: " + err.Error())
		}
		if !reflect.DeepEqual(o.c.OpList, want) {
			panic("listOps and listOpsByRow list different ops")
		}
	}
}

func TestOpsListedAColumnAtATimeAreTheRowsOps(t *testing.T) {
	var preds int
	for _, seed := range seedChanges(t) {
		c, _, err := ParseChange(seed, Limits{ListOps: true})
		if err != nil {
			continue
		}
		// listed compared them; this counts that there was something to compare.
		for _, op := range c.OpList {
			preds += len(op.Preds)
		}
	}
	if preds == 0 {
		t.Fatal("no seed had an op with predecessors")
	}
}
