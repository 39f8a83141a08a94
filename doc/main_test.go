package doc

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	RunSandboxWorkerIfAsked() // the sandbox tests start this binary as a worker
	os.Exit(m.Run())
}
