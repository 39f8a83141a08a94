//go:build linux

package transport

import (
	"errors"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// poller watches the sockets of connections that have parked with an
// epoll set of its own, edge-triggered: a socket is added at its first
// park and stays until it closes, and each time bytes arrive the poller
// hears of it once, parked or not (conn.ready). Parking so costs no
// system call. The Go runtime watches the socket too, for the reads a
// reader makes when it runs.
//
// The poller's goroutine waits for the set through the runtime's own
// poller, as a reader waits for its socket: it holds no thread and no
// core while it waits, and the readers it starts run on the core it
// leaves as soon as it does.
type poller struct {
	epfd   int
	set    *os.File        // epfd, for the runtime's poller; closing it stops run
	rc     syscall.RawConn // set's
	waitFn func(fd uintptr) bool
	events []unix.EpollEvent
	err    error // what failed the set
	done   chan struct{}
	log    *slog.Logger
	dead   atomic.Bool // run failed: nothing may park

	mu    sync.Mutex
	conns map[uint64]*conn // by id, the connections ever parked and still open
	next  uint64
}

var errPollerDead = errors.New("the poller has failed")

func newPoller(log *slog.Logger) (*poller, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		return nil, err
	}
	set := os.NewFile(uintptr(epfd), "tandem-poller") // non-blocking: the runtime's poller waits for it
	rc, err := set.SyscallConn()
	if err != nil {
		set.Close()
		return nil, err
	}
	p := &poller{epfd: epfd, set: set, rc: rc, events: make([]unix.EpollEvent, 256),
		done: make(chan struct{}), log: log, conns: make(map[uint64]*conn), next: 1}
	p.waitFn = p.wait
	go p.run()
	return p, nil
}

// wait takes the events the set holds, without waiting, and hands each
// socket to its connection, until the set holds none; it then reports
// false, and the runtime's poller waits for more, or true when the set
// failed (p.err). It runs inside one RawRead for as long as the poller
// waits: the runtime resets what it knows of the set's readiness only
// when a RawRead starts, so an event that comes after a take, however
// soon, wakes the next wait, and a take that found the set emptied needs
// no second one to see that it is empty.
func (p *poller) wait(fd uintptr) bool {
	for {
		// As readNoWait: a wait of 0 never blocks.
		n, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, fd, uintptr(unsafe.Pointer(&p.events[0])), uintptr(len(p.events)), 0, 0, 0)
		switch e {
		case 0:
		case unix.EINTR:
			continue
		default:
			p.err = e
			return true
		}
		for _, ev := range p.events[:n] {
			id := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
			p.mu.Lock()
			c := p.conns[id]
			p.mu.Unlock()
			if c != nil {
				// A hang-up, or urgent data (a read stops at its mark),
				// leaves bytes a short read does not take.
				c.ready(ev.Events&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR|unix.EPOLLPRI) != 0)
			}
		}
		if int(n) < len(p.events) {
			return false // emptied
		}
	}
}

// run waits for watched sockets to have something and hands each to its
// connection (wait), until close.
func (p *poller) run() {
	defer close(p.done)
	for {
		err := p.rc.Read(p.waitFn)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			p.set.SetReadDeadline(time.Time{})
			continue // a look asked for (tests): wait again
		}
		if errors.Is(err, os.ErrClosed) {
			return // close
		}
		if err == nil {
			err = p.err
		}
		// Nothing parks from now on (watch refuses), and what is parked
		// is woken to read with a goroutine again.
		p.dead.Store(true)
		p.log.Error("the poller of idle connections failed: every connection keeps its reader from now on", "err", err)
		p.mu.Lock()
		parked := make([]*conn, 0, len(p.conns))
		for _, c := range p.conns {
			parked = append(parked, c)
		}
		p.mu.Unlock()
		for _, c := range parked {
			c.wake()
		}
		return
	}
}

// watch adds c's socket to the set. Called with c.parkMu held, while the
// socket is open, once: the socket stays until forget.
func (p *poller) watch(c *conn) error {
	if p.dead.Load() {
		return errPollerDead
	}
	p.mu.Lock()
	c.pollID = p.next
	p.next++
	p.conns[c.pollID] = c
	p.mu.Unlock()
	ev := unix.EpollEvent{
		Events: unix.EPOLLIN | unix.EPOLLPRI | unix.EPOLLRDHUP | unix.EPOLLET,
		Fd:     int32(uint32(c.pollID)), Pad: int32(uint32(c.pollID >> 32)),
	}
	err := c.control(func(fd int) error { return unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, fd, &ev) })
	if err != nil {
		// Never added: the next attempt adds it again.
		p.mu.Lock()
		delete(p.conns, c.pollID)
		p.mu.Unlock()
		c.pollID = 0
	}
	return err
}

// forget takes c out of the set for good, before its socket is closed.
// Called with c.parkMu held.
func (p *poller) forget(c *conn) {
	if c.pollID == 0 {
		return
	}
	c.control(func(fd int) error { return unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, fd, nil) })
	p.mu.Lock()
	delete(p.conns, c.pollID)
	p.mu.Unlock()
	c.pollID = 0
}

// close stops run and waits for it. The sockets are the connections' to
// close.
func (p *poller) close() {
	p.set.Close()
	<-p.done
}

// control runs fn on the socket's descriptor, which cannot be closed
// meanwhile; it fails if the socket is closed already.
func (c *conn) control(fn func(fd int) error) error {
	sc, ok := c.fr.Conn.(syscall.Conn)
	if !ok {
		return errors.ErrUnsupported
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}
