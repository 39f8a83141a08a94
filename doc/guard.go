package doc

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"sync/atomic"

	"github.com/tandemhq/tandem/doc/amcheck"
	"github.com/tandemhq/tandem/doc/amsync"
)

// The guard admits a client's changes into a room's log. Every byte it
// admits is relayed to stock clients, which apply it with automerge's
// core: a change that core cannot apply (an op naming what does not
// exist, a map key put into a list) would break the document for every
// client that loads it, and a few bytes can expand into gigabytes. So
// before a change enters the log the guard
//   - reads the message in Go (amsync.Decode): structure, and bloom
//     filters past the bounds;
//   - reads every change in it (package amcheck): checksum, columns (as
//     automerge's encoder writes them, or a saved document would not load
//     again), and its size after run-length expansion, against the limits;
//   - checks each change against the document as automerge will apply it:
//     an actor's changes must come with contiguous sequence numbers and
//     rising op counters, and every op may name only what the document
//     holds in the change's past (refcheck.go); changes that wait for a
//     dependency wait here (waiting.go).
// What the guard refuses leaves the document untouched.

// Limits bound what clients may add to a document, in bytes: what a
// change costs is what it expands to (amcheck.Change.Expanded: its
// columns inflated, its keys and values as a client materializes them)
// plus opBytes for each of its operations, what the guard's index may
// hold for it. A paste of a megabyte of text is one change of about 20
// MB by that count. Zero fields take the defaults.
type Limits struct {
	// ChangeBytes is the most one change may cost; default 64 MiB.
	ChangeBytes int64
	// DocumentBytes is the most a document's changes may cost together;
	// default 256 MiB.
	DocumentBytes int64
	// DocumentChanges is the most changes a document may hold; default
	// 1,000,000, at most 2³¹-1 (the log and the index count them in 31
	// bits). Each
	// costs the log and the index some bytes whatever it holds: a change
	// with no operations is not free.
	DocumentChanges int64
	// WaitingBytes bounds the cost of the changes that wait for a
	// dependency, summed over the hub's documents; default 64 MiB.
	WaitingBytes int64
	// CheckBytes bounds the memory the changes being checked hold while
	// their message is checked (their operations listed, opListBytes
	// each), summed over the hub's documents; default what a change of
	// ChangeBytes lists, so that one such change can always be checked
	// (384 MiB by default). A message that needs more alone is refused
	// (ErrLimit); one that would pass it beside others' is asked to come
	// back (ErrBusy).
	CheckBytes int64
}

// opListBytes is what the guard holds per operation while a message is
// checked: its amcheck.Op and a share of its key. Predecessors cost 8
// bytes each besides. The log keeps far less of a change once taken
// (opBytes).
const opListBytes = 96

// opBytes is what each operation of a change counts against the limits
// besides its bytes: an operation the index cannot fold into a run of
// its neighbours costs it about this much (BenchmarkAdmitTypedChange).
// So the byte limits bound operations too, however few bytes a
// run-length encoding packs them into.
const opBytes = 16

// cost is what a change counts against the limits.
func cost(c *amcheck.Change) int64 { return c.Expanded + opBytes*int64(c.Ops) }

// readChange reads a change from a sync message against ChangeBytes
// (amcheck.ErrTooLarge past it). The reader is told the byte limit and as
// many operations as the limit pays for, so that no change is expanded
// past what it may cost before it is refused.
func (l Limits) readChange(b []byte, listOps bool) (amcheck.Change, error) {
	return l.readChangeListed(b, listOps, nil)
}

// readChangeListed is readChange with the list of operations charged
// before it is made (amcheck.Limits.BeforeList).
func (l Limits) readChangeListed(b []byte, listOps bool, charge func(ops, preds int) error) (amcheck.Change, error) {
	c, err := amcheck.ParseSyncChange(b, amcheck.Limits{MaxOps: int(l.ChangeBytes / opBytes),
		MaxExpandedBytes: l.ChangeBytes, Canonical: true, ListOps: listOps, BeforeList: charge})
	switch {
	case errors.Is(err, amcheck.ErrTooLarge):
		err = fmt.Errorf("%w: the change costs over %d bytes, the limit (%v)", amcheck.ErrTooLarge, l.ChangeBytes, err)
	case err == nil && cost(&c) > l.ChangeBytes:
		err = fmt.Errorf("%w: the change costs %d bytes (%d expanded, %d operations), over %d bytes, the limit",
			amcheck.ErrTooLarge, cost(&c), c.Expanded, c.Ops, l.ChangeBytes)
	}
	return c, err
}

