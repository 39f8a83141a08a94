package guard

import (
	"encoding/hex"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/tandemhq/tandem/doc/amcheck"
	"github.com/tandemhq/tandem/doc/amsync"
)

// actorClock is what the guard knows of one actor's changes in a document.
type actorClock struct {
	seq   uint64 // sequence number of its last applied change
	maxOp uint64 // highest op counter of its changes
}

// Ledger is the guard's account of a room's document: every actor's clock,
// the operations it holds, what its ops may name (refcheck.go), and the
// changes it keeps back until their dependencies arrive. The room's
// locks guard it: Admit, which reads it without changing it (but for
// what the message holds, Release's to give back), may run beside the
// methods that only read it, not beside one that changes it.
type Ledger struct {
	actors  map[string]actorClock
	ops     int64  // operations taken
	maxOp   uint64 // the highest op counter taken
	changes int64  // changes taken
	bytes   int64  // what the changes taken cost (cost)
	// queued are the changes that wait for a dependency (waiting.go):
	// fromPeers of them sent by local peers, the rest stored ones.
	queued    map[[32]byte]Change
	fromPeers int
	// queuedBytes counts what the queued changes cost: they are charged
	// to the document when they arrive.
	queuedBytes int64
	// waiting, when set, sums the queued bytes of every document of the
	// hub (Limits.WaitingBytes).
	waiting *atomic.Int64
	// checking, when set, sums what the changes being checked hold, over
	// the hub's documents (Limits.CheckBytes); checked is this ledger's
	// part of it, given back by Release once the message is done.
	checking *atomic.Int64
	checked  int64
	refs     *refIndex
	// log is the room's: the index keeps changes' hashes and
	// dependencies there (nil: one of its own).
	log *amsync.Log
}

// NewLedger returns the ledger of a document whose changes log holds (nil:
// a log of its own), counting the bytes of its waiting changes in waiting
// and of the changes it checks in checking, each summed over the node's
// documents, if not nil.
func NewLedger(log *amsync.Log, waiting, checking *atomic.Int64) *Ledger {
	return &Ledger{log: log, waiting: waiting, checking: checking}
}

// Actors counts the actors of the changes taken.
func (l *Ledger) Actors() int { return len(l.actors) }

// Ops counts the operations of the changes taken.
func (l *Ledger) Ops() int64 { return l.ops }

// MaxOp returns the highest op counter of the changes taken.
func (l *Ledger) MaxOp() uint64 { return l.maxOp }

func (l *Ledger) index() *refIndex {
	if l.refs == nil {
		l.refs = newBaseIndex(l.log)
	}
	return l.refs
}

