package guard

import (
	"errors"
	"fmt"
	"math"

	"github.com/tandemhq/tandem/doc/amcheck"
)

// Limits bound what clients may add to a document, in bytes: what a
// change costs is what it expands to (amcheck.Change.Expanded: its
// columns inflated, its keys and values as a client materializes them)
// plus OpBytes for each of its operations, what the guard's index may
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
	// their message is checked (their operations listed, OpListBytes
	// each), summed over the hub's documents; default what a change of
	// ChangeBytes lists, so that one such change can always be checked
	// (384 MiB by default). A message that needs more alone is refused
	// (ErrLimit); one that would pass it beside others' is asked to come
	// back (ErrBusy).
	CheckBytes int64
}

// OpListBytes is what the guard holds per operation while a message is
// checked: its amcheck.Op and a share of its key. Predecessors cost 8
// bytes each besides. The log keeps far less of a change once taken
// (OpBytes).
const OpListBytes = 96

// OpBytes is what each operation of a change counts against the limits
// besides its bytes: an operation the index cannot fold into a run of
// its neighbours costs it about this much (BenchmarkAdmitTypedChange).
// So the byte limits bound operations too, however few bytes a
// run-length encoding packs them into.
const OpBytes = 16

// Cost is what a change counts against the limits.
func Cost(c *amcheck.Change) int64 { return c.Expanded + OpBytes*int64(c.Ops) }

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
	c, err := amcheck.ParseSyncChange(b, amcheck.Limits{MaxOps: int(l.ChangeBytes / OpBytes),
		MaxExpandedBytes: l.ChangeBytes, Canonical: true, ListOps: listOps, BeforeList: charge})
	switch {
	case errors.Is(err, amcheck.ErrTooLarge):
		err = fmt.Errorf("%w: the change costs over %d bytes, the limit (%v)", amcheck.ErrTooLarge, l.ChangeBytes, err)
	case err == nil && Cost(&c) > l.ChangeBytes:
		err = fmt.Errorf("%w: the change costs %d bytes (%d expanded, %d operations), over %d bytes, the limit",
			amcheck.ErrTooLarge, Cost(&c), c.Expanded, c.Ops, l.ChangeBytes)
	}
	return c, err
}

func (l *Limits) SetDefaults() {
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
		l.CheckBytes = l.ChangeBytes / OpBytes * OpListBytes
	}
}
