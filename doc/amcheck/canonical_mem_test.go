package amcheck_test

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/tandemhq/tandem/doc/amcheck"
	"github.com/tandemhq/tandem/doc/amcheck/amtest"
)

// Checking that a change is encoded as automerge encodes it holds no
// more than a run of each column: it held a 56-byte record per value, so
// a change of 4 million distinct values (a few megabytes) took hundreds
// of megabytes to check.
func TestTheCanonicalCheckHoldsNothingPerValue(t *testing.T) {
	const n = 200_000
	c := amtest.Change{Actors: [][]byte{{0xab, 0xcd}}, Seq: 1, StartOp: 1}
	for i := range n {
		v, raw := amtest.Int(int64(i))
		c.Ops = append(c.Ops, amtest.Op{MapKey: true, Key: fmt.Sprint("k", i), Action: amcheck.Put, Value: v, Raw: raw})
	}
	chunk, _ := amtest.Encode(c)
	c.Ops = nil
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if _, err := amcheck.ParseSyncChange(chunk, amcheck.Limits{Canonical: true}); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	// What reading the change holds anyway is linear in its bytes; the
	// check adds nothing per value.
	if got := after.TotalAlloc - before.TotalAlloc; got > uint64(4*len(chunk))+1<<20 {
		t.Fatalf("checking a change of %d bytes allocated %d bytes", len(chunk), got)
	}
}
