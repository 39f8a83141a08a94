package guard

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/tandemhq/tandem/doc/amcheck"
	"github.com/tandemhq/tandem/doc/amsync"
)

// Changes that wait. A change may come before one it depends on (a bloom
// filter's false positive makes a peer leave a change out but send what
// depends on it). The guard keeps it back, and checks it and lets it into
// the log once what it depends on is there (admit). A waiting change is charged to the
// document's limits when it comes and to the node's Limits.WaitingBytes,
// leaves with the peer that sent it, and the room's replies ask that peer
// for what it lacks (ledger.missingFrom).
//
// What a waiting change is charged (cost) is what it holds: a copy of its
// bytes and its header. Its operations, read out one by one (80 bytes and
// more each, against the 16 it is charged), are read again when it is
// ready (ledger.admit); and its bytes are copied out of the message it
// came in, which a small change would otherwise keep whole.

// Changes from the store or another node (stored ones) wait in the same
// queue, for the same reason (a change can come over the bus before one
// it depends on), but are not charged: they were checked and charged
// where they were taken, and are let go past MaxStoredWaiting (the heads
// exchange and the store bring them again). They leave with the room.

// maxQueued bounds the changes of local peers a document keeps back for
// missing dependencies; a stock client never sends one before what it
// depends on but for bloom filter false positives, which are a handful.
const maxQueued = 1024

// MaxStoredWaiting bounds the stored changes a document keeps back for
// missing dependencies.
const MaxStoredWaiting = 4096

// inOrder visits n changes (change(i) the i-th) in an order in which each
// comes after what it depends on: take is called for each change whose
// dependencies are present, or were taken before it in this visit; a
// change take leaves (false) is not, so that what depends on it is not
// taken either. take must make what it takes present. Changes go in
// their order where their dependencies allow: one pass when they come in
// order, as a client sends them and a store holds them; otherwise each
// waits under what it lacks and goes once it lacks nothing, a pass per
// dependency (a chain sent last change first would cost a pass over
// every waiting change per change taken: quadratic). It returns the
// changes left lacking a dependency, by index in order; an error from
// take ends the visit.
func inOrder(n int, change func(i int) *amcheck.Change, present func([32]byte) bool, take func(i int) (bool, error)) ([]int, error) {
	var later []int
	for i := range n {
		if !readyNow(change(i), present) {
			later = append(later, i)
			continue
		}
		if _, err := take(i); err != nil {
			return nil, err
		}
	}
	if len(later) == 0 {
		return nil, nil
	}
	lacks := make(map[int]int, len(later))
	under := make(map[[32]byte][]int)
	var next []int
	for _, i := range later {
		for _, d := range change(i).Deps {
			if !present(d) {
				under[d] = append(under[d], i)
				lacks[i]++
			}
		}
		if lacks[i] == 0 {
			next = append(next, i)
		}
	}
	for len(next) > 0 {
		i := next[0]
		next = next[1:]
		ok, err := take(i)
		if err != nil {
			return nil, err
		}
		delete(lacks, i)
		if !ok {
			continue
		}
		c := change(i)
		for _, j := range under[c.Hash] {
			if lacks[j]--; lacks[j] == 0 {
				next = append(next, j)
			}
		}
		delete(under, c.Hash)
	}
	var lacking []int
	for _, i := range later {
		if _, ok := lacks[i]; ok {
			lacking = append(lacking, i)
		}
	}
	return lacking, nil
}

func readyNow(c *amcheck.Change, present func([32]byte) bool) bool {
	for _, d := range c.Deps {
		if !present(d) {
			return false
		}
	}
	return true
}

// DropFrom drops the queued changes a peer sent, as it leaves: what a
// peer keeps waiting lasts no longer than its connection (a stock client
// sends them again when it comes back).
func (l *Ledger) DropFrom(peer string) {
	for h, c := range l.queued {
		if !c.Stored && c.from == peer {
			l.unqueue(h)
		}
	}
}

