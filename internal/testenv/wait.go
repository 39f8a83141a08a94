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
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
