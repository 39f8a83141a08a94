package transport

import (
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// The read budget: what the node's readers may hold at once of the
// messages they read (Config.ReadBudgetBytes). A message is read into
// chunks that grow with what has arrived, each charged before it is
// made, and joined once the message is whole; its bytes are given back
// once it is handled. A peer that starts a large frame and stops, or
// drips it, so holds what it sent and no more, within the budget, until
// the message's deadline (Config.MessageReadTimeout) cuts it off.
//
// The chunks sockets are read into between messages (frames.go), and the
// first chunk of a message, are charged without waiting: they are at
// most readChunk each, one per reading connection, so small messages go
// on whatever large ones wait for. Beyond that a reader waits for room,
// its socket unread; one that waits too long is closed (ReasonReadBusy).

// maxChunk bounds a message's chunks: what a reader holds beyond what has
// arrived is at most one chunk, a quarter of what arrived before it or
// maxChunk, whichever is less.
const maxChunk = 64 << 10

// gorillaBuffer is gorilla's read buffer (Server.upgrader): the bytes of a
// frame it may have read past the frame's head.
const gorillaBuffer = 128

var (
	errBudgetWait = errors.New("no room in the read budget in time")
	errClosing    = errors.New("the connection is closing")
)

// readBudget is the node's read budget. Its methods are safe for
// concurrent use.
type readBudget struct {
	limit   int64
	held    *atomic.Int64 // bytes charged: tandem_read_buffer_bytes
	waiting atomic.Int32  // readers in acquire: release wakes them

	mu    sync.Mutex    // guards freed
	freed chan struct{} // closed when bytes come back while readers wait; nil when none has asked
}

// charge takes n bytes without waiting.
func (b *readBudget) charge(n int64) { b.held.Add(n) }

// release gives n bytes back and wakes the readers waiting for room.
func (b *readBudget) release(n int64) {
	if n == 0 {
		return
	}
	b.held.Add(-n)
	if b.waiting.Load() == 0 {
		return
	}
	b.mu.Lock()
	if b.freed != nil {
		close(b.freed)
		b.freed = nil
	}
	b.mu.Unlock()
}

// take takes n bytes if the budget has room for them.
func (b *readBudget) take(n int64) bool {
	for {
		h := b.held.Load()
		if h+n > b.limit {
			return false
		}
		if b.held.CompareAndSwap(h, h+n) {
			return true
		}
	}
}

// acquire takes n bytes, waiting for room at most wait and not past
// deadline (errBudgetWait), or until done is closed (errClosing).
func (b *readBudget) acquire(n int64, wait time.Duration, deadline time.Time, done <-chan struct{}) error {
	if b.take(n) {
		return nil
	}
	// Counted before the channel is taken and room looked for again: a
	// release that does not see the count came before that look.
	b.waiting.Add(1)
	defer b.waiting.Add(-1)
	var timer *time.Timer
	for {
		b.mu.Lock()
		if b.freed == nil {
			b.freed = make(chan struct{})
		}
		freed := b.freed
		b.mu.Unlock()
		if b.take(n) {
			return nil
		}
		if timer == nil {
			timer = time.NewTimer(min(wait, time.Until(deadline)))
			defer timer.Stop()
		}
		select {
		case <-freed:
		case <-timer.C:
			return errBudgetWait
		case <-done:
			return errClosing
		}
	}
}

// readMessage reads the message r holds, charging its bytes to the read
// budget as they arrive. It returns the message and what was charged for
// it, to release once it is handled; or, having released it, the reason
// to close the connection.
func (c *conn) readMessage(r io.Reader) (data []byte, charged int64, _ CloseReason, ok bool) {
	limit := c.srv.cfg.MaxMessageBytes
	b := c.srv.budget
	now := time.Now()
	deadline := now.Add(c.srv.cfg.MessageReadTimeout)
	// A wait for room leaves the socket unread: the ping would call one
	// longer than three intervals silence. Each wait is timed from its
	// start, so a chunk late in a long message waits as long as the first.
	maxWait := 3 * c.srv.cfg.PingInterval
	c.fr.startMessage(deadline)
	defer c.fr.endMessage()
	fail := func(r CloseReason) ([]byte, int64, CloseReason, bool) {
		b.release(charged)
		return nil, 0, r, false
	}
	var (
		full  [][]byte // the chunks filled
		cur   []byte   // the chunk being filled
		total int64    // bytes read
	)
	for {
		if total+c.fr.left > limit {
			return fail(ReasonTooBig) // declared by the frame: not read
		}
		if len(cur) == cap(cur) {
			if cur != nil {
				full = append(full, cur)
			}
			n := chunkSize(total, c.fr.left, limit)
			if charged+n <= readChunk {
				b.charge(n)
			} else if err := b.acquire(n, maxWait, deadline, c.shutChan()); err != nil {
				if errors.Is(err, errBudgetWait) {
					c.srv.log.Warn("closing a connection the read budget cannot serve", "peer", c.peerID, "remote", c.remote(),
						"read", total, "budget", b.limit)
					return fail(ReasonReadBusy)
				}
				return fail(ReasonShutdown) // closing: the first reason stands
			}
			charged += n
			cur = make([]byte, 0, n)
		}
		n, err := r.Read(cur[len(cur):cap(cur)])
		cur = cur[:len(cur)+n]
		total += int64(n)
		if total > limit {
			return fail(ReasonTooBig)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			if isTimeout(err) {
				return fail(ReasonReadTimeout) // the message's deadline: the only one set while reading it
			}
			return fail(readFailure(err))
		}
	}
	if len(full) == 0 {
		return cur, charged, CloseReason{}, true
	}
	// Joined: both are held for the copy's time, both charged.
	b.charge(total)
	data = make([]byte, 0, total)
	for _, f := range full {
		data = append(data, f...)
	}
	data = append(data, cur...)
	b.release(charged)
	return data, total, CloseReason{}, true
}

// chunkSize is the size of the next chunk of a message of which total
// bytes have been read, left more are declared by the frame being read
// (some of the frame may be in gorilla's buffer), and at most limit may
// come: one byte past it shows the message too big.
func chunkSize(total, left, limit int64) int64 {
	n := min(max(total/4, readChunk), maxChunk, left+gorillaBuffer)
	return max(min(n, limit+1-total), 1)
}
