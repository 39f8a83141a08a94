package amdoc

import (
	"bytes"
	"compress/flate"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/tandemhq/tandem/doc/amcheck"
)

// Reading a saved document back into its changes: what automerge does
// when it loads one. A document chunk holds every op of every change
// (deletions only as the successors of what they deleted) and each
// change's actor, sequence number, last op, time, message, dependencies
// and extra bytes; Load rebuilds each change from them as automerge
// rebuilds it, so that the chunks it returns are automerge's own, byte for
// byte, and their hashes the document's. The ops of a change are those of
// its actor with counters past its actor's change before and up to its
// last op, in counter order; each op's predecessors are the ops that name
// it as a successor, in the document's order; a deletion is an op named
// as a successor and not listed, in the object and at the key of what it
// deleted (automerge makes one when the key it is found at ends).
//
// Load is bounded before it holds: the columns are inflated only within
// LoadLimits.MaxBytes, which also bounds the changes it writes, counted
// before each is written; the ops and changes are counted from the
// columns, refused past the limits, and told to LoadLimits.BeforeOps
// before they are held.

// LoadLimits bound what Load holds.
type LoadLimits struct {
	// MaxBytes bounds the document's columns inflated plus the change
	// chunks written; required.
	MaxBytes int64
	// MaxOps bounds the ops, and apart the predecessors and dependencies;
	// at most (and by default) what Save reads, 2^25.
	MaxOps int
	// MaxChanges bounds the changes; at most (and by default) 2^25.
	MaxChanges int
	// BeforeOps, if set, is told what Load will hold besides the columns
	// it inflates and the bytes it writes (LoadOpBytes per op,
	// LoadSuccBytes per successor, LoadDepBytes per dependency and
	// LoadChangeBytes per change), once the columns have said how many
	// there are and before it holds anything for them; an error it
	// returns ends the load.
	BeforeOps func(bytes int64) error
}

// What Load holds, besides the inflated columns and the chunks it
// writes: per op (its record, its place in its change's order and a
// share of the predecessors); per successor an op names (its place among
// those pending, the map that finds them, the deletion it may make and
// its place among the predecessors); per dependency; and per change.
const (
	LoadOpBytes     = 96
	LoadSuccBytes   = 144
	LoadDepBytes    = 8
	LoadChangeBytes = 160
)

// ErrNotDocument is returned by Load for bytes that are not one document
// chunk.
var ErrNotDocument = errors.New("amdoc: not a document chunk")

// ErrLoadLimit is returned by Load for a document past its limits.
var ErrLoadLimit = errors.New("amdoc: the document is past the load's limits")

// Load returns the changes of a document chunk (all of doc), each a
// change chunk as automerge rebuilds it when it loads the document, in
// the document's order (each after the changes it depends on). They are
// slices of one buffer. A document that does not read, whose changes do
// not rebuild, or whose rebuilt changes' heads are not the heads it
// states is refused. A panic in reading it (a fault of Load's own on
// bytes a peer crafted) is returned as ErrNotDocument: it must not take
// the node down with every document it serves.
func Load(doc []byte, lim LoadLimits) (changes [][]byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			changes, err = nil, fmt.Errorf("%w: reading it failed: %v", ErrNotDocument, p)
		}
	}()
	if lim.MaxOps <= 0 || lim.MaxOps > maxOps {
		lim.MaxOps = maxOps
	}
	if lim.MaxChanges <= 0 || lim.MaxChanges > maxOps {
		lim.MaxChanges = maxOps
	}
	l := loader{lim: lim, budget: lim.MaxBytes}
	if err := l.header(doc); err != nil {
		return nil, err
	}
	if err := l.readChanges(); err != nil {
		return nil, err
	}
	if err := l.readOps(); err != nil {
		return nil, err
	}
	return l.write()
}

