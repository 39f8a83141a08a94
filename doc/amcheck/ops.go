package amcheck

import (
	"math"
	"math/bits"
	"sort"
	"unicode/utf8"
)

// Column slots, in spec order.
const (
	cObjActor = iota
	cObjCtr
	cKeyActor
	cKeyCtr
	cKeyStr
	cInsert
	cAction
	cValMeta
	cValRaw
	cPredNum
	cPredActor
	cPredCtr
	cExpand
	cMarkName
	nCols
)

var slotSpecs = [nCols]uint32{
	specObjActor, specObjCtr, specKeyActor, specKeyCtr, specKeyStr,
	specInsert, specAction, specValMeta, specValRaw, specPredNum,
	specPredActor, specPredCtr, specExpand, specMarkName,
}

var slotKinds = [nCols]int{
	kindUint, kindUint, kindUint, kindDelta, kindStr,
	kindBool, kindUint, kindUint, -1, kindUint,
	kindUint, kindDelta, kindBool, kindStr,
}

func slotOf(spec uint32) int {
	for i, s := range slotSpecs {
		if s == spec {
			return i
		}
	}
	return -1
}

// Actions (automerge's OpType numbering).
const (
	actMakeMap  = 0
	actPut      = 1
	actMakeList = 2
	actDelete   = 3
	actMakeText = 4
	actInc      = 5
	actMakeTbl  = 6
	actMark     = 7
)

func isMake(a uint64) bool {
	return a == actMakeMap || a == actMakeList || a == actMakeText || a == actMakeTbl
}

// makeRun is a stretch of this change's rows that create objects of one
// type.
type makeRun struct {
	start, n uint64
	action   uint64
}

// opsCheck holds one change's columns while they are checked.
type opsCheck struct {
	c       *Change
	lim     Limits
	data    [nCols][]byte
	has     [nCols]bool // the spec is listed (even with length 0)
	actors  uint64      // 1 + other actors
	rows    uint64      // ops, from the action column
	preds   uint64      // predecessor references, from the pred group
	makes   []makeRun
	others  [][]byte        // actor IDs by index (in the input)
	refs    map[objKey]bool // objects of earlier changes the ops address: by map key?
	expBody int64           // expansion counted on top of the chunk itself
}

func (o *opsCheck) col(slot int) colIter {
	return newCol(columnNames[slotSpecs[slot]], slotKinds[slot], o.data[slot], len(o.data[slot]) > 0)
}

// checkOps checks the columns of a change: layout, encodings, row counts,
// values, and the per-op consistency automerge's decoder and its op import
// rely on.
func checkOps(c *Change, actors [][]byte, cols []colMeta, data []byte, lim Limits) error {
	o := &opsCheck{c: c, lim: lim, actors: uint64(len(actors)), others: actors}
	off := uint64(0)
	for _, cm := range cols {
		s := slotOf(cm.spec)
		o.has[s] = true
		o.data[s] = data[off : off+cm.length]
		off += cm.length
	}
	// Layout rules automerge's column layout parser enforces (or that it
	// needs to map the columns onto ops).
	if o.has[cValRaw] && !o.has[cValMeta] {
		return malformed("value raw column without value metadata column")
	}
	if (o.has[cPredActor] || o.has[cPredCtr]) && !o.has[cPredNum] {
		return malformed("pred columns without pred group column")
	}
	if o.has[cPredActor] != o.has[cPredCtr] {
		return malformed("pred group has one of its actor and counter columns, not both")
	}
	if (len(o.data[cObjActor]) > 0) != (len(o.data[cObjCtr]) > 0) {
		return malformed("obj actor and obj counter columns: one is empty, the other not")
	}

	if err := o.scanActions(); err != nil {
		return err
	}
	if err := o.scanColumns(); err != nil {
		return err
	}
	c.Ops = int(o.rows)
	c.Expanded = satAdd(c.Expanded, o.expBody)
	if lim.MaxExpandedBytes > 0 && c.Expanded > lim.MaxExpandedBytes {
		return tooLarge("change expands to %d bytes, MaxExpandedBytes is %d", c.Expanded, lim.MaxExpandedBytes)
	}
	if err := o.checkRows(); err != nil {
		return err
	}
	if lim.Canonical {
		if err := o.checkCanonical(); err != nil {
			return err
		}
	}
	if lim.ListOps {
		if lim.BeforeList != nil {
			if err := lim.BeforeList(int(o.rows), int(o.preds)); err != nil {
				return err
			}
		}
		if err := o.listOps(); err != nil {
			return err
		}
		if listed != nil {
			listed(o)
		}
	}
	return nil
}

// listed, when set (by the tests), is called with each change's columns
// once its ops are listed.
var listed func(o *opsCheck)

