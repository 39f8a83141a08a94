package main

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/tandemhq/tandem/doc/amsave"
)

// TestMain fails the package's tests if any goroutine outlives them. The
// test binary also serves as the node's worker that saves documents, as
// the tandem binary does (main).
func TestMain(m *testing.M) {
	amsave.ServeIfWorker()
	goleak.VerifyTestMain(m)
}