// loader is one Load's state.
type loader struct {
	lim    LoadLimits
	budget int64 // bytes left to inflate and write

	actors [][]byte
	heads  [][32]byte
	chCols map[uint32][]byte
	opCols map[uint32][]byte

	chs      []ldChange
	byActor  [][]int32 // each actor's changes, in sequence order
	deps     []int32   // change i's are deps[chs[i].depAt:chs[i+1].depAt]
	ops      []ldOp
	preds    []id // op k's are preds[ops[k].predAt:ops[k+1].predAt]
	keyCol   []byte
	markCol  []byte
	valueCol []byte
}

type ldChange struct {
	actor   uint32
	seq     uint64
	maxOp   uint64
	time    int64
	message []byte
	extra   []byte
	depAt   int32
	opAt    int32 // its ops are order[opAt:opAt+nops]
	nops    int32
}

// ldOp is an op of the document, or a deletion made from a successor.
type ldOp struct {
	id, obj, elem id
	keyAt, keyLen uint32 // a map op's key in loader.keyCol
	markAt        uint32 // 1 + a mark's name's place in loader.markCol
	markLen       uint32
	valAt, valLen uint32
	predAt        uint32
	change        int32
	action        amcheck.Action
	vtype         amcheck.ValueType
	flags         uint8
}

const ldMapKey = 1 << 7 // besides flagInsert and flagExpand

func (l *loader) header(doc []byte) error {
	if len(doc) < 10 || !bytes.Equal(doc[:4], []byte{0x85, 0x6f, 0x4a, 0x83}) || doc[8] != 0 {
		return ErrNotDocument
	}
	size, k := binary.Uvarint(doc[9:])
	if k <= 0 || size != uint64(len(doc)-9-k) {
		return fmt.Errorf("%w: its length is not that of the bytes", ErrNotDocument)
	}
	if sum := sha256.Sum256(doc[8:]); !bytes.Equal(sum[:4], doc[4:8]) {
		return fmt.Errorf("%w: its checksum is wrong", ErrNotDocument)
	}
	c := cursor{b: doc[9+k:]}
	na := c.uvarint()
	if na > uint64(len(c.b)) {
		return fmt.Errorf("%w: %d actors", ErrNotDocument, na)
	}
	for range na {
		a := c.take(c.uvarint())
		if c.bad || len(a) == 0 {
			return fmt.Errorf("%w: an actor does not read", ErrNotDocument)
		}
		if n := len(l.actors); n > 0 && bytes.Compare(l.actors[n-1], a) >= 0 {
			return fmt.Errorf("%w: its actors are not in order", ErrNotDocument)
		}
		l.actors = append(l.actors, a)
	}
	nh := c.uvarint()
	if nh > uint64(len(c.b))/32 {
		return fmt.Errorf("%w: %d heads", ErrNotDocument, nh)
	}
	for range nh {
		l.heads = append(l.heads, [32]byte(c.take(32)))
	}
	readMeta := func() []colMeta {
		n := c.uvarint()
		if n > uint64(len(c.b)) {
			c.bad = true
			return nil
		}
		var ms []colMeta
		for range n {
			s, size := c.uvarint(), c.uvarint()
			if s > 1<<31 {
				c.bad = true
			}
			ms = append(ms, colMeta{uint32(s), size})
		}
		return ms
	}
	chMeta, opMeta := readMeta(), readMeta()
	if c.bad {
		return fmt.Errorf("%w: its columns do not read", ErrNotDocument)
	}
	var err error
	if l.chCols, err = l.columns(&c, chMeta, changeColumn); err != nil {
		return err
	}
	if l.opCols, err = l.columns(&c, opMeta, opColumn); err != nil {
		return err
	}
	return nil // what follows (the heads' indices) is not needed
}

// colMeta is a column's spec and length, as a chunk lists them.
type colMeta struct {
	spec uint32
	n    uint64
}