type objKey struct {
	actor   uint64
	counter uint64
}

// ref records that ops address object (actor, counter) of an earlier
// change with map keys or not, and refuses both kinds in one change
// (whether the kind is the object's is for the caller to check, against
// the document: Change.OpList).
func (o *opsCheck) ref(actor, counter uint64, mapKeys bool) error {
	k := objKey{actor, counter}
	if was, ok := o.refs[k]; ok {
		if was != mapKeys {
			return malformed("object %d@%x addressed both by map key and by list position", counter, o.others[actor])
		}
		return nil
	}
	if o.refs == nil {
		o.refs = make(map[objKey]bool)
	}
	o.refs[k] = mapKeys
	return nil
}

// scanActions reads the action column, which fixes the number of ops, and
// refuses a change over MaxOps before anything else is expanded.
func (o *opsCheck) scanActions() error {
	it := o.col(cAction)
	var rows uint64
	for it.present {
		s, ok, err := it.next()
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		if s.null {
			return it.errf("null action")
		}
		if s.u > actMark {
			return it.errf("unknown action %d", s.u)
		}
		if isMake(s.u) {
			if m := len(o.makes) - 1; m >= 0 && o.makes[m].action == s.u && o.makes[m].start+o.makes[m].n == rows {
				o.makes[m].n += s.n
			} else {
				o.makes = append(o.makes, makeRun{start: rows, n: s.n, action: s.u})
			}
		}
		rows += s.n
		if rows < s.n {
			rows = math.MaxUint64
		}
		if o.lim.MaxOps > 0 && rows > uint64(o.lim.MaxOps) {
			// Count the rest arithmetically for the message.
			for {
				s, ok, err := it.next()
				if err != nil || !ok {
					break
				}
				if rows+s.n < rows {
					rows = math.MaxUint64
					break
				}
				rows += s.n
			}
			return tooLarge("change has %d ops, MaxOps is %d", rows, o.lim.MaxOps)
		}
		if rows > maxCounter {
			return malformed("more than %d ops", uint64(maxCounter))
		}
	}
	if rows > 0 && o.c.StartOp+rows-1 > maxCounter {
		return malformed("ops %d to %d pass automerge's counter limit %d", o.c.StartOp, o.c.StartOp+rows-1, uint64(maxCounter))
	}
	o.rows = rows
	return nil
}

func wantRows(name string, got, want uint64) error {
	if got != want {
		return malformed("column %s has %d rows, want %d", name, got, want)
	}
	return nil
}

// deltaRun checks that the k values abs+d, abs+2d, ... abs+k*d all lie in
// [lo, hi] and returns the last. abs is in [0, maxCounter].
func deltaRun(abs, d int64, k uint64, lo, hi int64) (int64, bool) {
	if (d > 0 && abs > math.MaxInt64-d) || (d < 0 && abs < math.MinInt64-d) {
		return 0, false
	}
	first := abs + d
	if first < lo || first > hi {
		return 0, false
	}
	if k == 1 || d == 0 {
		return first, true
	}
	// first and abs in range, so |d| < 2^32.
	ad := uint64(d)
	if d < 0 {
		ad = uint64(-d)
	}
	h, l := bits.Mul64(k, ad)
	if h != 0 || l > 1<<34 {
		return 0, false
	}
	last := abs + int64(l)
	if d < 0 {
		last = abs - int64(l)
	}
	if last < lo || last > hi {
		return 0, false
	}
	return last, true
}

func (o *opsCheck) addExp(n int64) { o.expBody = satAdd(o.expBody, n) }

// scanCol reads one column (not action, not value metadata) on its own,
// checking its encoding and values, and returns its rows (saturating).
func (o *opsCheck) scanCol(slot int) (uint64, error) {
	it := o.col(slot)
	var rows uint64
	abs := int64(0) // delta columns: the running value
	for it.present {
		s, ok, err := it.next()
		if err != nil {
			return 0, err
		}
		if !ok {
			break
		}
		switch slot {
		case cObjActor, cKeyActor, cPredActor:
			if s.null {
				if slot == cPredActor {
					return 0, it.errf("null actor index")
				}
			} else if s.u >= o.actors {
				return 0, it.errf("actor index %d, change has %d actors", s.u, o.actors)
			}
		case cObjCtr:
			if !s.null && (s.u < 1 || s.u > maxCounter) {
				return 0, it.errf("object counter %d", s.u)
			}
		case cKeyCtr, cPredCtr:
			lo := int64(0)
			if slot == cPredCtr {
				lo = 1
				if s.null {
					return 0, it.errf("null counter")
				}
			}
			if !s.null {
				last, ok := deltaRun(abs, s.d, s.n, lo, maxCounter)
				if !ok {
					return 0, it.errf("counter run (from %d by %d, %d rows) leaves [%d, %d]", abs, s.d, s.n, lo, uint64(maxCounter))
				}
				abs = last
			}
		case cKeyStr, cMarkName:
			if !s.null {
				o.addExp(satMul(s.n, uint64(len(s.s))))
			}
		case cPredNum:
			if s.null {
				return 0, it.errf("null predecessor count")
			}
			if p := satMul(s.n, s.u); p == math.MaxInt64 || o.preds+uint64(p) < o.preds {
				o.preds = math.MaxUint64
			} else {
				o.preds += uint64(p)
			}
		}
		if rows+s.n < rows {
			rows = math.MaxUint64
		} else {
			rows += s.n
		}
	}
	return rows, nil
}