// DropAll empties the queue, giving its bytes back to the node's
// count, as its room leaves memory.
func (l *Ledger) DropAll() {
	for h := range l.queued {
		l.unqueue(h)
	}
}

// Queue queues the changes an admission left waiting (Admission.wait:
// peer's, or stored ones), and unqueues the queued ones the guard refused
// once they were ready. It returns how many stored changes it let go, past
// MaxStoredWaiting.
func (l *Ledger) Queue(ad *Admission, peer string) (letGo int) {
	for _, c := range ad.wait {
		if l.queued == nil {
			l.queued = make(map[[32]byte]Change)
		}
		if _, ok := l.queued[c.Hash]; ok {
			continue
		}
		if c.Stored {
			if len(l.queued)-l.fromPeers >= MaxStoredWaiting {
				letGo++
				continue
			}
			l.queued[c.Hash] = c
			continue
		}
		c = c.kept()
		c.from = peer
		l.queued[c.Hash] = c
		l.fromPeers++
		l.queuedBytes += Cost(&c.Change)
		if l.waiting != nil {
			l.waiting.Add(Cost(&c.Change))
		}
	}
	for _, d := range ad.Dropped {
		l.unqueue(d.Hash)
	}
	return letGo
}

// kept returns the change as it waits: its bytes copied out of the
// message, and its header read from the copy, without its operations.
func (c Change) kept() Change {
	raw := bytes.Clone(c.Raw)
	h, err := amcheck.ParseSyncChange(raw, amcheck.Limits{})
	if err != nil || h.Hash != c.Hash {
		// It read before; it reads the same again. Were it not so, it
		// waits as it came, holding more than it is charged.
		return c
	}
	h.Ops, h.Expanded = c.Ops, c.Expanded // what it was charged, whatever the limits read
	return Change{Change: h, Raw: raw}
}

// withOps returns a waiting change with its operations read again, now
// that it is ready to be checked (a change that never waited has them).
func (c Change) withOps(lim Limits, charge func(ops, preds int) error) (Change, error) {
	if c.OpList != nil || c.Ops == 0 {
		return c, nil
	}
	full, err := lim.readChangeListed(c.Raw, true, charge)
	if errors.Is(err, ErrBusy) || errors.Is(err, ErrLimit) {
		return c, err
	}
	if err != nil {
		return c, fmt.Errorf("%w: %v", ErrRefused, err)
	}
	c.Change = full
	return c, nil
}

func (l *Ledger) unqueue(h [32]byte) {
	if c, ok := l.queued[h]; ok {
		delete(l.queued, h)
		if c.Stored {
			return
		}
		l.fromPeers--
		l.queuedBytes -= Cost(&c.Change)
		if l.waiting != nil {
			l.waiting.Add(-Cost(&c.Change))
		}
	}
}

// MissingFrom returns the dependencies of the changes peer sent that
// wait in the queue which neither the document nor the queue holds: what
// the room asks that peer for. Only that peer is asked: the others may
// not have them, and each would answer every such question.
func (l *Ledger) MissingFrom(peer string, known func(hash []byte) bool) []amsync.Hash {
	var out []amsync.Hash
	for _, c := range l.queued {
		if c.Stored || c.from != peer {
			continue
		}
		for _, d := range c.Deps {
			if _, queued := l.queued[d]; queued || known(d[:]) {
				continue
			}
			out = append(out, d)
		}
	}
	return out
}

// Waits reports whether a local peer's change waits in the queue: the
// peers need not be asked for it (a stored one that waits is asked for as
// any change the document lacks).
func (l *Ledger) Waits(h amsync.Hash) bool {
	c, ok := l.queued[h]
	return ok && !c.Stored
}

// Waiting counts the changes that wait for a dependency: local peers'
// and stored ones.
func (l *Ledger) Waiting() (fromPeers, stored int) {
	return l.fromPeers, len(l.queued) - l.fromPeers
}
