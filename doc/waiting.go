package doc

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

// queuedChange is a change that waits for a change it depends on, kept by
// the guard with its bytes.
type queuedChange struct {
	change
	from string // the peer that sent it: its leaving drops it
}

// maxQueued bounds the changes a document keeps back for missing
// dependencies; a stock client never sends one before what it depends on
// but for bloom filter false positives, which are a handful.
const maxQueued = 1024

// unqueueFrom drops the queued changes a peer sent, as it leaves: what a
// peer keeps waiting lasts no longer than its connection (a stock client
// sends them again when it comes back).
func (l *ledger) unqueueFrom(peer string) {
	for h, c := range l.queued {
		if c.from == peer {
			l.unqueue(h)
		}
	}
}

// unqueueAll empties the queue, giving its bytes back to the node's
// count, as its room leaves memory.
func (l *ledger) unqueueAll() {
	for h := range l.queued {
		l.unqueue(h)
	}
}

// queueHeld queues the changes an admitted message from peer left waiting
// (admission.held), and unqueues the queued ones the guard refused once
// they were ready.
func (l *ledger) queueHeld(ad *admission, peer string) {
	for _, c := range ad.held {
		c.from = peer
		if l.queued == nil {
			l.queued = make(map[[32]byte]queuedChange)
		}
		if _, ok := l.queued[c.Hash]; ok {
			continue
		}
		c.change = c.held()
		l.queued[c.Hash] = c
		l.queuedBytes += cost(&c.Change)
		if l.waiting != nil {
			l.waiting.Add(cost(&c.Change))
		}
	}
	for _, d := range ad.dropped {
		l.unqueue(d.hash)
	}
}

// held returns the change as it waits: its bytes copied out of the
// message, and its header read from the copy, without its operations.
func (c change) held() change {
	raw := bytes.Clone(c.raw)
	h, err := amcheck.ParseSyncChange(raw, amcheck.Limits{})
	if err != nil || h.Hash != c.Hash {
		// It read before; it reads the same again. Were it not so, it
		// waits as it came, holding more than it is charged.
		return c
	}
	h.Ops, h.Expanded = c.Ops, c.Expanded // what it was charged, whatever the limits read
	return change{Change: h, raw: raw}
}

// withOps returns a waiting change with its operations read again, now
// that it is ready to be checked (a change that never waited has them).
func (c change) withOps(lim Limits, charge func(ops, preds int) error) (change, error) {
	if c.OpList != nil || c.Ops == 0 {
		return c, nil
	}
	full, err := lim.readChangeListed(c.raw, true, charge)
	if errors.Is(err, ErrBusy) || errors.Is(err, ErrLimit) {
		return c, err
	}
	if err != nil {
		return c, fmt.Errorf("%w: %v", ErrRefused, err)
	}
	return change{Change: full, raw: c.raw}, nil
}

func (l *ledger) unqueue(h [32]byte) {
	if c, ok := l.queued[h]; ok {
		delete(l.queued, h)
		l.queuedBytes -= cost(&c.Change)
		if l.waiting != nil {
			l.waiting.Add(-cost(&c.Change))
		}
	}
}

// missingFrom returns the dependencies of the changes peer sent that
// wait in the queue which neither the document nor the queue holds: what
// the room asks that peer for. Only that peer is asked: the others may
// not have them, and each would answer every such question.
func (l *ledger) missingFrom(peer string, known func(hash []byte) bool) []amsync.Hash {
	var out []amsync.Hash
	for _, c := range l.queued {
		if c.from != peer {
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

// holds reports whether the change waits in the queue.
func (l *ledger) holds(h amsync.Hash) bool {
	_, ok := l.queued[h]
	return ok
}
