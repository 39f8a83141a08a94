package doc

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/automerge/automerge-go"

	"github.com/tandemhq/tandem/doc/amcheck/amtest"
)

// emptyChanges returns n changes with no operations, one after another,
// each by an actor of its own and with a commit message of msgLen bytes.
func emptyChanges(n, msgLen int) []byte {
	var out []byte
	var prev [32]byte
	msg := strings.Repeat("m", msgLen)
	for i := range n {
		a := sha256.Sum256(fmt.Appendf(nil, "actor %d", i))
		c := amtest.Change{Actors: [][]byte{a[:16]}, Seq: 1, StartOp: 1, Message: msg}
		if i > 0 {
			c.Deps = [][32]byte{prev}
		}
		var chunk []byte
		chunk, prev = amtest.Encode(c)
		out = append(out, chunk...)
	}
	return out
}

// A document that would cost the save worker more than savedMaxCost is
// not saved, however few operations it has and however small its bytes:
// automerge holds every change and every commit message, besides the
// operations.
func TestADocumentThatWouldCostTheWorkerTooMuchIsNotSaved(t *testing.T) {
	for _, tc := range []struct {
		name    string
		changes []byte
	}{
		{"long commit messages", emptyChanges(200, 250<<10)}, // 50 MB, no op
		{"many changes", emptyChanges(150_000, 0)},           // 10 MB, no op
	} {
		t.Run(tc.name, func(t *testing.T) {
			saves := make(chan int, 1)
			h := newTestHub(t, storeOf(t, tc.changes), Config{SaveDocument: countedSaves(saves), SaveQuiet: time.Hour})
			r := roomOf(t, h, testDoc)
			r.mu.Lock()
			defer r.mu.Unlock()
			cost := saveCost(r.log.Len(), r.guard.Actors(), r.guard.Ops(), r.log.Bytes())
			if cost <= savedMaxCost {
				t.Fatalf("the document would cost the worker %d bytes, within savedMaxCost", cost)
			}
			if r.saving || r.quietDue {
				t.Fatalf("%d changes, %d bytes: a save under way %v, waiting for quiet %v", r.log.Len(), r.log.Bytes(), r.saving, r.quietDue)
			}
		})
	}
}

// workerPeak runs the save worker (this test binary, as TestMain serves
// it) on changes and returns the most memory it held: its VmHWM, read
// while it runs (its rusage would count this process's memory too, which
// it held before it started over). The peak comes while it loads the
// changes, well before it ends.
func workerPeak(t *testing.T, changes []byte) int64 {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "TANDEM_WORKER=save")
	cmd.Stdin = bytes.NewReader(changes)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	status := fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)
	var peak int64
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("the worker: %v: %s", err, stderr.Bytes())
			}
			return peak
		case <-time.After(time.Millisecond):
		}
		b, _ := os.ReadFile(status)
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				peak = max(peak, kb<<10)
			}
		}
	}
}

// saveCost bounds what the worker holds saving a document, whatever the
// document is made of: typing, a paste, changes with nothing in them but
// an actor of their own, long commit messages.
func TestTheSaveCostBoundsTheWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the worker on documents of tens of megabytes")
	}
	if raceEnabled {
		t.Skip("the worker is this binary, built with the race detector: its memory is not the node's worker's")
	}
	paste := automerge.New()
	if err := paste.RootMap().Set("text", automerge.NewText(strings.Repeat("x", 50_000))); err != nil {
		t.Fatal(err)
	}
	paste.Commit("paste")
	pasted, err := paste.Changes()
	if err != nil {
		t.Fatal(err)
	}
	var typed []byte
	for _, c := range amtest.Typing(20_000) {
		typed = append(typed, c...)
	}
	base := workerPeak(t, emptyChanges(1, 0)) // the process, saving next to nothing
	for _, tc := range []struct {
		name               string
		changes            []byte
		count, actors, ops int
	}{
		{"typing", typed, 20_001, 2, 20_001},
		{"a paste", pasted[0].Save(), 1, 1, 50_001},
		{"changes by new actors", emptyChanges(20_000, 0), 20_000, 20_000, 0},
		{"long commit messages", emptyChanges(5_000, 3_000), 5_000, 5_000, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			changes := tc.changes
			held := workerPeak(t, changes) - base
			cost := saveCost(tc.count, tc.actors, int64(tc.ops), int64(len(changes)))
			t.Logf("%d changes, %d ops, %d bytes: the worker held %.1f MiB; saveCost %.1f MiB",
				tc.count, tc.ops, len(changes), float64(held)/(1<<20), float64(cost)/(1<<20))
			if held > cost {
				t.Errorf("the worker held %d bytes, over saveCost's %d", held, cost)
			}
		})
	}
}