// scanColumns checks every column other than action on its own: its
// encoding, its values and its row count.
func (o *opsCheck) scanColumns() error {
	n := o.rows
	// Columns that must have a row for every op, and columns that may be
	// empty (all null or all false) but otherwise must.
	for _, slot := range [...]int{cObjActor, cObjCtr, cKeyActor, cKeyCtr, cKeyStr, cInsert} {
		rows, err := o.scanCol(slot)
		if err != nil {
			return err
		}
		if slot == cInsert || len(o.data[slot]) > 0 {
			if err := wantRows(columnNames[slotSpecs[slot]], rows, n); err != nil {
				return err
			}
		}
	}
	if err := o.scanValues(); err != nil {
		return err
	}
	rows, err := o.scanCol(cPredNum)
	if err != nil {
		return err
	}
	if err := wantRows(columnNames[specPredNum], rows, n); err != nil {
		return err
	}
	if o.preds > 0 || o.has[cPredActor] {
		for _, slot := range [...]int{cPredActor, cPredCtr} {
			rows, err := o.scanCol(slot)
			if err != nil {
				return err
			}
			if rows != o.preds {
				return malformed("column %s has %d rows, pred group adds up to %d", columnNames[slotSpecs[slot]], rows, o.preds)
			}
		}
	}
	o.addExp(satMul(o.preds, 8))
	for _, slot := range [...]int{cExpand, cMarkName} {
		rows, err := o.scanCol(slot)
		if err != nil {
			return err
		}
		if len(o.data[slot]) > 0 {
			if err := wantRows(columnNames[slotSpecs[slot]], rows, n); err != nil {
				return err
			}
		}
	}
	return nil
}

// Value types, the low four bits of a value metadata entry; the rest is
// the value's length in the raw column.
const (
	valNull      = 0
	valFalse     = 1
	valTrue      = 2
	valUint      = 3
	valInt       = 4
	valFloat     = 5
	valString    = 6
	valBytes     = 7
	valCounter   = 8
	valTimestamp = 9
)

// scanValues checks the value metadata column against the raw value
// column, value by value where a value has bytes to check.
func (o *opsCheck) scanValues() error {
	it := o.col(cValMeta)
	raw := o.data[cValRaw]
	off := uint64(0)
	var rows uint64
	for it.present {
		s, ok, err := it.next()
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		if s.null {
			return it.errf("null value metadata")
		}
		typ, length := s.u&0xf, s.u>>4
		switch typ {
		case valNull, valFalse, valTrue:
			if length != 0 {
				return it.errf("value type %d with length %d", typ, length)
			}
		case valUint, valInt, valCounter, valTimestamp:
			if length == 0 || length > 10 {
				return it.errf("integer value of %d bytes", length)
			}
		case valFloat:
			if length != 8 {
				return it.errf("float value of %d bytes", length)
			}
		}
		need := satMul(s.n, length)
		if uint64(need) > uint64(len(raw))-off {
			return malformed("value metadata needs %d more bytes at value raw byte %d, %d left", need, off, uint64(len(raw))-off)
		}
		if length > 0 {
			switch typ {
			case valUint, valInt, valCounter, valTimestamp, valString:
				for i := uint64(0); i < s.n; i++ {
					v := raw[off+i*length : off+(i+1)*length]
					if err := checkValue(typ, v); err != nil {
						return malformed("value raw at byte %d: %v", off+i*length, err)
					}
				}
			}
		}
		off += uint64(need)
		o.addExp(need)
		if rows+s.n < rows {
			rows = math.MaxUint64
		} else {
			rows += s.n
		}
	}
	if err := wantRows(it.name, rows, o.rows); err != nil {
		return err
	}
	if off != uint64(len(raw)) {
		return malformed("value raw column has %d bytes, value metadata accounts for %d", len(raw), off)
	}
	return nil
}