// columns reads the data of the columns meta lists, inflated, by spec
// without the deflate bit; known says which a document may hold.
func (l *loader) columns(c *cursor, meta []colMeta, known func(uint32) bool) (map[uint32][]byte, error) {
	out := make(map[uint32][]byte, len(meta))
	last := int64(-1)
	for _, m := range meta {
		data := c.take(m.n)
		if c.bad {
			return nil, fmt.Errorf("%w: a column passes its end", ErrNotDocument)
		}
		s := m.spec &^ 8
		if int64(s) <= last || !known(s) {
			return nil, fmt.Errorf("%w: column %#x", ErrNotDocument, m.spec)
		}
		last = int64(s)
		if m.spec&8 != 0 {
			var err error
			if data, err = l.inflate(data); err != nil {
				return nil, err
			}
		}
		out[s] = data
	}
	return out, nil
}

// inflate inflates a column within the budget.
func (l *loader) inflate(b []byte) ([]byte, error) {
	r := flate.NewReader(bytes.NewReader(b))
	defer r.Close()
	var buf bytes.Buffer
	n, err := io.Copy(&buf, io.LimitReader(r, l.budget+1))
	if err != nil {
		return nil, fmt.Errorf("%w: a column does not inflate: %v", ErrNotDocument, err)
	}
	if n > l.budget {
		return nil, fmt.Errorf("%w: its columns inflate past %d bytes", ErrLoadLimit, l.lim.MaxBytes)
	}
	l.budget -= n
	return buf.Bytes(), nil
}

// Columns of a document's changes and ops (spec without the deflate bit).
func changeColumn(s uint32) bool {
	switch s {
	case specChActor, specChSeq, specChMaxOp, specChTime, specChMessage, specChDepsNum,
		specChDepsIndex, specChExtraMeta, specChExtraRaw:
		return true
	}
	return false
}

func opColumn(s uint32) bool {
	switch s {
	case specObjActor, specObjCtr, specKeyActor, specKeyCtr, specKeyStr, specIDActor, specIDCtr,
		specInsert, specAction, specValMeta, specValRaw, specSuccNum, specSuccActor, specSuccCtr,
		specExpand, specMarkName:
		return true
	}
	return false
}

func (l *loader) reader(cols map[uint32][]byte, s uint32, typ uint32) rleReader {
	return rleReader{b: cols[s], typ: typ}
}

