package amsave

import (
	"context"
	"errors"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/automerge/automerge-go"
)

// hangEnv makes this test binary, as a worker, hang instead of working.
const hangEnv = "AMSAVE_TEST_HANG"

// TestMain lets this test binary serve as the worker.
func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) != "" && os.Getenv(hangEnv) != "" {
		select {}
	}
	ServeIfWorker()
	m.Run()
}

// given returns changes as a Save takes them.
func given(b []byte) func() ([]byte, error) { return func() ([]byte, error) { return b, nil } }

// typed returns a document of n characters typed into a text, and its
// changes one after another.
func typed(t testing.TB, n int) (*automerge.Doc, []byte) {
	t.Helper()
	d := automerge.New()
	if err := d.RootMap().Set("text", automerge.NewText("")); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Commit("create"); err != nil {
		t.Fatal(err)
	}
	text := d.Path("text").Text()
	for i := range n {
		if err := text.Append(string(rune('a' + i%26))); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Commit("type"); err != nil {
			t.Fatal(err)
		}
	}
	cs, err := d.Changes()
	if err != nil {
		t.Fatal(err)
	}
	var all []byte
	for _, c := range cs {
		all = append(all, c.Save()...)
	}
	return d, all
}

func TestAWorkerSavesTheChangesAsAutomergeDoes(t *testing.T) {
	s, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	d, changes := typed(t, 500)
	saved, err := s.Save(context.Background(), given(changes))
	if err != nil {
		t.Fatal(err)
	}
	back, err := automerge.Load(saved)
	if err != nil {
		t.Fatalf("the saved document does not load: %v", err)
	}
	if !slices.Equal(back.Heads(), d.Heads()) {
		t.Fatalf("the saved document is at %v, want %v", back.Heads(), d.Heads())
	}
	got, _ := back.Path("text").Text().Get()
	want, _ := d.Path("text").Text().Get()
	if got != want {
		t.Fatalf("the saved text is %q, want %q", got, want)
	}
	if len(saved) >= len(changes) {
		t.Fatalf("saved in %d bytes, the changes are %d", len(saved), len(changes))
	}
}

// A worker that fails (here on bytes that are no changes) fails its job
// with what it said, and the next job runs.
func TestAFailedJobLeavesTheSaverWorking(t *testing.T) {
	s, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Save(context.Background(), given([]byte("not a change"))); err == nil || !strings.Contains(err.Error(), "load the changes") {
		t.Fatalf("saving garbage: %v, want the worker's load error", err)
	}
	_, changes := typed(t, 10)
	if _, err := s.Save(context.Background(), given(changes)); err != nil {
		t.Fatalf("the next job: %v", err)
	}
}

// A worker's memory is bounded: a job that needs more than the bound
// fails, one within it succeeds, and so does the larger one with a larger
// bound.
func TestAWorkerIsBoundedInMemory(t *testing.T) {
	_, changes := typed(t, 20_000)
	small, err := New(Config{MemoryBytes: 150 << 20, Share: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, few := typed(t, 10)
	if _, err := small.Save(context.Background(), given(few)); err != nil {
		t.Fatalf("a 10-change document within 150 MiB: %v", err)
	}
	_, err = small.Save(context.Background(), given(changes))
	// Go says "out of memory" or "cannot allocate memory", Rust "memory
	// allocation of N bytes failed", a race-detector build "failed to
	// allocate": whichever asked first.
	if err == nil || !(strings.Contains(err.Error(), "out of memory") || strings.Contains(err.Error(), "allocat")) {
		t.Fatalf("a 20,000-change document within 150 MiB: %v, want out of memory", err)
	}
	large, err := New(Config{MemoryBytes: 4 << 30})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := large.Save(context.Background(), given(changes)); err != nil {
		t.Fatalf("within 4 GiB: %v", err)
	}
}

// A worker that does not finish is killed at the job's timeout, and the
// next job runs; a caller that gives up while another's job runs does not
// wait for it.
func TestAJobEndsWithItsTimeOrItsCaller(t *testing.T) {
	_, changes := typed(t, 100)
	s, err := New(Config{Timeout: 2 * time.Second, Share: 1}) // no pause after the hung job
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(hangEnv, "1")
	started := make(chan struct{})
	hung := make(chan error, 1)
	go func() {
		_, err := s.Save(context.Background(), func() ([]byte, error) {
			close(started) // it has its turn: the worker starts now
			return changes, nil
		})
		hung <- err
	}()
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Save(ctx, given(changes)); !errors.Is(err, context.Canceled) {
		t.Fatalf("a caller that gave up behind another's job: %v", err)
	}
	select {
	case err := <-hung:
		t.Fatalf("the caller behind it waited for the hung job to end (%v)", err)
	default:
	}
	if err := <-hung; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a worker that hangs: %v, want the deadline", err)
	}
	os.Unsetenv(hangEnv)
	if _, err := s.Save(context.Background(), given(changes)); err != nil {
		t.Fatalf("the next job: %v", err)
	}
}

// The workers take at most Config.Share of a core over time: after a job
// that took d, the next waits d × (1/Share − 1) before it takes its
// changes; a caller that gives up meanwhile is let go.
func TestJobsTakeTheirShareOfACore(t *testing.T) {
	s, err := New(Config{Share: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	_, changes := typed(t, 500)
	start := time.Now()
	if _, err := s.Save(context.Background(), given(changes)); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	ended := time.Now()
	var taken time.Time
	if _, err := s.Save(context.Background(), func() ([]byte, error) { taken = time.Now(); return changes, nil }); err != nil {
		t.Fatal(err)
	}
	// The job took at most took (it is timed inside Save); its pause is
	// as long as the job at Share 0.5. Only a lower bound is certain.
	if waited := taken.Sub(ended); waited < took/2 {
		t.Fatalf("the next job took its changes %v after the last ended, which took up to %v", waited, took)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Save(ctx, given(changes)); !errors.Is(err, context.Canceled) {
		t.Fatalf("a caller that gave up while the job paused: %v", err)
	}
}

// What a collection finds unreachable is finalized by the time
// awaitFinalizers returns: automerge-go frees a document in a finalizer,
// and the worker drops its loaded document so before it loads the next.
func TestAwaitFinalizersWaitsForThoseQueued(t *testing.T) {
	for i := range 200 {
		var ran atomic.Bool
		x := &sentinel{}
		runtime.SetFinalizer(x, func(*sentinel) { ran.Store(true) })
		x = nil
		awaitFinalizers()
		if !ran.Load() {
			t.Fatalf("round %d: a finalizer queued by the collection had not run", i)
		}
	}
}
