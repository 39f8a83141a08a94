//go:build linux

package transport

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sys/unix"

	"github.com/tandemhq/tandem/internal/testenv"
)

// When the poller fails, every parked connection gets its reader back and
// nothing parks again: the connections go on answering, each with a
// goroutine. The fault is real: the epoll set's descriptor is made an
// eventfd's, so the poller's next wait fails.
func TestAFailedPollerHandsEveryConnectionItsReaderBack(t *testing.T) {
	s := newTestServer(t, Config{})
	if s.poller == nil {
		t.Fatal("no poller: connections cannot park here")
	}
	const n = 20
	conns := dialJoined(t, s, n)
	parked := func() float64 { return testutil.ToFloat64(s.metrics.parked) }
	testenv.WaitFor(t, "every connection parked", func() bool { return parked() == n })
	other, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(other)
	if err := unix.Dup3(other, s.poller.epfd, unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	// The poller still waits for the set it had; a deadline makes it look
	// again, and its next wait, on what is now an eventfd, fails.
	s.poller.set.SetReadDeadline(time.Now())
	testenv.WaitFor(t, "the poller dead", func() bool { return s.poller.dead.Load() })
	testenv.WaitFor(t, "no connection parked", func() bool { return parked() == 0 })
	for round := uint64(2); round <= 4; round++ {
		heartbeatEach(t, conns, round)
		if p := parked(); p != 0 {
			t.Fatalf("round %d: %v connections parked on a dead poller", round, p)
		}
	}
	for _, ws := range conns {
		ws.Close()
	}
	testenv.WaitFor(t, "closed connections finished", func() bool { return s.Connections() == 0 })
}