func (l *Limits) setDefaults() {
	if l.ChangeBytes <= 0 {
		l.ChangeBytes = 64 << 20
	}
	if l.DocumentBytes <= 0 {
		l.DocumentBytes = 256 << 20
	}
	if l.DocumentChanges <= 0 {
		l.DocumentChanges = 1_000_000
	}
	l.DocumentChanges = min(l.DocumentChanges, math.MaxInt32)
	if l.WaitingBytes <= 0 {
		l.WaitingBytes = 64 << 20
	}
	if l.CheckBytes <= 0 {
		l.CheckBytes = l.ChangeBytes / opBytes * opListBytes
	}
}

// actorClock is what the guard knows of one actor's changes in a document.
type actorClock struct {
	seq   uint64 // sequence number of its last applied change
	maxOp uint64 // highest op counter of its changes
}

// ledger is the guard's account of a room's document: every actor's clock,
// the operations it holds, what its ops may name (refcheck.go), and the
// changes it keeps back until their dependencies arrive. The room's
// mutex guards it.
type ledger struct {
	actors  map[string]actorClock
	ops     int64 // operations taken
	changes int64 // changes taken
	bytes   int64 // what the changes taken cost (cost)
	// queued are the changes that wait for a dependency (waiting.go):
	// fromPeers of them sent by local peers, the rest stored ones.
	queued    map[[32]byte]queuedChange
	fromPeers int
	// queuedBytes counts what the queued changes cost: they are charged
	// to the document when they arrive.
	queuedBytes int64
	// waiting, when set, sums the queued bytes of every document of the
	// hub (Limits.WaitingBytes).
	waiting *atomic.Int64
	// checking, when set, sums what the changes being checked hold, over
	// the hub's documents (Limits.CheckBytes); checked is this ledger's
	// part of it, given back by releaseChecked once the message is done.
	checking *atomic.Int64
	checked  int64
	refs     *refIndex
	// log is the room's: the index keeps changes' hashes and
	// dependencies there (nil: one of its own).
	log *amsync.Log
}

func (l *ledger) index() *refIndex {
	if l.refs == nil {
		l.refs = newBaseIndex(l.log)
	}
	return l.refs
}

// record adds changes the log took (in the order it took them) to the
// ledger.
func (l *ledger) record(changes []change) {
	if l.actors == nil {
		l.actors = make(map[string]actorClock)
	}
	for _, c := range changes {
		a := hex.EncodeToString(c.Actor)
		ac := l.actors[a]
		ac.seq = max(ac.seq, c.Seq)
		if c.Ops > 0 {
			ac.maxOp = max(ac.maxOp, c.StartOp+uint64(c.Ops)-1)
		}
		l.actors[a] = ac
		l.ops += int64(c.Ops)
		l.changes++
		l.bytes += cost(&c.Change)
		l.index().add(&c.Change)
		l.unqueue(c.Hash)
	}
}

// maxHeads bounds a document's heads: its branches that no change has
// merged yet. A stock client merges every head it knows in its next
// change, so heads are a few, and a few thousand only when as many peers
// edit apart at once; but one message of independent changes (50 bytes
// each) could make a hundred thousand, and then every change the log
// takes, every peer's message naming them and every client's load pays
// for each of them. A peer's message may name as many (amsync.MaxHeads).
const maxHeads = amsync.MaxHeads

// headsAfter counts the log's heads once it has taken apply.
func (l *ledger) headsAfter(apply []change) int {
	if len(apply) == 0 {
		return 0
	}
	heads := make(map[[32]byte]struct{})
	if l.log != nil {
		for _, h := range l.log.Heads() {
			heads[h] = struct{}{}
		}
	}
	for i := range apply {
		for _, d := range apply[i].Deps {
			delete(heads, d)
		}
		heads[apply[i].Hash] = struct{}{}
	}
	return len(heads)
}

// admission is what the guard makes of a sync message's changes.
type admission struct {
	// apply are the changes the log is to take, in an order it can take
	// them in: the message's, and the queued ones they make ready.
	apply []change
	// held are the message's changes that wait for a dependency.
	held []queuedChange
	// dropped are queued changes that became ready and were refused:
	// they leave the queue, costing their sender (gone by now, as a rule)
	// and nobody else.
	dropped []droppedChange
}

type droppedChange struct {
	hash [32]byte
	err  error
}