// readChanges reads the change columns.
func (l *loader) readChanges() error {
	n := rowsOf(l.chCols[specChActor])
	if n > uint64(l.lim.MaxChanges) {
		return fmt.Errorf("%w: %d changes, over %d", ErrLoadLimit, n, l.lim.MaxChanges)
	}
	ops := rowsOf(l.opCols[specAction])
	if ops > uint64(l.lim.MaxOps) {
		return fmt.Errorf("%w: %d ops, over %d", ErrLoadLimit, ops, l.lim.MaxOps)
	}
	// What the count columns say is to come, each bounded as the ops
	// are, before anything is held for it: a few bytes of a run-length
	// column can say millions.
	succs, deps := sumOf(l.opCols[specSuccNum]), sumOf(l.chCols[specChDepsNum])
	if succs > uint64(l.lim.MaxOps) {
		return fmt.Errorf("%w: %d successors, over %d", ErrLoadLimit, succs, l.lim.MaxOps)
	}
	if deps > uint64(l.lim.MaxOps) {
		return fmt.Errorf("%w: %d dependencies, over %d", ErrLoadLimit, deps, l.lim.MaxOps)
	}
	if l.lim.BeforeOps != nil {
		held := int64(ops)*LoadOpBytes + int64(succs)*LoadSuccBytes + int64(deps)*LoadDepBytes + int64(n)*LoadChangeBytes
		if err := l.lim.BeforeOps(held); err != nil {
			return err
		}
	}
	actor := l.reader(l.chCols, specChActor, typeUint)
	seq := l.reader(l.chCols, specChSeq, typeDelta)
	maxOp := l.reader(l.chCols, specChMaxOp, typeDelta)
	time := l.reader(l.chCols, specChTime, typeDelta)
	msg := l.reader(l.chCols, specChMessage, typeString)
	depsNum := l.reader(l.chCols, specChDepsNum, typeUint)
	depsIndex := l.reader(l.chCols, specChDepsIndex, typeDelta)
	extraMeta := l.reader(l.chCols, specChExtraMeta, typeUint)
	extra := l.chCols[specChExtraRaw]
	l.chs = make([]ldChange, 0, n)
	l.byActor = make([][]int32, len(l.actors))
	for i := range int32(n) {
		a, null := actor.next()
		if null || a >= uint64(len(l.actors)) {
			return fmt.Errorf("%w: change %d: no actor", ErrNotDocument, i)
		}
		c := ldChange{actor: uint32(a), depAt: int32(len(l.deps))}
		var sNull, mNull bool
		c.seq, sNull = seq.next()
		c.maxOp, mNull = maxOp.next()
		t, _ := time.next()
		c.time = int64(t)
		if _, null := msg.next(); !null {
			c.message = msg.str
		}
		if sNull || mNull || c.maxOp >= 1<<32 {
			return fmt.Errorf("%w: change %d: no sequence number or last op", ErrNotDocument, i)
		}
		mine := l.byActor[a]
		if uint64(len(mine))+1 != c.seq {
			return fmt.Errorf("%w: change %d: sequence number %d after %d", ErrNotDocument, i, c.seq, len(mine))
		}
		if len(mine) > 0 && c.maxOp < l.chs[mine[len(mine)-1]].maxOp {
			return fmt.Errorf("%w: change %d: its last op comes before its actor's last", ErrNotDocument, i)
		}
		nd, _ := depsNum.next()
		if nd > uint64(max(l.lim.MaxOps-len(l.deps), 0)) {
			return fmt.Errorf("%w: over %d dependencies", ErrLoadLimit, l.lim.MaxOps)
		}
		for range nd {
			d, null := depsIndex.next()
			if null || d >= uint64(i) {
				return fmt.Errorf("%w: change %d depends on one not before it", ErrNotDocument, i)
			}
			l.deps = append(l.deps, int32(d))
		}
		m, _ := extraMeta.next()
		if m&0xf != uint64(amcheck.ValueBytes) && m != 0 || m>>4 > uint64(len(extra)) {
			return fmt.Errorf("%w: change %d: its extra bytes do not read", ErrNotDocument, i)
		}
		c.extra, extra = extra[:m>>4], extra[m>>4:]
		l.byActor[a] = append(mine, i)
		l.chs = append(l.chs, c)
	}
	for _, r := range []*rleReader{&actor, &seq, &maxOp, &time, &msg, &depsNum, &depsIndex, &extraMeta} {
		if r.bad {
			return fmt.Errorf("%w: a change column does not read", ErrNotDocument)
		}
	}
	l.chs = append(l.chs, ldChange{depAt: int32(len(l.deps))}) // the end
	return nil
}

