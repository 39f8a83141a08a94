//go:build linux

package transport

import (
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sys/unix"

	"github.com/tandemhq/tandem/internal/testenv"
	"github.com/tandemhq/tandem/transport/wire"
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

// TCP urgent data stops a read at its mark while more bytes wait, so a
// short read does not always empty the socket: a message that follows
// urgent data is read at once, whether the connection was parked or its
// reader ran. Repeated: the poller must find the urgent data and the
// message after it together.
func TestAMessageAfterUrgentDataIsRead(t *testing.T) {
	s := newTestServer(t, Config{})
	if s.poller == nil {
		t.Fatal("no poller: connections cannot park here")
	}
	ws := dial(t, s.url)
	join(t, ws, "a")
	rc, err := ws.UnderlyingConn().(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	for round := uint64(1); round <= 30; round++ {
		a := clientFrame(0x2, true, heartbeatFrame(t, "a", 2*round-1))
		b := clientFrame(0x2, true, heartbeatFrame(t, "a", 2*round))
		var werr error
		if err := rc.Write(func(fd uintptr) bool {
			if _, werr = unix.Write(int(fd), a); werr == nil {
				if werr = unix.Sendto(int(fd), []byte{0}, unix.MSG_OOB, nil); werr == nil {
					_, werr = unix.Write(int(fd), b)
				}
			}
			return true
		}); err != nil || werr != nil {
			t.Fatal(err, werr)
		}
		for _, seq := range []uint64{2*round - 1, 2 * round} {
			if m := recv(t, ws); m.Type != wire.TypeHeartbeatAck || m.Seq != seq {
				t.Fatalf("round %d: got %s %d, want the ack of %d", round, m.Type, m.Seq, seq)
			}
		}
	}
}
