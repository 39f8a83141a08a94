package guard

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tandemhq/tandem/doc/amcheck/amtest"
	"github.com/tandemhq/tandem/doc/amsync"
)

// A change's operations are listed to check it (80-odd bytes each, where
// the log keeps 16 once taken): a message of changes that pack many
// operations into few bytes made the guard list them all before any
// limit was looked at, hundreds of megabytes from a message of a few.
// The lists are charged before they are made: a message whose lists
// would pass Limits.CheckBytes alone is refused, and one that would pass
// it beside another's is asked to come back.
func TestCheckingAMessageIsChargedBeforeItsOperationsAreListed(t *testing.T) {
	const checkBytes = 20 << 20
	changes := amtest.Chain(5, 100_000, 0) // 100,000 ops each: 9.6 MB of lists each
	lim := Limits{CheckBytes: checkBytes}
	lim.SetDefaults()

	l := &Ledger{log: amsync.NewLog()}
	_, err := l.Admit(lim, changes, func([]byte) bool { return false })
	if !errors.Is(err, ErrLimit) || !strings.HasPrefix(err.Error(), "change 2:") {
		t.Fatalf("a message of 48 MB of lists: err = %v, want ErrLimit at its third change, before its list is made", err)
	}
	if l.checked > checkBytes {
		t.Fatalf("%d bytes of lists made, over the bound %d", l.checked, checkBytes)
	}
	l.Release()

	// Two rooms checking at once share the node's bound.
	var node atomic.Int64
	a, b := &Ledger{log: amsync.NewLog(), checking: &node}, &Ledger{log: amsync.NewLog(), checking: &node}
	if _, err := a.Admit(lim, changes[:1], func([]byte) bool { return false }); err != nil {
		t.Fatalf("one change of 9.6 MB of lists: %v", err)
	}
	if _, err := b.Admit(lim, changes[:2], func([]byte) bool { return false }); !errors.Is(err, ErrBusy) {
		t.Fatalf("beside another room's: err = %v, want ErrBusy", err)
	}
	a.Release()
	b.Release()
	if n := node.Load(); n != 0 {
		t.Fatalf("%d bytes still charged after both were done", n)
	}
}
