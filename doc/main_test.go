package doc

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs the tests and fails them if any goroutine outlives them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
