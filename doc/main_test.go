package doc

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/tandemhq/tandem/doc/amsave"
)

// TestMain runs the tests and fails them if any goroutine outlives them.
// The test binary also serves as the worker that saves documents
// (Config.SaveDocument with doc/amsave).
func TestMain(m *testing.M) {
	amsave.ServeIfWorker()
	goleak.VerifyTestMain(m)
}
