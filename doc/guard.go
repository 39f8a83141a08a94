package doc

import (
	"encoding/hex"
	"errors"
	"fmt"
	"sort"

	"github.com/automerge/automerge-go"
	"github.com/tandemhq/tandem/doc/amcheck"
)

// The guard stands between a client's sync message and automerge. The
// automerge core Tandem links (automerge-go, automerge-rs 0.5 built with
// panic=abort) trusts its input in places: a Rust panic inside the cgo call
// aborts the whole process, and a few bytes can expand into gigabytes.
// So before a message reaches automerge the guard
//   - reads it in Go (parseSyncMessage): structure, and bloom filters that
//     automerge would divide by zero with or allocate gigabytes for;
//   - reads every change in it (package amcheck): checksum, columns, and
//     its size after run-length expansion, against the limits;
//   - checks each change against the document as automerge will apply it:
//     an actor's changes must come with contiguous sequence numbers and
//     rising op counters (automerge indexes its per-actor history by
//     sequence number, and a gap aborts it when it next generates a sync
//     message);
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
}

// actorClock is what the guard knows of one actor's changes in a document.
type actorClock struct {
	seq   uint64 // sequence number of its last applied change
	maxOp uint64 // highest op counter of its changes
}

// ledger is the guard's account of a room's document: every actor's clock,
// the operations it holds, and the changes automerge keeps back until
// their dependencies arrive. The room's mutex guards it.
type ledger struct {
	actors map[string]actorClock
	ops    int64
	queued map[[32]byte]queuedChange
	// made holds, per actor, the objects its changes made, as runs of op
	// counters in order: whether each is a map (addressed by map keys) or
	// a list or text (by list positions). automerge aborts when an op
	// addresses an object by the other kind of key.
	made map[string][]madeRun
}

// madeRun is a run of objects an actor's change made.
type madeRun struct {
	start, n uint64
	isMap    bool
}

// kindOf reports whether the object an actor's op counter made is a map,
// and whether the ledger knows it.
func (l *ledger) kindOf(actor string, ctr uint64) (isMap, ok bool) {
	runs := l.made[actor]
	i := sort.Search(len(runs), func(i int) bool { return runs[i].start+runs[i].n > ctr })
	if i < len(runs) && runs[i].start <= ctr {
		return runs[i].isMap, true
	}
	return false, false
}

// noteMade adds the objects a change made.
func (l *ledger) noteMade(c *amcheck.Change) {
	if len(c.Made) == 0 {
		return
	}
	if l.made == nil {
		l.made = make(map[string][]madeRun)
	}
	a := string(c.Actor)
	runs := l.made[a]
	for _, m := range c.Made {
		runs = append(runs, madeRun{start: m.Counter, n: m.N, isMap: m.Map})
	}
	// An actor's op counters grow with its changes: in order but for a
	// change applied after a later one's, which automerge refuses anyway.
	if !sort.SliceIsSorted(runs, func(i, j int) bool { return runs[i].start < runs[j].start }) {
		sort.Slice(runs, func(i, j int) bool { return runs[i].start < runs[j].start })
	}
	l.made[a] = runs
}

// queuedChange is a change automerge holds back, with its bytes for the
// sandbox's copy of the document.
type queuedChange struct {
	amcheck.Change
	raw []byte
}

// maxQueued bounds the changes a document keeps back for missing
// dependencies; a stock client never sends one before what it depends on
// but for bloom filter false positives, which are a handful.
const maxQueued = 1024

// record adds changes automerge applied (in the order it applied them) to
// the ledger.
func (l *ledger) record(changes []amcheck.Change) {
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
		l.noteMade(&c)
		delete(l.queued, c.Hash)
	}
}

// recordSince reads what automerge applied to doc after the heads before
// and adds it to the ledger; it returns those changes, saved.
func (l *ledger) recordSince(doc *automerge.Doc, before []automerge.ChangeHash) ([]byte, error) {
	cs, err := doc.Changes(before...)
	if err != nil {
		return nil, err
	}
	if len(cs) == 0 {
		return nil, nil
	}
	saved := automerge.SaveChanges(cs)
	parsed, err := amcheck.ParseChanges(saved, amcheck.Limits{})
	if err != nil {
		return saved, err
	}
	l.record(parsed)
	return saved, nil
}

