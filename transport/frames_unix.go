//go:build unix

package transport

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// readWhenReady reads into a buffer taken from the pool only once the
// socket has bytes: a reader waiting on a quiet socket (mid-message, or
// for ever with parking off) holds none, where a Read into a buffer would
// hold one for the whole wait. It tries the socket first, and only if it has
// nothing waits for it through the runtime's poller, which keeps the read
// deadline, as net.Conn's Read does. A socket that is not a plain one
// (TLS) is read as before.
func (f *frameConn) readWhenReady() (int, error) {
	rc := f.raw
	if rc == nil {
		return f.getBufferAndRead()
	}
	if f.readFn == nil {
		f.readFn = f.readRaw // bound once: a closure made for each read is an allocation for each
	}
	err := rc.Read(f.readFn)
	n, rerr := f.rn, f.rerr
	f.rn, f.rerr = 0, nil
	switch {
	case err != nil: // the deadline, or the socket closed
		return 0, err
	case rerr != nil:
		return 0, &net.OpError{Op: "read", Net: f.LocalAddr().Network(), Source: f.LocalAddr(), Addr: f.RemoteAddr(), Err: os.NewSyscallError("read", rerr)}
	case n <= 0:
		return 0, io.EOF
	}
	return n, nil
}

// readNow reads what the socket holds, without waiting, into a buffer
// taken for it, after what part kept; nothing else is buffered when it is
// called. It reports errWouldBlock, holding no buffer, when the socket
// holds nothing, and io.EOF at its end.
func (f *frameConn) readNow() (int, error) {
	if f.raw == nil {
		return 0, errWouldBlock // not a plain socket: it never parks
	}
	if f.nowFn == nil {
		f.nowFn = f.readRawNow // bound once, as readFn
	}
	err := f.raw.Control(f.nowFn)
	n, rerr := f.rn, f.rerr
	f.rn, f.rerr = 0, nil
	switch {
	case err != nil: // the socket closed
		return 0, err
	case rerr == unix.EAGAIN:
		return 0, errWouldBlock
	case rerr != nil:
		return 0, &net.OpError{Op: "read", Net: f.LocalAddr().Network(), Source: f.LocalAddr(), Addr: f.RemoteAddr(), Err: os.NewSyscallError("read", rerr)}
	case n <= 0:
		return 0, io.EOF
	}
	f.got(n)
	return n, nil
}

// readRawNow is readNow's read, on the socket's descriptor.
func (f *frameConn) readRawNow(fd uintptr) {
	f.getBuffer()
	for {
		f.rn, f.rerr = readNoWait(int(fd), (*f.buf)[f.end:])
		if f.rerr != unix.EINTR {
			break
		}
	}
	if f.rn <= 0 {
		f.stash()
	}
}

// readNoWait and writeNoWait are read(2) and write(2) on a non-blocking
// socket. They never wait, so they skip what the runtime does around a
// system call that may (unix.Read's): marking the thread as in a system
// call, which lets the runtime give its core to another thread that it
// may have to wake for it, then taking it back.
func readNoWait(fd int, p []byte) (int, error)  { return noWait(unix.SYS_READ, fd, p) }
func writeNoWait(fd int, p []byte) (int, error) { return noWait(unix.SYS_WRITE, fd, p) }

// noWait is the system call trap (read or write) on fd and p.
func noWait(trap uintptr, fd int, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, _, e := unix.RawSyscall(trap, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}

// rawWrite is one non-blocking write through a raw connection. fn is its
// write method, bound once: a closure made for each write would be an
// allocation for each.
type rawWrite struct {
	b   []byte
	n   int
	err error
	fn  func(fd uintptr) bool
}

var rawWrites = sync.Pool{New: func() any {
	w := new(rawWrite)
	w.fn = w.write
	return w
}}

func (w *rawWrite) write(fd uintptr) bool {
	for {
		w.n, w.err = writeNoWait(int(fd), w.b)
		if w.err != unix.EINTR {
			break
		}
	}
	return true // never wait: what is left is the writer's turn's
}

// readRaw reads the socket into a buffer taken for it, for readWhenReady,
// leaving the result in rn and rerr; it reports false, giving the buffer
// back, when the socket has nothing yet.
func (f *frameConn) readRaw(fd uintptr) bool {
	f.getBuffer()
	for {
		f.rn, f.rerr = readNoWait(int(fd), (*f.buf)[f.end:])
		if f.rerr != unix.EINTR {
			break
		}
	}
	if f.rerr == unix.EAGAIN {
		f.stash() // nothing yet: wait with no buffer
		return false
	}
	return true
}

// initRaw keeps the socket's raw connection for tryWrite, if it is a
// plain one. It runs before the connection is served.
func (f *frameConn) initRaw() {
	if sc, ok := f.Conn.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			f.raw = rc
		}
	}
}

// tryWrite writes b without waiting for the socket to take more: it
// reports how much the socket took (nothing when its buffer is full), and
// an error that ends the connection. ok is false for a socket that is not
// a plain one (TLS), which it leaves alone. Only the writer calls it.
func (f *frameConn) tryWrite(b []byte) (n int, ok bool, err error) {
	if f.raw == nil {
		return 0, false, nil
	}
	w := rawWrites.Get().(*rawWrite)
	w.b = b
	err = f.raw.Write(w.fn)
	n, werr := w.n, w.err
	*w = rawWrite{fn: w.fn}
	rawWrites.Put(w)
	switch {
	case err != nil:
		return 0, true, err
	case werr == unix.EAGAIN:
		return 0, true, nil
	case werr != nil:
		return 0, true, &net.OpError{Op: "write", Net: f.LocalAddr().Network(), Source: f.LocalAddr(), Addr: f.RemoteAddr(), Err: os.NewSyscallError("write", werr)}
	}
	return max(n, 0), true, nil
}