// readOps reads the op columns, makes the deletions and finds each op's
// change.
func (l *loader) readOps() error {
	cols := l.opCols
	objA, objC := l.reader(cols, specObjActor, typeUint), l.reader(cols, specObjCtr, typeUint)
	keyA, keyC := l.reader(cols, specKeyActor, typeUint), l.reader(cols, specKeyCtr, typeDelta)
	keyS := l.reader(cols, specKeyStr, typeString)
	idA, idC := l.reader(cols, specIDActor, typeUint), l.reader(cols, specIDCtr, typeDelta)
	act, vmeta := l.reader(cols, specAction, typeUint), l.reader(cols, specValMeta, typeUint)
	succN, succA := l.reader(cols, specSuccNum, typeUint), l.reader(cols, specSuccActor, typeUint)
	succC := l.reader(cols, specSuccCtr, typeDelta)
	mark := l.reader(cols, specMarkName, typeString)
	insert, expand := boolReader{b: cols[specInsert]}, boolReader{b: cols[specExpand]}
	l.keyCol, l.markCol, l.valueCol = cols[specKeyStr], cols[specMarkName], cols[specValRaw]
	n := int(rowsOf(cols[specAction]))
	l.ops = make([]ldOp, 0, n+1) // and the end; deletions grow it
	// opID reads an op ID from its actor and counter columns' values:
	// an actor of the document and a counter from 1 to 2^32-1.
	opID := func(a uint64, aNull bool, c uint64, cNull bool) (id, bool) {
		ok := !aNull && a < uint64(len(l.actors)) && !cNull && c != 0 && c < 1<<32
		return id{ctr: uint32(c), actor: uint32(a)}, ok
	}
	// Successors met and not yet listed, in the current key's group:
	// each successor's predecessors, in the document's order.
	type pending struct {
		pred id
		next int32
	}
	var pend []pending
	firstOf := map[id][2]int32{} // a successor → its first and last in pend
	var group ldOp               // the current group's object and key
	inGroup := false
	flush := func() error {
		if !inGroup || len(firstOf) == 0 {
			clear(firstOf)
			pend = pend[:0]
			return nil
		}
		for s := range firstOf { // in any order: the changes sort their ops
			if len(l.ops) >= l.lim.MaxOps {
				return fmt.Errorf("%w: over %d ops", ErrLoadLimit, l.lim.MaxOps)
			}
			d := ldOp{id: s, obj: group.obj, elem: group.elem, keyAt: group.keyAt, keyLen: group.keyLen,
				flags: group.flags & ldMapKey, action: amcheck.Delete, predAt: uint32(len(l.preds))}
			for k := firstOf[s][0]; k >= 0; k = pend[k].next {
				l.preds = append(l.preds, pend[k].pred)
			}
			l.ops = append(l.ops, d)
		}
		clear(firstOf)
		pend = pend[:0]
		return nil
	}
	valAt := uint64(0)
	for i := 0; i < n; i++ {
		o := ldOp{}
		a, null := act.next()
		if null || a > 0xff {
			return fmt.Errorf("%w: op %d: no action", ErrNotDocument, i)
		}
		o.action = amcheck.Action(a)
		ia, iaNull := idA.next()
		ic, icNull := idC.next()
		var ok bool
		if o.id, ok = opID(ia, iaNull, ic, icNull); !ok {
			return fmt.Errorf("%w: op %d: no ID", ErrNotDocument, i)
		}
		oa, oaNull := objA.next()
		oc, ocNull := objC.next()
		if !oaNull || !ocNull {
			if o.obj, ok = opID(oa, oaNull, oc, ocNull); !ok {
				return fmt.Errorf("%w: op %d: its object does not read", ErrNotDocument, i)
			}
		}
		ka, kaNull := keyA.next()
		kc, kcNull := keyC.next()
		_, ksNull := keyS.next()
		switch {
		case !ksNull:
			o.flags |= ldMapKey
			o.keyAt, o.keyLen = uint32(cap(l.keyCol)-cap(keyS.str)), uint32(len(keyS.str))
		case !kaNull:
			if o.elem, ok = opID(ka, false, kc, kcNull); !ok {
				return fmt.Errorf("%w: op %d: its element does not read", ErrNotDocument, i)
			}
		case kcNull || kc != 0:
			return fmt.Errorf("%w: op %d: no key", ErrNotDocument, i)
		}
		if insert.next() {
			o.flags |= flagInsert
		}
		if expand.next() {
			o.flags |= flagExpand
		}
		m, _ := vmeta.next()
		o.vtype, o.valAt, o.valLen = amcheck.ValueType(m&0xf), uint32(valAt), uint32(m>>4)
		if valAt += m >> 4; valAt > uint64(len(l.valueCol)) {
			return fmt.Errorf("%w: op %d: its value passes the values", ErrNotDocument, i)
		}
		if _, null := mark.next(); !null {
			o.markAt, o.markLen = uint32(cap(l.markCol)-cap(mark.str))+1, uint32(len(mark.str))
		}
		// Its group: the object, and the key, or the element (an
		// insertion's own ID).
		g := o
		if o.flags&flagInsert != 0 {
			g.elem = o.id
		}
		if !inGroup || !sameGroup(l, &g, &group) {
			if err := flush(); err != nil {
				return err
			}
			group, inGroup = g, true
		}
		o.predAt = uint32(len(l.preds))
		if f, ok := firstOf[o.id]; ok {
			for k := f[0]; k >= 0; k = pend[k].next {
				l.preds = append(l.preds, pend[k].pred)
			}
			delete(firstOf, o.id)
		}
		ns, _ := succN.next()
		if ns > uint64(max(l.lim.MaxOps-len(l.preds)-len(pend), 0)) {
			return fmt.Errorf("%w: over %d successors", ErrLoadLimit, l.lim.MaxOps)
		}
		for range ns {
			sa, saNull := succA.next()
			sc, scNull := succC.next()
			s, ok := opID(sa, saNull, sc, scNull)
			if !ok {
				return fmt.Errorf("%w: op %d: a successor does not read", ErrNotDocument, i)
			}
			pend = append(pend, pending{pred: o.id, next: -1})
			k := int32(len(pend) - 1)
			if f, ok := firstOf[s]; ok {
				pend[f[1]].next = k
				firstOf[s] = [2]int32{f[0], k}
			} else {
				firstOf[s] = [2]int32{k, k}
			}
		}
		if len(l.ops) >= l.lim.MaxOps {
			return fmt.Errorf("%w: over %d ops", ErrLoadLimit, l.lim.MaxOps)
		}
		l.ops = append(l.ops, o)
	}
	if err := flush(); err != nil {
		return err
	}
	for _, r := range []*rleReader{&objA, &objC, &keyA, &keyC, &keyS, &idA, &idC, &act, &vmeta, &succN, &succA, &succC, &mark} {
		if r.bad {
			return fmt.Errorf("%w: an op column does not read", ErrNotDocument)
		}
	}
	if insert.bad || expand.bad {
		return fmt.Errorf("%w: an op column does not read", ErrNotDocument)
	}
	l.ops = append(l.ops, ldOp{predAt: uint32(len(l.preds))}) // the end
	return nil
}