// admit checks a sync message's changes against the limits and the ledger
// without changing either: it replays, in Go, the order in which automerge
// will apply them, checking each change's sequence, op counters and
// references (refcheck.go) as it goes, and refuses the message if any of
// its changes fails. Changes whose dependencies are missing wait in the
// guard's queue (hold); they count against the limits when they arrive.
// known reports the changes the document has.
func (l *ledger) admit(lim Limits, changes [][]byte, known func(hash []byte) bool) (*admission, error) {
	if len(changes) == 0 {
		return &admission{}, nil
	}
	l.releaseChecked() // the message before is done with its lists
	parsed := make([]queuedChange, 0, len(changes))
	bytes := int64(0)
	for i, b := range changes {
		c, err := lim.readChangeListed(b, true, l.chargeList(lim))
		switch {
		case errors.Is(err, ErrBusy) || errors.Is(err, ErrLimit):
			return nil, fmt.Errorf("change %d: %w", i, err)
		case errors.Is(err, amcheck.ErrTooLarge):
			return nil, fmt.Errorf("%w: change %d: %v", ErrLimit, i, err)
		case err != nil:
			return nil, fmt.Errorf("%w: change %d: %v", ErrRefused, i, err)
		}
		if known(c.Hash[:]) {
			continue // automerge skips what it has
		}
		if _, ok := l.queued[c.Hash]; ok {
			continue
		}
		bytes += cost(&c)
		parsed = append(parsed, queuedChange{change: change{Change: c, raw: b}})
	}
	// Changes already queued were counted when they came.
	switch {
	case l.bytes+l.queuedBytes+bytes > lim.DocumentBytes:
		return nil, fmt.Errorf("%w: the document holds %d bytes of changes; %d more would pass its limit of %d",
			ErrLimit, l.bytes+l.queuedBytes, bytes, lim.DocumentBytes)
	case l.changes+int64(l.fromPeers+len(parsed)) > lim.DocumentChanges:
		return nil, fmt.Errorf("%w: the document holds %d changes; %d more would pass its limit of %d",
			ErrLimit, l.changes+int64(l.fromPeers), len(parsed), lim.DocumentChanges)
	}
	for i := range parsed {
		c := &parsed[i]
		if a := hex.EncodeToString(c.Actor); c.Seq <= l.actors[a].seq {
			return nil, fmt.Errorf("%w: actor %s already has a change %d", ErrRefused, a, c.Seq)
		}
	}
	ad, err := l.replay(lim, parsed, known)
	if err != nil {
		return nil, err
	}
	if n := l.headsAfter(ad.apply); n > maxHeads {
		return nil, fmt.Errorf("%w: the document would have %d heads (branches no change merges); the limit is %d", ErrLimit, n, maxHeads)
	}
	var heldBytes int64
	for _, c := range ad.held {
		heldBytes += cost(&c.Change)
	}
	if l.fromPeers+len(ad.held) > maxQueued {
		return nil, fmt.Errorf("%w: %d changes wait for changes the document lacks (limit %d)", ErrLimit, l.fromPeers+len(ad.held), maxQueued)
	}
	if heldBytes > 0 && l.waiting != nil && l.waiting.Load()+heldBytes > lim.WaitingBytes {
		return nil, fmt.Errorf("%w: it holds %d bytes of them; %d more would pass its limit of %d",
			ErrBusy, l.waiting.Load(), heldBytes, lim.WaitingBytes)
	}
	return ad, nil
}

// admitStored orders changes that come from the store or another node
// (stored already, and checked by the guard of the node that took them
// from a client) with the changes waiting in the queue: it is admit
// without the checks of those changes, whatever their number or size.
// Changes of peers that waited for them are checked as admit checks
// them, and dropped if they fail. What still lacks a dependency is
// returned in held, to wait in the same queue (queueHeld).
func (l *ledger) admitStored(lim Limits, cs []change, known func(hash []byte) bool) *admission {
	l.releaseChecked()
	fresh := make([]queuedChange, 0, len(cs))
	for _, c := range cs {
		if known(c.Hash[:]) {
			continue
		}
		if _, ok := l.queued[c.Hash]; ok {
			continue
		}
		c.stored = true
		fresh = append(fresh, queuedChange{change: c})
	}
	ad, err := l.replay(lim, fresh, known)
	if err != nil { // only a check of a fresh peer's change fails the replay, and there is none
		panic(fmt.Sprintf("doc: replaying stored changes failed: %v", err))
	}
	return ad
}

