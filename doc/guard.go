package doc

import (
	"encoding/hex"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/tandemhq/tandem/doc/amcheck"
)

// The guard stands between a client's sync message and automerge. The
// automerge core Tandem links (automerge-go, automerge-rs 0.5 built with
// panic=abort) trusts its input in places: a Rust panic inside the cgo call
// aborts the whole process, and a few bytes can expand into gigabytes.
// So before a message reaches automerge the guard
//   - reads it in Go (parseSyncMessage): structure, and bloom filters that
//     automerge would divide by zero with or allocate gigabytes for;
//   - reads every change in it (package amcheck): checksum, columns (as
//     automerge's encoder writes them, or a saved document would not load
//     again), and its size after run-length expansion, against the limits;
//   - checks each change against the document as automerge will apply it:
//     an actor's changes must come with contiguous sequence numbers and
//     rising op counters (automerge indexes its per-actor history by
//     sequence number, and a gap aborts it when it next generates a sync
//     message), and every op may name only what the document holds in the
//     change's past (refcheck.go); changes that wait for a dependency wait
//     here (waiting.go);
//   - and, when a Sandbox is configured, has a supervised worker process
//     apply the message to its copy of the document first (sandbox.go), so
//     that a fault the checks above do not know costs that worker, not
//     the node.
// What the guard refuses leaves the document untouched.

// Limits bound what clients may add to a document, checked before a change
// is applied. Zero fields take the defaults.
type Limits struct {
	// ChangeOps is the most operations one change may hold, counted after
	// run-length expansion; default 100,000 (a 100 KB paste).
	ChangeOps int
	// MessageOps is the most operations one sync message may add; default
	// 200,000.
	MessageOps int
	// DocumentOps is the most operations a document may hold; default
	// 1,000,000. automerge keeps some hundreds of bytes in memory per
	// operation.
	DocumentOps int64
	// ChangeBytes is the most bytes one change may expand to (inflated
	// columns, and its strings and values as automerge holds them);
	// default 64 MiB.
	ChangeBytes int64
	// DocumentBytes is the most bytes a document's changes may expand to
	// together (counted as for ChangeBytes); default 256 MiB.
	DocumentBytes int64
	// DocumentChanges is the most changes a document may hold; default
	// 1,000,000. Each costs automerge some hundreds of bytes, whatever it
	// holds: a change with no operations is not free.
	DocumentChanges int64
	// WaitingBytes bounds the changes that wait for a dependency, summed
	// over the hub's documents (counted as for ChangeBytes); default
	// 64 MiB.
	WaitingBytes int64
}

func (l *Limits) setDefaults() {
	if l.ChangeOps <= 0 {
		l.ChangeOps = 100_000
	}
	if l.MessageOps <= 0 {
		l.MessageOps = 200_000
	}
	if l.DocumentOps <= 0 {
		l.DocumentOps = 1_000_000
	}
	if l.ChangeBytes <= 0 {
		l.ChangeBytes = 64 << 20
	}
	if l.DocumentBytes <= 0 {
		l.DocumentBytes = 256 << 20
	}
	if l.DocumentChanges <= 0 {
		l.DocumentChanges = 1_000_000
	}
	if l.WaitingBytes <= 0 {
		l.WaitingBytes = 64 << 20
	}
}

// actorClock is what the guard knows of one actor's changes in a document.
type actorClock struct {
	seq   uint64 // sequence number of its last applied change
	maxOp uint64 // highest op counter of its changes
}

// ledger is the guard's account of a room's document: every actor's clock,
// the operations it holds, what its ops may name (refcheck.go), and the
// changes automerge keeps back until their dependencies arrive. The room's
// mutex guards it.
type ledger struct {
	actors  map[string]actorClock
	ops     int64 // operations applied
	changes int64 // changes applied
	bytes   int64 // what the applied changes expand to (amcheck.Change.Expanded)
	queued  map[[32]byte]queuedChange
	// queuedOps and queuedBytes count the queued changes' operations and
	// bytes: they are charged to the document when they arrive.
	queuedOps, queuedBytes int64
	// waiting, when set, sums the queued bytes of every document of the
	// hub (Limits.WaitingBytes).
	waiting *atomic.Int64
	refs    *refIndex
}

