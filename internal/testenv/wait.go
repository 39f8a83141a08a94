package testenv

import (
	"testing"
	"time"
)

// WaitFor polls cond every 5 ms until it holds, failing the test after
// 10 s: for what another goroutine, process or node does in its own time.
// The bound is generous for a shared machine; it is not a figure.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	WaitWithin(t, what, 10*time.Second, cond)
}

// WaitWithin is WaitFor with a bound of the test's own: for a test whose
// figure is how soon cond holds.
func WaitWithin(t testing.TB, what string, bound time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", bound, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
