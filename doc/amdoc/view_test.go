package amdoc

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/tandemhq/tandem/doc/amcheck"
	"github.com/tandemhq/tandem/doc/amcheck/amtest"
)

// sameJSON reports whether the Go view, written as JSON, reads back as
// the JSON stock automerge wrote.
func sameJSON(t *testing.T, got map[string]any, want []byte) (bool, string, string) {
	t.Helper()
	g, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	var a, b any
	if err := json.Unmarshal(g, &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(want, &b); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(a, b), string(g), string(want)
}

// headsOf returns the hex heads of changes (each after its dependencies).
func headsOf(t *testing.T, changes [][]byte) []string {
	t.Helper()
	depended := map[[32]byte]bool{}
	var hashes [][32]byte
	for _, raw := range changes {
		c, _, err := amcheck.ParseChange(raw, amcheck.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		hashes = append(hashes, c.Hash)
		for _, d := range c.Deps {
			depended[d] = true
		}
	}
	var heads []string
	for _, h := range hashes {
		if !depended[h] {
			heads = append(heads, hex.EncodeToString(h[:]))
		}
	}
	return heads
}

// TestTheViewIsWhatToJSShows reads random editing sessions (text, marks,
// maps, lists, counters, nested objects, deletions, concurrent edits by
// several actors) and the hand-made cases, whole and at earlier heads,
// and compares each with what stock automerge's toJS shows of them.
func TestTheViewIsWhatToJSShows(t *testing.T) {
	o := amtest.StockAutomerge(t)
	check := func(name string, changes [][]byte, heads []string) {
		t.Helper()
		got, err := View(context.Background(), join(changes))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if ok, g, w := sameJSON(t, got, o.View(t, changes, heads)); !ok {
			t.Errorf("%s:\n got %s\nwant %s", name, g, w)
		}
	}
	for seed := 1; seed <= 40; seed++ {
		changes := o.Trace(t, seed, 30+seed*5)
		check(fmt.Sprintf("seed %d", seed), changes, nil)
		// A prefix of the log's order holds every ancestor of its heads:
		// the document as it was at those heads.
		for _, n := range []int{1, len(changes) / 3, len(changes) * 2 / 3} {
			if n > 0 {
				check(fmt.Sprintf("seed %d at %d", seed, n), changes[:n], headsOf(t, changes[:n]))
			}
		}
	}
	for name, changes := range o.Cases(t) {
		check(name, changes, nil)
	}
	check("scalars", o.Scalars(t), nil)
}
