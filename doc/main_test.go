package doc

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain serves as a sandbox worker when asked to, and otherwise runs
// the tests and fails them if any goroutine outlives them.
func TestMain(m *testing.M) {
	RunSandboxWorkerIfAsked() // the sandbox tests start this binary as a worker
	goleak.VerifyTestMain(m)
}