// sameGroup reports whether two ops are in one object at one key or
// element.
func sameGroup(l *loader, a, b *ldOp) bool {
	if a.obj != b.obj || a.flags&ldMapKey != b.flags&ldMapKey {
		return false
	}
	if a.flags&ldMapKey != 0 {
		return bytes.Equal(l.keyCol[a.keyAt:a.keyAt+a.keyLen], l.keyCol[b.keyAt:b.keyAt+b.keyLen])
	}
	return a.elem == b.elem
}

// write sorts the ops into their changes and writes each change.
func (l *loader) write() ([][]byte, error) {
	nch := len(l.chs) - 1
	ops := l.ops[:len(l.ops)-1]
	// Each op's change: its actor's first whose last op is at or past it.
	count := make([]int32, nch+1)
	for k := range ops {
		o := &ops[k]
		mine := l.byActor[o.id.actor]
		j, _ := slices.BinarySearchFunc(mine, uint64(o.id.ctr), func(c int32, ctr uint64) int {
			if l.chs[c].maxOp < ctr {
				return -1
			}
			return 1
		})
		if j == len(mine) {
			return nil, fmt.Errorf("%w: op %d@%x is in no change", ErrNotDocument, o.id.ctr, l.actors[o.id.actor])
		}
		o.change = mine[j]
		count[o.change+1]++
	}
	for i := 1; i <= nch; i++ {
		count[i] += count[i-1]
	}
	order := make([]int32, len(ops))
	fill := slices.Clone(count[:nch])
	for k := range ops {
		c := ops[k].change
		order[fill[c]] = int32(k)
		fill[c]++
	}
	fill = nil
	for i := range nch {
		c := &l.chs[i]
		c.opAt, c.nops = count[i], count[i+1]-count[i]
		mine := order[c.opAt : c.opAt+c.nops]
		slices.SortFunc(mine, func(a, b int32) int { return int(int64(ops[a].id.ctr) - int64(ops[b].id.ctr)) })
		for k, x := range mine {
			if uint64(ops[x].id.ctr) != c.maxOp-uint64(len(mine)-1-k) {
				return nil, fmt.Errorf("%w: change %d: its ops are not its last op's run", ErrNotDocument, i)
			}
		}
	}

	hashes := make([][32]byte, nch)
	at := make([]int, nch+1)
	var out []byte
	var deps [][32]byte
	for i := range nch {
		c := &l.chs[i]
		mine := order[c.opAt : c.opAt+c.nops]
		// Bound what the chunk may take before it is written.
		est := int64(64 + 32*(l.chs[i+1].depAt-c.depAt) + int32(len(l.actors[c.actor])) + int32(len(c.message)+len(c.extra)))
		for _, x := range mine {
			o := &ops[x]
			est += 96 + int64(o.valLen) + int64(o.markLen) + 24*int64(l.ops[x+1].predAt-o.predAt)
			if o.flags&ldMapKey != 0 {
				est += int64(o.keyLen)
			}
		}
		if est > l.budget {
			return nil, fmt.Errorf("%w: its changes pass %d bytes", ErrLoadLimit, l.lim.MaxBytes)
		}
		deps = deps[:0]
		for _, d := range l.deps[c.depAt:l.chs[i+1].depAt] {
			deps = append(deps, hashes[d])
		}
		start := uint64(c.maxOp + 1)
		if len(mine) > 0 {
			start = uint64(ops[mine[0]].id.ctr)
		}
		h := changeHead{deps: deps, seq: c.seq, startOp: start, time: c.time, message: c.message, extra: c.extra}
		before := len(out)
		out, hashes[i] = appendChange(out, l.actors, c.actor, &h, len(mine), func(k int, e *encOp) {
			o := &ops[mine[k]]
			*e = encOp{obj: o.obj, elem: o.elem, mapKey: o.flags&ldMapKey != 0, insert: o.flags&flagInsert != 0,
				expand: o.flags&flagExpand != 0, action: o.action, vtype: o.vtype,
				value: l.valueCol[o.valAt : o.valAt+o.valLen], preds: l.preds[o.predAt:l.ops[mine[k]+1].predAt]}
			if e.mapKey {
				e.key = l.keyCol[o.keyAt : o.keyAt+o.keyLen]
			}
			if o.markAt > 0 {
				e.hasMark, e.mark = true, l.markCol[o.markAt-1:o.markAt-1+o.markLen]
			}
		})
		l.budget -= int64(len(out) - before)
		at[i+1] = len(out)
	}
	// The heads the rebuilt changes make must be those the document states.
	depended := make([]bool, nch)
	for _, d := range l.deps {
		depended[d] = true
	}
	var heads [][32]byte
	for i, d := range depended {
		if !d {
			heads = append(heads, hashes[i])
		}
	}
	sortHashes := func(hs [][32]byte) {
		slices.SortFunc(hs, func(a, b [32]byte) int { return bytes.Compare(a[:], b[:]) })
	}
	want := slices.Clone(l.heads)
	sortHashes(heads)
	sortHashes(want)
	if !slices.Equal(heads, want) {
		return nil, fmt.Errorf("%w: its changes rebuilt do not reach the heads it states", ErrNotDocument)
	}
	chunks := make([][]byte, nch)
	for i := range chunks {
		chunks[i] = out[at[i]:at[i+1]:at[i+1]]
	}
	return chunks, nil
}