func (l *ledger) index() *refIndex {
	if l.refs == nil {
		l.refs = newRefIndex(nil)
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
		l.bytes += c.Expanded
		l.index().add(&c.Change)
		l.unqueue(c.Hash)
	}
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
	parsed := make([]queuedChange, 0, len(changes))
	ops, bytes := 0, int64(0)
	for i, b := range changes {
		c, err := amcheck.ParseSyncChange(b, amcheck.Limits{MaxOps: lim.ChangeOps, MaxExpandedBytes: lim.ChangeBytes, ListOps: true, Canonical: true})
		switch {
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
		ops += c.Ops
		if ops > lim.MessageOps {
			return nil, fmt.Errorf("%w: the message adds over %d operations", ErrLimit, lim.MessageOps)
		}
		bytes += c.Expanded
		parsed = append(parsed, queuedChange{change: change{Change: c, raw: b}})
	}
	// Changes already queued were counted when they came.
	switch {
	case l.ops+l.queuedOps+int64(ops) > lim.DocumentOps:
		return nil, fmt.Errorf("%w: the document holds %d operations (%d of them waiting); %d more would pass its limit of %d",
			ErrLimit, l.ops+l.queuedOps, l.queuedOps, ops, lim.DocumentOps)
	case l.bytes+l.queuedBytes+bytes > lim.DocumentBytes:
		return nil, fmt.Errorf("%w: the document holds %d bytes of changes; %d more would pass its limit of %d",
			ErrLimit, l.bytes+l.queuedBytes, bytes, lim.DocumentBytes)
	case l.changes+int64(len(l.queued)+len(parsed)) > lim.DocumentChanges:
		return nil, fmt.Errorf("%w: the document holds %d changes; %d more would pass its limit of %d",
			ErrLimit, l.changes+int64(len(l.queued)), len(parsed), lim.DocumentChanges)
	}

	// Replay automerge's order. have holds what is applied so far in
	// this replay; clocks the actors' clocks as they advance.
	ad := &admission{}
	have := make(map[[32]byte]bool)
	clocks := make(map[string]actorClock)
	clock := func(a string) actorClock {
		if c, ok := clocks[a]; ok {
			return c
		}
		return l.actors[a]
	}
	present := func(h [32]byte) bool { return have[h] || known(h[:]) }
	ready := func(c *queuedChange) bool {
		for _, d := range c.Deps {
			if !present(d) {
				return false
			}
		}
		return true
	}
	// What the changes replayed so far add to the document's index.
	refs := newRefIndex(l.index())
	check := func(c *queuedChange) error {
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
	var waiting []*queuedChange
	for i := range parsed {
		c := &parsed[i]
		if a := hex.EncodeToString(c.Actor); c.Seq <= clock(a).seq {
			return nil, fmt.Errorf("%w: actor %s already has a change %d", ErrRefused, a, c.Seq)
		}
		if !ready(c) {
			waiting = append(waiting, c)
			continue
		}
		if err := check(c); err != nil {
			return nil, err
		}
	}
	fromQueue := len(waiting)
	for h := range l.queued {
		c := l.queued[h]
		waiting = append(waiting, &c)
	}
	for progress := true; progress; {
		progress = false
		for i, c := range waiting {
			if c == nil || !ready(c) {
				continue
			}
			err := check(c)
			if err != nil && i < fromQueue {
				return nil, err
			}
			if err != nil {
				ad.dropped = append(ad.dropped, droppedChange{c.Hash, err})
			}
			waiting[i] = nil
			if err == nil {
				progress = true
			}
		}
	}
	var heldBytes int64
	for _, c := range waiting[:fromQueue] {
		if c != nil {
			ad.held = append(ad.held, *c)
			heldBytes += c.Expanded
		}
	}
	if len(l.queued)+len(ad.held) > maxQueued {
		return nil, fmt.Errorf("%w: %d changes wait for changes the document lacks (limit %d)", ErrLimit, len(l.queued)+len(ad.held), maxQueued)
	}
	if heldBytes > 0 && l.waiting != nil && l.waiting.Load()+heldBytes > lim.WaitingBytes {
		return nil, fmt.Errorf("%w: it holds %d bytes of them; %d more would pass its limit of %d",
			ErrBusy, l.waiting.Load(), heldBytes, lim.WaitingBytes)
	}
	return ad, nil
}