// replay replays, in Go, the order in which automerge will apply fresh
// and the changes waiting in the queue, each after what it depends on
// (inOrder), and checks each peer's change as it comes (sequence, op
// counters, references); a stored change (from the store or another node)
// is taken as it is. A fresh peer's change that fails refuses the whole
// replay; a queued one that fails is dropped. The ledger is not changed.
func (l *ledger) replay(lim Limits, fresh []queuedChange, known func(hash []byte) bool) (*admission, error) {
	ad := &admission{}
	// Peers' changes are checked against what the replay took before
	// them: a stored change taken before one is in the overlay. With
	// none to check, stored changes need no overlay, nor clocks.
	checks := l.fromPeers > 0
	for i := range fresh {
		checks = checks || !fresh[i].stored
	}
	have := make(map[[32]byte]bool)
	clocks := make(map[string]actorClock)
	clock := func(a string) actorClock {
		if c, ok := clocks[a]; ok {
			return c
		}
		return l.actors[a]
	}
	present := func(h [32]byte) bool { return have[h] || known(h[:]) }
	var refs *refIndex
	if checks {
		refs = newRefIndex(l.index())
	}
	take := func(c *queuedChange) error {
		if c.stored {
			have[c.Hash] = true
			ad.apply = append(ad.apply, c.change)
			if !checks {
				return nil
			}
			a := hex.EncodeToString(c.Actor)
			ac := clock(a)
			ac.seq = max(ac.seq, c.Seq)
			if c.Ops > 0 {
				ac.maxOp = max(ac.maxOp, c.StartOp+uint64(c.Ops)-1)
			}
			clocks[a] = ac
			refs.add(&c.Change)
			return nil
		}
		var err error
		if c.change, err = c.withOps(lim, l.chargeList(lim)); err != nil {
			return err
		}
		a := hex.EncodeToString(c.Actor)
		ac := clock(a)
		if c.Seq != ac.seq+1 {
			return fmt.Errorf("%w: actor %s has changes up to %d; this one is %d", ErrRefused, a, ac.seq, c.Seq)
		}
		if c.StartOp <= ac.maxOp {
			return fmt.Errorf("%w: actor %s reuses op counter %d", ErrRefused, a, c.StartOp)
		}
		if err := refs.check(&c.Change); err != nil {
			return err
		}
		ac.seq = c.Seq
		if c.Ops > 0 {
			ac.maxOp = c.StartOp + uint64(c.Ops) - 1
		}
		clocks[a] = ac
		have[c.Hash] = true
		ad.apply = append(ad.apply, c.change)
		return nil
	}
	all := make([]*queuedChange, 0, len(fresh)+len(l.queued))
	for i := range fresh {
		all = append(all, &fresh[i])
	}
	for h := range l.queued {
		c := l.queued[h]
		all = append(all, &c)
	}
	lacking, err := inOrder(len(all), func(i int) *amcheck.Change { return &all[i].Change }, present,
		func(i int) (bool, error) {
			c := all[i]
			err := take(c)
			switch {
			case err == nil:
				return true, nil
			case i < len(fresh):
				return false, err
			default:
				ad.dropped = append(ad.dropped, droppedChange{c.Hash, err})
				return false, nil
			}
		})
	if err != nil {
		return nil, err
	}
	for _, i := range lacking {
		if i < len(fresh) {
			ad.held = append(ad.held, *all[i])
		}
	}
	return ad, nil
}

// chargeList returns what charges a change's list of operations to the
// message being checked, before the list is made (Limits.CheckBytes).
func (l *ledger) chargeList(lim Limits) func(ops, preds int) error {
	return func(ops, preds int) error {
		n := int64(ops)*opListBytes + int64(preds)*8
		if l.checked+n > lim.CheckBytes {
			return fmt.Errorf("%w: checking its changes would hold %d bytes of operations, over %d, what one message may", ErrLimit, l.checked+n, lim.CheckBytes)
		}
		if l.checking != nil {
			if l.checking.Add(n) > lim.CheckBytes {
				l.checking.Add(-n)
				return fmt.Errorf("%w: the node is checking as many operations as it may at once", ErrBusy)
			}
		}
		l.checked += n
		return nil
	}
}

// releaseChecked gives back what the message checked held: its changes'
// operation lists are let go.
func (l *ledger) releaseChecked() {
	if l.checking != nil {
		l.checking.Add(-l.checked)
	}
	l.checked = 0
}