// admit checks a sync message's changes against the limits and the ledger
// without changing either: it replays, in Go, the order in which automerge
// will apply them (each as soon as everything it depends on is there,
// holding back the others), and refuses the message if any change would
// break an actor's sequence. known reports the changes the document has.
// It returns the changes automerge will keep back.
func (l *ledger) admit(lim Limits, changes [][]byte, known func(hash []byte) bool) ([]queuedChange, error) {
	if len(changes) == 0 {
		return nil, nil
	}
	parsed := make([]queuedChange, 0, len(changes))
	ops := 0
	for i, b := range changes {
		c, err := amcheck.ParseSyncChange(b, amcheck.Limits{MaxOps: lim.ChangeOps, MaxExpandedBytes: lim.ChangeBytes})
		switch {
		case errors.Is(err, amcheck.ErrTooLarge):
			return nil, fmt.Errorf("%w: change %d: %v", ErrLimit, i, err)
		case err != nil:
			return nil, fmt.Errorf("%w: change %d: %v", ErrRefused, i, err)
		}
		ops += c.Ops
		if ops > lim.MessageOps {
			return nil, fmt.Errorf("%w: the message adds over %d operations", ErrLimit, lim.MessageOps)
		}
		parsed = append(parsed, queuedChange{c, b})
	}
	if l.ops+int64(ops) > lim.DocumentOps {
		return nil, fmt.Errorf("%w: the document holds %d operations; %d more would pass its limit of %d",
			ErrLimit, l.ops, ops, lim.DocumentOps)
	}

	// Replay automerge's order. have holds what is applied so far in
	// this replay; clocks the actors' clocks as they advance.
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
	// Objects made by the changes replayed so far, as the ledger will
	// hold them once they are applied.
	var madeHere ledger
	apply := func(c *queuedChange) error {
		for _, ref := range c.Refs {
			isMap, ok := l.kindOf(string(ref.Actor), ref.Counter)
			if !ok {
				isMap, ok = madeHere.kindOf(string(ref.Actor), ref.Counter)
			}
			if ok && isMap != ref.MapKeys {
				what := "a list or text by map key"
				if isMap {
					what = "a map by list position"
				}
				return fmt.Errorf("%w: change %x addresses %s", ErrRefused, c.Hash[:4], what)
			}
		}
		madeHere.noteMade(&c.Change)
		a := hex.EncodeToString(c.Actor)
		ac := clock(a)
		if c.Seq != ac.seq+1 {
			return fmt.Errorf("%w: actor %s has changes up to %d; this one is %d", ErrRefused, a, ac.seq, c.Seq)
		}
		if c.StartOp <= ac.maxOp {
			return fmt.Errorf("%w: actor %s reuses op counter %d", ErrRefused, a, c.StartOp)
		}
		ac.seq = c.Seq
		if c.Ops > 0 {
			ac.maxOp = c.StartOp + uint64(c.Ops) - 1
		}
		clocks[a] = ac
		have[c.Hash] = true
		return nil
	}
	waiting := make([]*queuedChange, 0, len(l.queued))
	for h := range l.queued {
		c := l.queued[h]
		waiting = append(waiting, &c)
	}
	for i := range parsed {
		c := &parsed[i]
		if present(c.Hash) {
			continue // automerge skips what it has
		}
		if _, ok := l.queued[c.Hash]; ok {
			continue
		}
		if a := hex.EncodeToString(c.Actor); c.Seq <= clock(a).seq {
			return nil, fmt.Errorf("%w: actor %s already has a change %d", ErrRefused, a, c.Seq)
		}
		if !ready(c) {
			waiting = append(waiting, c)
			continue
		}
		if err := apply(c); err != nil {
			return nil, err
		}
	}
	for progress := true; progress; {
		progress = false
		for i, c := range waiting {
			if c == nil || present(c.Hash) || !ready(c) {
				continue
			}
			if err := apply(c); err != nil {
				return nil, err
			}
			waiting[i] = nil
			progress = true
		}
	}
	var held []queuedChange
	for _, c := range waiting {
		if c != nil && !present(c.Hash) {
			held = append(held, *c)
		}
	}
	if len(held) > maxQueued {
		return nil, fmt.Errorf("%w: %d changes wait for changes the document lacks (limit %d)", ErrLimit, len(held), maxQueued)
	}
	return held, nil
}

// hold records the changes automerge keeps back after a message was
// applied.
func (l *ledger) hold(changes []queuedChange, known func(hash []byte) bool) {
	for _, c := range changes {
		if known(c.Hash[:]) {
			continue
		}
		if l.queued == nil {
			l.queued = make(map[[32]byte]queuedChange)
		}
		l.queued[c.Hash] = c
	}
}

// queuedBytes returns the changes automerge holds back, as they came.
func (l *ledger) queuedBytes() [][]byte {
	var out [][]byte
	for _, c := range l.queued {
		out = append(out, c.raw)
	}
	return out
}
