//go:build linux

package transport

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// poller watches parked connections' sockets with an epoll set of its
// own, one-shot: a socket that becomes readable (or closes) is taken out
// of the watch until its reader parks it again. The Go runtime keeps
// watching the socket too, for the reads the reader makes when it runs.
type poller struct {
	epfd, wakefd int
	done         chan struct{}
	log          *slog.Logger
	dead         atomic.Bool // run failed: nothing may park

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
	wakefd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, err
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wakefd, &ev); err != nil { // id 0: the wake
		unix.Close(epfd)
		unix.Close(wakefd)
		return nil, err
	}
	p := &poller{epfd: epfd, wakefd: wakefd, done: make(chan struct{}), log: log, conns: make(map[uint64]*conn), next: 1}
	go p.run()
	return p, nil
}

// run waits for parked sockets to become readable and wakes their
// connections, until close.
func (p *poller) run() {
	defer close(p.done)
	events := make([]unix.EpollEvent, 256)
	for {
		n, err := unix.EpollWait(p.epfd, events, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			// Nothing parks from now on (watch refuses), and what is
			// parked is woken to read with a goroutine again.
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
		for _, ev := range events[:n] {
			id := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
			if id == 0 {
				return // close
			}
			p.mu.Lock()
			c := p.conns[id]
			p.mu.Unlock()
			if c != nil {
				c.wake()
			}
		}
	}
}

// watch arms c's socket, adding it to the set the first time. Called with
// c.parkMu held, while the socket is open.
func (p *poller) watch(c *conn) error {
	if p.dead.Load() {
		return errPollerDead
	}
	op := unix.EPOLL_CTL_MOD
	if c.pollID == 0 {
		p.mu.Lock()
		c.pollID = p.next
		p.next++
		p.conns[c.pollID] = c
		p.mu.Unlock()
		op = unix.EPOLL_CTL_ADD
	}
	ev := unix.EpollEvent{
		Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLONESHOT,
		Fd:     int32(uint32(c.pollID)), Pad: int32(uint32(c.pollID >> 32)),
	}
	err := c.control(func(fd int) error { return unix.EpollCtl(p.epfd, op, fd, &ev) })
	if err != nil && op == unix.EPOLL_CTL_ADD {
		// Never added: the next attempt adds again, rather than
		// modifying what is not there.
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
	var one [8]byte
	one[0] = 1
	unix.Write(p.wakefd, one[:])
	<-p.done
	unix.Close(p.epfd)
	unix.Close(p.wakefd)
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