func checkValue(typ uint64, v []byte) error {
	var n int
	var err error
	switch typ {
	case valString:
		if !utf8.Valid(v) {
			return errNotUTF8
		}
		return nil
	case valUint:
		_, n, err = strictUvarint(v)
	default:
		_, n, err = strictVarint(v)
	}
	if err != nil {
		return err
	}
	if n != len(v) {
		return errExtraBytes
	}
	return nil
}

// checkRows walks the per-op columns together, one stretch of rows with
// the same values at a time, and checks what automerge needs of each op.
func (o *opsCheck) checkRows() error {
	if o.rows == 0 {
		return nil
	}
	slots := [...]int{cObjActor, cObjCtr, cKeyActor, cKeyCtr, cKeyStr, cInsert, cAction, cValMeta}
	var its [len(slots)]colIter
	var cur [len(slots)]seg
	var left [len(slots)]uint64
	for i, s := range slots {
		its[i] = o.col(s)
	}
	const (
		iObjActor = iota
		iObjCtr
		iKeyActor
		iKeyCtr
		iKeyStr
		iInsert
		iAction
		iValMeta
	)
	keyAbs := int64(0)
	for row := uint64(0); row < o.rows; {
		k := uint64(math.MaxUint64)
		for i := range its {
			if left[i] == 0 {
				s, ok, err := its[i].next()
				if err != nil {
					return err
				}
				if !ok {
					// Row counts were checked; this cannot happen.
					return malformed("column %s ends at row %d", its[i].name, row)
				}
				cur[i], left[i] = s, s.n
			}
			k = min(k, left[i])
		}
		k = min(k, o.rows-row)
		if err := o.checkStretch(row, k, &cur, keyAbs); err != nil {
			return err
		}
		if kc := cur[iKeyCtr]; !kc.null {
			keyAbs += kc.d * int64(k)
		}
		for i := range left {
			left[i] -= k
		}
		row += k
	}
	return nil
}

type keyKind int

const (
	keyProp keyKind = iota
	keyHead
	keyElem
)

// checkStretch checks k rows from row on, over which every per-op column
// holds one value (the key counter one delta). keyAbs is the key counter
// before the stretch.
func (o *opsCheck) checkStretch(row, k uint64, cur *[8]seg, keyAbs int64) error {
	oa, oc, ka, kc, ks, ins, act, vm := cur[0], cur[1], cur[2], cur[3], cur[4], cur[5], cur[6], cur[7]
	at := func(format string, args ...any) error {
		return malformed("op %d: "+format, append([]any{row}, args...)...)
	}
	var kind keyKind
	switch {
	case !ks.null:
		if !ka.null || !kc.null {
			return at("key has both a map key and a list element")
		}
		kind = keyProp
	case ka.null:
		if kc.null {
			return at("op has no key")
		}
		// A list head: counter 0.
		if !(kc.d == 0 && keyAbs == 0) && !(k == 1 && keyAbs+kc.d == 0) {
			return at("list element key without actor")
		}
		kind = keyHead
	default:
		if kc.null {
			return at("list element key without counter")
		}
		if _, ok := deltaRun(keyAbs, kc.d, k, 1, maxCounter); !ok {
			return at("list element key with counter 0")
		}
		kind = keyElem
	}
	insert := ins.u == 1
	switch {
	case insert && kind == keyProp:
		return at("insert with a map key")
	case !insert && kind == keyHead:
		return at("list head key without insert")
	case insert && (act.u == actDelete || act.u == actInc):
		return at("insert with action %d", act.u)
	}
	if act.u == actInc {
		if t := vm.u & 0xf; t != valUint && t != valInt {
			return at("increment by a value of type %d", t)
		}
	}
	if oa.null != oc.null {
		return at("obj actor and counter disagree on null")
	}
	if oa.null {
		if kind != keyProp {
			return at("list position in the root map")
		}
		return nil
	}
	// An object this change makes: its type fixes the kind of key. (An
	// op of this change that makes no object, or makes it later, names
	// an object automerge does not have, and it skips the op.)
	if oa.u == 0 && oc.u >= o.c.StartOp && oc.u-o.c.StartOp < o.rows {
		r := oc.u - o.c.StartOp
		if r < row+k {
			if a, ok := o.madeAt(r); ok {
				isMap := a == actMakeMap || a == actMakeTbl
				if isMap != (kind == keyProp) {
					return at("key kind does not match object %d@0 made by op %d (action %d)", oc.u, r, a)
				}
			}
		}
		return nil
	}
	return o.ref(oa.u, oc.u, kind == keyProp)
}

// madeAt returns the action of row r if it makes an object.
func (o *opsCheck) madeAt(r uint64) (uint64, bool) {
	i := sort.Search(len(o.makes), func(i int) bool { return o.makes[i].start+o.makes[i].n > r })
	if i < len(o.makes) && o.makes[i].start <= r {
		return o.makes[i].action, true
	}
	return 0, false
}