// Record adds changes the log took (in the order it took them) to the
// ledger.
func (l *Ledger) Record(changes []Change) {
	if l.actors == nil {
		l.actors = make(map[string]actorClock)
	}
	for _, c := range changes {
		a := hex.EncodeToString(c.Actor)
		ac := l.actors[a]
		ac.seq = max(ac.seq, c.Seq)
		if c.Ops > 0 {
			ac.maxOp = max(ac.maxOp, c.StartOp+uint64(c.Ops)-1)
			l.maxOp = max(l.maxOp, ac.maxOp)
		}
		l.actors[a] = ac
		l.ops += int64(c.Ops)
		l.changes++
		l.bytes += Cost(&c.Change)
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
func (l *Ledger) headsAfter(apply []Change) int {
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

// Admission is what the guard makes of a sync message's changes.
type Admission struct {
	// Apply are the changes the log is to take, in an order it can take
	// them in: the message's, and the queued ones they make ready.
	Apply []Change
	// wait are the message's changes that wait for a dependency.
	wait []Change
	// Dropped are queued changes that became ready and were refused:
	// they leave the queue, costing their sender (gone by now, as a rule)
	// and nobody else.
	Dropped []Dropped
}

// Dropped is a queued change refused once it was ready.
type Dropped struct {
	Hash [32]byte
	Err  error
}

// Admit checks a sync message's changes against the limits and the ledger
// without changing either: it replays, in Go, the order in which automerge
// will apply them, checking each change's sequence, op counters and
// references (refcheck.go) as it goes, and refuses the message if any of
// its changes fails. Changes whose dependencies are missing wait in the
// guard's queue (hold); they count against the limits when they arrive.
// known reports the changes the document has.
func (l *Ledger) Admit(lim Limits, changes [][]byte, known func(hash []byte) bool) (*Admission, error) {
	if len(changes) == 0 {
		return &Admission{}, nil
	}
	l.Release() // the message before is done with its lists
	parsed := make([]Change, 0, len(changes))
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
		bytes += Cost(&c)
		parsed = append(parsed, Change{Change: c, Raw: b})
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
	ad, err := l.replay(lim, parsed, known, false)
	if err != nil {
		return nil, err
	}
	if n := l.headsAfter(ad.Apply); n > maxHeads {
		return nil, fmt.Errorf("%w: the document would have %d heads (branches no change merges); the limit is %d", ErrLimit, n, maxHeads)
	}
	var heldBytes int64
	for _, c := range ad.wait {
		heldBytes += Cost(&c.Change)
	}
	if l.fromPeers+len(ad.wait) > maxQueued {
		return nil, fmt.Errorf("%w: %d changes wait for changes the document lacks (limit %d)", ErrLimit, l.fromPeers+len(ad.wait), maxQueued)
	}
	if heldBytes > 0 && l.waiting != nil && l.waiting.Load()+heldBytes > lim.WaitingBytes {
		return nil, fmt.Errorf("%w: it holds %d bytes of them; %d more would pass its limit of %d",
			ErrBusy, l.waiting.Load(), heldBytes, lim.WaitingBytes)
	}
	return ad, nil
}

// AdmitStored orders changes that come from the store or another node
// (stored already, and checked by the guard of the node that took them
// from a client) with the changes waiting in the queue: it is admit
// without the checks of those changes, whatever their number or size.
// Changes of peers that waited for them are checked as admit checks
// them, and dropped if they fail. What still lacks a dependency is
// returned in wait, to wait in the same queue (Queue).
//
// A stored change of which a peer's copy waits takes that copy's place.
// It takes cs for its own: the changes are marked stored in place, and
// those the document has or the queue holds are left out by moving the
// others down (a document's load hands over every change it holds, and
// is not copied).
func (l *Ledger) AdmitStored(lim Limits, cs []Change, known func(hash []byte) bool) *Admission {
	l.Release()
	fresh := cs[:0]
	for i := range cs {
		c := &cs[i]
		if known(c.Hash[:]) {
			continue
		}
		if q, ok := l.queued[c.Hash]; ok {
			if q.Stored {
				continue
			}
			// A peer's copy waits: the stored one takes its place, so that
			// the peer's leaving, or its copy failing its check, does not
			// lose it, nor is it written again as the peer's.
			l.unqueue(c.Hash)
		}
		c.Stored = true
		fresh = append(fresh, *c)
	}
	ad, err := l.replay(lim, fresh, known, true)
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
// stored says that fresh are stored changes: only then are the stored
// changes that wait tried again.
func (l *Ledger) replay(lim Limits, fresh []Change, known func(hash []byte) bool, stored bool) (*Admission, error) {
	ad := &Admission{}
	// Taken as they came, fresh's first taken changes are Apply itself,
	// not a copy (a document's load); past the first change taken out of
	// that order, Apply is a list of its own.
	taken, apart := 0, false
	admit := func(c *Change) {
		if !apart && taken < len(fresh) && c == &fresh[taken] {
			taken++
			return
		}
		if !apart {
			apart = true
			ad.Apply = append(make([]Change, 0, len(fresh)+len(l.queued)), fresh[:taken]...)
		}
		ad.Apply = append(ad.Apply, *c)
	}
	// Peers' changes are checked against what the replay took before
	// them: a stored change taken before one is in the overlay. With
	// none to check, stored changes need no overlay, nor clocks.
	checks := l.fromPeers > 0
	for i := range fresh {
		checks = checks || !fresh[i].Stored
	}
	have := make(map[[32]byte]bool, len(fresh)+len(l.queued))
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
	take := func(c *Change) error {
		if c.Stored {
			if have[c.Hash] {
				return nil // the same change twice (a load of two snapshots made at once)
			}
			// Two nodes may each take a different change of one actor's
			// sequence number (one actor's changes sent to both at once);
			// the store then holds both, and automerge loads no document
			// that does. What comes second is left out here, on every
			// node and at every load: the document stays whole.
			a := hex.EncodeToString(c.Actor)
			ac := clock(a)
			if c.Seq <= ac.seq {
				return fmt.Errorf("%w: actor %s already has a change %d", ErrSeqTaken, a, c.Seq)
			}
			have[c.Hash] = true
			admit(c)
			ac.seq = c.Seq
			if !checks {
				clocks[a] = ac
				return nil
			}
			if c.Ops > 0 {
				ac.maxOp = max(ac.maxOp, c.StartOp+uint64(c.Ops)-1)
			}
			clocks[a] = ac
			refs.add(&c.Change)
			return nil
		}
		var err error
		if *c, err = c.withOps(lim, l.chargeList(lim)); err != nil {
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
		admit(c)
		return nil
	}
	all := make([]*Change, 0, len(fresh)+len(l.queued))
	for i := range fresh {
		all = append(all, &fresh[i])
	}
	for h := range l.queued {
		c := l.queued[h]
		if c.Stored && !stored {
			// Stored changes that wait are tried again when stored
			// changes come (AdmitStored), not with every peer's message:
			// up to MaxStoredWaiting of them would be walked per
			// keystroke.
			continue
		}
		all = append(all, &c)
	}
	lacking, err := inOrder(len(all), func(i int) *amcheck.Change { return &all[i].Change }, present,
		func(i int) (bool, error) {
			c := all[i]
			err := take(c)
			switch {
			case err == nil:
				return true, nil
			case errors.Is(err, ErrSeqTaken):
				ad.Dropped = append(ad.Dropped, Dropped{Hash: c.Hash, Err: err})
				return false, nil
			case i < len(fresh):
				return false, err
			default:
				ad.Dropped = append(ad.Dropped, Dropped{Hash: c.Hash, Err: err})
				return false, nil
			}
		})
	if err != nil {
		return nil, err
	}
	if !apart {
		ad.Apply = fresh[:taken:taken]
	}
	for _, i := range lacking {
		if i < len(fresh) {
			ad.wait = append(ad.wait, *all[i])
		}
	}
	return ad, nil
}

// chargeList returns what charges a change's list of operations to the
// message being checked, before the list is made (Limits.CheckBytes).
func (l *Ledger) chargeList(lim Limits) func(ops, preds int) error {
	return func(ops, preds int) error {
		return l.charge(lim, int64(ops)*OpListBytes+int64(preds)*8, "checking its changes")
	}
}

// charge charges n bytes held while the message is checked (what doing
// says), to the message and the node (Limits.CheckBytes).
func (l *Ledger) charge(lim Limits, n int64, doing string) error {
	if l.checked+n > lim.CheckBytes {
		return fmt.Errorf("%w: %s would hold %d bytes, over %d, what one message may", ErrLimit, doing, l.checked+n, lim.CheckBytes)
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

// Release gives back what the message checked held: its changes'
// operation lists are let go.
func (l *Ledger) Release() {
	if l.checking != nil {
		l.checking.Add(-l.checked)
	}
	l.checked = 0
}

// Headroom is what a message's changes may still cost in the document:
// its limit less what its changes and those that wait cost. A whole
// document a peer sends is read into its changes within it (their bytes
// never pass their cost).
func (l *Ledger) Headroom(lim Limits) int64 {
	return max(lim.DocumentBytes-l.bytes-l.queuedBytes, 0)
}

// ChargeRead charges n bytes, what reading a message's changes out of a
// whole document holds while it runs, to the message being checked and
// the node (Limits.CheckBytes), as the lists of operations are charged,
// before it is held; Release, or the next Admit, gives it back.
func (l *Ledger) ChargeRead(lim Limits, n int64) error {
	return l.charge(lim, n, "reading a document into its changes")
}
