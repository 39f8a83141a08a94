package transport

import (
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// errWouldBlock is readNow's when the socket holds nothing.
var errWouldBlock = errors.New("the socket holds nothing to read")

// The socket as the reader sees it: gorilla/websocket reads through it
// and parses frames as ever, but it never hands gorilla a byte past the
// frame gorilla is reading. So once gorilla has read a message, nothing
// waits in gorilla's buffer, and the reader may give up its goroutine
// until the socket has more (park.go): what an idle connection keeps is
// no goroutine, no stack and no read buffer.
//
// Between frames it reads the next frame's header itself, and answers
// pings, takes pongs and drops the messages a client passes back there
// (passedon.go): none of them costs a trip into gorilla. While the
// connection is parked, the poller does the same without waking a reader
// (drain), and starts one only for what gorilla is to read. Every other
// frame, close frames and malformed ones included, is gorilla's to read
// and judge.
//
// The bytes of a frame's header, or of a ping or pong, that came without
// the rest wait in the connection itself (part), not in a buffer: a peer
// that sends a frame's first bytes and stops, or drips them, holds what
// an idle connection holds, no buffer charged to the read budget and no
// reader, however long it takes.

// readChunk is how much the reader asks the socket for at a time, into a
// buffer taken from a pool only while bytes wait in it.
const readChunk = 4 << 10

// maxPart is the most a frame not yet whole keeps in frameConn.part: a
// header (14 bytes at most) and a ping's or pong's payload (125).
const maxPart = 14 + 125

// clockBase makes the monotonic times frameConn keeps as integers.
var clockBase = time.Now()

// monotonic is the time since clockBase, immune to the wall clock's steps.
func monotonic() int64 { return int64(time.Since(clockBase)) }

var chunkPool = sync.Pool{New: func() any { b := make([]byte, readChunk); return &b }}

// frameConn wraps the socket gorilla reads from. Only the connection's
// reader calls Read and await; lastRead is read by the ping timer.
type frameConn struct {
	net.Conn
	buf      *[]byte // bytes read and not yet handed on are (*buf)[off:end]; nil when none but part's
	off, end int
	part     [maxPart]byte // with no buf, the first nPart bytes of a frame not yet whole (stash)
	nPart    uint8
	left     int64        // bytes of the current frame not yet handed to gorilla
	mustRead bool         // set on waking: read the socket before parking again
	unread   bool         // the socket may hold bytes that no read took: read them, without waiting, before parking
	toEnd    bool         // with unread: a short read does not prove the socket empty (ready); read until it has nothing
	err      error        // what ended the poller's read (drain), for the reader
	lastRead atomic.Int64 // when the socket last gave bytes (monotonic)

	control controlHandler  // takes the pings and pongs read between frames; nil drops them
	budget  *readBudget     // charged the buffer's bytes while it is taken; may be nil
	raw     syscall.RawConn // the socket, for the writer's tryWrite; nil when not a plain one

	// The reader's raw reads (readWhenReady, readNow; Unix): the
	// functions, bound once, and what the last call read.
	readFn func(fd uintptr) bool
	nowFn  func(fd uintptr)
	rn     int
	rerr   error

	// The deadline of the message gorilla is reading (readMessage), set
	// on the socket at the first read that may wait on it: a message
	// that has arrived whole costs no timer.
	msgDeadline time.Time // zero between messages
	armed       bool      // msgDeadline is set on the socket
}

// controlHandler takes the control frames frameConn reads itself, and
// the messages a client passes back.
type controlHandler interface {
	onPing(payload []byte) // the payload, unmasked and copied, to echo in a pong
	onPong()
	// owed reports whether the connection is owed messages passed back.
	owed() bool
	// passedOn reports whether a binary message (its payload unmasked,
	// only for the call's time) is one the connection was sent and
	// passes back, and then counts it dropped (passedon.go).
	passedOn(payload []byte) bool
}

// maxPassedOn bounds the messages frame looks at for one passed back: a
// presence message, or a small ephemeral.
const maxPassedOn = 4 << 10

// passedOn unmasks a buffered binary message in place, asks the
// connection whether it is one passed back, and masks it again for
// gorilla if not.
func (f *frameConn) passedOn(key, payload []byte) bool {
	if f.control == nil || !f.control.owed() {
		return false
	}
	mask(key, payload)
	if f.control.passedOn(payload) {
		return true
	}
	mask(key, payload)
	return false
}

// mask masks or unmasks a frame's payload with its key (RFC 6455 section
// 5.3): the same operation both ways.
func mask(key, payload []byte) {
	for i := range payload {
		payload[i] ^= key[i%4]
	}
}

func newFrameConn(nc net.Conn, budget *readBudget) *frameConn {
	f := &frameConn{Conn: nc, budget: budget}
	f.lastRead.Store(monotonic())
	return f
}

// Read implements net.Conn for gorilla: never past the end of a frame.
func (f *frameConn) Read(p []byte) (int, error) {
	if !f.armed && !f.msgDeadline.IsZero() && (f.left == 0 || f.off == f.end) {
		f.Conn.SetReadDeadline(f.msgDeadline) // this read may wait on the socket
		f.armed = true
	}
	if f.left == 0 {
		// Gorilla wants the next frame: a continuation, or the frame
		// after a control frame it read. Wait here, with a goroutine:
		// only between messages may the reader park.
		if _, err := f.await(nil); err != nil {
			return 0, err
		}
	}
	if int64(len(p)) > f.left {
		p = p[:f.left]
	}
	var n int
	var err error
	if f.off < f.end {
		n = copy(p, (*f.buf)[f.off:f.end])
		f.off += n
		if f.off == f.end {
			f.putBuffer()
		}
	} else {
		n, err = f.Conn.Read(p) // a large payload goes straight to gorilla
		if n > 0 {
			f.lastRead.Store(monotonic())
		}
	}
	f.left -= int64(n)
	return n, err
}

// startMessage sets the deadline of the message gorilla is to read.
func (f *frameConn) startMessage(deadline time.Time) {
	f.msgDeadline, f.armed = deadline, false
}

// endMessage takes the message's deadline off the socket: waiting for the
// next message takes as long as it takes.
func (f *frameConn) endMessage() {
	if f.armed {
		f.Conn.SetReadDeadline(time.Time{})
	}
	f.msgDeadline, f.armed = time.Time{}, false
}

// parking is what park did with the connection.
type parking int

const (
	notParked parking = iota // the reader waits on the socket itself
	parkedNow                // the poller has the connection: the reader returns
	readFirst                // the socket had news while the reader ran: read it, without waiting, then park
)

// await reads until the header of a frame for gorilla is buffered,
// answering pings, taking pongs and dropping messages passed back on the
// way. With park set, when nothing is buffered but the start of a frame
// (kept in part), and the socket was read since mustRead was set, it
// calls park instead of waiting on the socket, and reports true if park
// took the connection.
func (f *frameConn) await(park func() parking) (parked bool, err error) {
	for {
		if f.left > 0 {
			return false, nil
		}
		if f.off == f.end {
			if err := f.err; err != nil { // the poller's read ended the socket
				f.err = nil
				return false, err
			}
			if park != nil && !f.mustRead {
				if !f.unread {
					switch park() {
					case parkedNow:
						return true, nil
					case readFirst:
						f.unread = true
					}
				}
				if f.unread { // read what the socket holds, without waiting, before parking
					n, err := f.readNow()
					if err != nil && err != errWouldBlock {
						return false, err
					}
					// A full read may have left more; with toEnd, any read.
					f.unread = f.full() || n > 0 && f.toEnd
					f.toEnd = f.toEnd && f.unread
					continue
				}
			}
		}
		if f.frame(park != nil) {
			continue // a ping or pong, or a message passed back, taken: look again
		}
		if f.left > 0 {
			return false, nil
		}
		if park != nil && !f.mustRead && f.off < f.end && f.stash() {
			continue // the start of a frame, kept in part: park with it
		}
		if err := f.fill(); err != nil {
			return false, err
		}
	}
}

// maxDrainReads bounds the reads drain makes of one socket for one event
// of the poller: a socket that has more is a busy one, whose reader goes
// on, and the poller goes on to the others.
const maxDrainReads = 4

// drain reads what a parked connection's socket holds, without waiting,
// and takes what the reader would take between messages without gorilla:
// pings, pongs and messages passed back, each buffered whole. It runs on
// the poller. It reports whether a reader is needed: the header of a
// frame for gorilla is buffered, or the socket ended (kept in err for the
// reader), or it holds more than drain reads at once (unread). The start
// of a frame that has not all come is kept in part: the rest wakes the
// poller again. A short
// read empties the socket, so one read does unless toEnd (the peer
// closed, the socket failed, or urgent data came, at whose mark a read
// stops): then it reads on until the socket has nothing, and so does the
// reader it starts.
func (f *frameConn) drain(toEnd bool) bool {
	f.toEnd = toEnd
	for range maxDrainReads {
		_, err := f.readNow()
		switch {
		case err == errWouldBlock:
			f.unread, f.toEnd = false, false
			return false
		case err != nil:
			f.err = err
			return true
		}
		f.unread = f.full() || f.toEnd
		for f.frame(true) {
		}
		if f.left > 0 || !f.stash() {
			return true
		}
		if !f.unread {
			return false
		}
	}
	return true
}

func isTimeout(err error) bool {
	if err == nil {
		return false // before the target below, which escapes
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// frame looks at the buffered header. For a ping or pong buffered whole
// it handles and drops it and reports true; so too, between messages,
// for a small binary message buffered whole that the connection was sent
// and passes back (controlHandler.passedOn), which gorilla then never
// reads. For any other frame whose header is buffered it sets left to
// the frame's size.
func (f *frameConn) frame(between bool) bool {
	b := f.buffered()
	if len(b) < 2 {
		return false
	}
	size := headerSize(b)
	if len(b) < size {
		return false
	}
	op, masked, fin := b[0]&0x0f, b[1]&0x80 != 0, b[0]&0xf0 == 0x80
	n := int64(b[1] & 0x7f)
	switch n {
	case 126:
		n = int64(binary.BigEndian.Uint16(b[2:]))
	case 127:
		u := binary.BigEndian.Uint64(b[2:])
		n = int64(min(u, 1<<62))
	}
	control := (op == 0x9 || op == 0xa) && fin && masked && n <= 125
	if !control {
		if between && op == 0x2 && fin && masked && n <= maxPassedOn && int64(len(b)) >= int64(size)+n && f.passedOn(b[size-4:size], b[size:size+int(n)]) {
			f.off += size + int(n)
			if f.off == f.end {
				f.putBuffer()
			}
			return true
		}
		f.left = int64(size) + n // gorilla's, whatever it is
		return false
	}
	if int64(len(b)) < int64(size)+n {
		return false // the rest of the ping or pong is on its way
	}
	payload := b[size : size+int(n)]
	mask(b[size-4:size], payload)
	switch {
	case f.control == nil:
	case op == 0x9:
		f.control.onPing(append([]byte(nil), payload...))
	default:
		f.control.onPong()
	}
	f.off += size + int(n)
	if f.off == f.end {
		f.putBuffer()
	}
	return true
}

// headerSize is the size of the frame header that starts b, which holds
// at least two bytes.
func headerSize(b []byte) int {
	size := 2
	switch b[1] & 0x7f {
	case 126:
		size += 2
	case 127:
		size += 8
	}
	if b[1]&0x80 != 0 {
		size += 4
	}
	return size
}

func (f *frameConn) buffered() []byte {
	if f.buf == nil {
		return nil
	}
	return (*f.buf)[f.off:f.end]
}

// fill reads what the socket has into the buffer, after what waits there.
// It waits holding no buffer (readWhenReady), what waits kept in part.
func (f *frameConn) fill() error {
	var n int
	var err error
	if f.stash() {
		n, err = f.readWhenReady()
	} else {
		f.compact()
		n, err = f.Conn.Read((*f.buf)[f.end:])
	}
	f.got(n)
	if n > 0 {
		return nil
	}
	return err
}

// compact moves what waits in the buffer to its start.
func (f *frameConn) compact() {
	if f.off > 0 {
		f.end = copy(*f.buf, (*f.buf)[f.off:f.end])
		f.off = 0
	}
}

// got notes n bytes read into the buffer after what waited there.
func (f *frameConn) got(n int) {
	f.end += max(n, 0)
	if n > 0 {
		f.mustRead = false
		f.lastRead.Store(monotonic())
	}
	if f.off == f.end {
		f.putBuffer()
	}
}

// getBufferAndRead takes a buffer and reads the socket into it, holding
// it while it waits.
func (f *frameConn) getBufferAndRead() (int, error) {
	f.getBuffer()
	return f.Conn.Read((*f.buf)[f.end:])
}

// getBuffer gets a buffer from the pool, holding what part kept.
func (f *frameConn) getBuffer() {
	f.buf = chunkPool.Get().(*[]byte)
	f.off, f.end = 0, copy(*f.buf, f.part[:f.nPart])
	f.nPart = 0
	if f.budget != nil {
		f.budget.charge(readChunk)
	}
}

// stash keeps what waits in the buffer, the start of a frame not yet
// whole, in part, and gives the buffer back. It reports whether no buffer
// is held now: false when what waits is more than part takes.
func (f *frameConn) stash() bool {
	if f.buf == nil {
		return true
	}
	b := f.buffered()
	if len(b) > maxPart {
		return false
	}
	f.nPart = uint8(copy(f.part[:], b))
	f.putBuffer()
	return true
}

// full reports whether the last read filled the buffer: the socket may
// hold more.
func (f *frameConn) full() bool { return f.buf != nil && f.end == len(*f.buf) }

// putBuffer gives the empty buffer back to the pool.
func (f *frameConn) putBuffer() {
	if f.buf != nil {
		chunkPool.Put(f.buf)
		f.buf, f.off, f.end = nil, 0, 0
		if f.budget != nil {
			f.budget.release(readChunk)
		}
	}
}
