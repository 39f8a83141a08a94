package transport

import (
	"encoding/binary"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemhq/tandem/transport/wire"
)

// The writer. Frames for a connection wait in its out queue; a goroutine
// writes them only while there are some, and ends when the queue is empty.
// An idle connection so holds no writer goroutine, stack or buffer: its
// pings and its token's expiry are timers that queue a frame or close.
//
// The writer frames messages itself and joins what is queued into one
// write: one system call for the lot when it is behind. Every frame the
// server sends goes through it, pongs and the close frame included, so
// frames never interleave on the socket. One exception: gorilla itself
// answers a frame that breaks the protocol (a bad opcode, a masked bit
// missing) with a close frame of its own, before the reader reports the
// error; the writer's close frame then follows it.

// maxBatch bounds the bytes of frames the writer joins into one write.
const maxBatch = 64 << 10

// closeWait bounds the write of the close frame.
const closeWait = time.Second

// outFrame is one frame to write: a message or a control frame.
type outFrame struct {
	op      int // websocket.BinaryMessage, PingMessage, PongMessage or CloseMessage
	payload []byte
	tail    []byte         // the rest of the payload, written from where it is: a large message's data
	prep    *wire.Prepared // instead of payload: a message shared with other peers, addressed to this one as it is written
	at      time.Time      // when it was queued
}

var (
	batchPool  = sync.Pool{New: func() any { return new([]byte) }}
	framesPool = sync.Pool{New: func() any { return new([]outFrame) }}
)

// startTimers arms the ping and the token's expiry, and makes the reader
// answer pings through the writer.
func (c *conn) startTimers() {
	c.ws.SetPingHandler(func(data string) error {
		c.push(outFrame{op: websocket.PongMessage, payload: []byte(data)})
		return nil
	})
	// The close frame is the writer's to send, with the server's reason.
	c.ws.SetCloseHandler(func(int, string) error { return nil })
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closing {
		return
	}
	c.pinger = time.AfterFunc(c.pingDelay(), c.ping)
	if c.grant != nil && !c.grant.Expires.IsZero() {
		c.expiry = time.AfterFunc(time.Until(c.grant.Expires), func() { c.close(ReasonExpired, false) })
	}
}

func (c *conn) ping() {
	if c.silent() {
		// No pong, no anything: the reader may be parked, or waiting
		// on a frame that never ends; either way the peer is gone.
		c.close(ReasonPingTimeout, false)
		return
	}
	if c.push(outFrame{op: websocket.PingMessage}) {
		c.wmu.Lock()
		if !c.closing {
			c.pinger.Reset(c.pingDelay())
		}
		c.wmu.Unlock()
	}
}

// queue hands a message to the writer, counting it in sent: its frame is
// b followed by tail. A connection whose lossless lane is full (SendQueue
// frames or SendQueueBytes) is too slow to keep and is closed.
func (c *conn) queue(b, tail []byte, sent prometheus.Counter) {
	if c.push(outFrame{op: websocket.BinaryMessage, payload: b, tail: tail}) {
		sent.Inc()
	}
}

// ephemeralBacklog bounds what the lossless lane may hold for a relayed
// ephemeral to join it (or a quarter of SendQueueBytes, if less): past it
// the reader is behind, and an ephemeral for it is dropped.
const ephemeralBacklog = 1 << 20

// push queues f and starts a writer if none runs. It reports false if the
// connection is closing or too slow (and then closes it).
func (c *conn) push(f outFrame) bool { return c.enqueue(f, false) }

// pushEphemeral queues the frame of a relayed ephemeral, unless the lane
// is backed up: past ephemeralBacklog bytes or a quarter of SendQueue
// frames, it is dropped (tandem_messages_dropped_total{reason="slow_reader"}).
// An ephemeral is lossy; a reader slower than others' ephemerals keeps its
// connection, and its sync waits behind no more than the backlog.
func (c *conn) pushEphemeral(b []byte) bool {
	return c.enqueue(outFrame{op: websocket.BinaryMessage, payload: b}, true)
}

// enqueue is push; a lossy frame is dropped instead when the lane is
// backed up (pushEphemeral).
func (c *conn) enqueue(f outFrame, lossy bool) bool {
	c.wmu.Lock()
	if c.closing {
		c.wmu.Unlock()
		return false
	}
	// A message is refused past the byte bound unless the lane is empty
	// (one larger than the bound, a whole document, still goes out);
	// control frames, of 125 bytes at most, count but are not refused.
	size := int64(len(f.payload) + len(f.tail))
	held := c.outBytes + c.writingBytes
	if lossy && held > 0 && (held+size > min(ephemeralBacklog, c.srv.cfg.SendQueueBytes/4) || len(c.out) >= c.srv.cfg.SendQueue/4) {
		c.wmu.Unlock()
		c.srv.metrics.dropped.WithLabelValues(dropSlowReader).Inc()
		return false
	}
	overBytes := f.op == websocket.BinaryMessage && held > 0 && held+size > c.srv.cfg.SendQueueBytes
	if n := len(c.out); n >= c.srv.cfg.SendQueue || overBytes {
		c.wmu.Unlock()
		peer := ""
		if id := c.joinedAs.Load(); id != nil {
			peer = *id
		}
		c.srv.log.Warn("disconnecting slow consumer", "peer", peer, "remote", c.remote(),
			"queued", n, "queued_bytes", held, "frame_bytes", size)
		c.close(ReasonSlow, false)
		return false
	}
	f.at = time.Now()
	c.out = append(c.out, f)
	c.outBytes += size
	c.srv.metrics.queuedBytes.Add(size)
	start := !c.writing
	c.writing = true
	c.wmu.Unlock()
	if start {
		c.srv.turns.run(c)
	}
	return true
}

// close ends the connection once; the first reason wins. With drain, what
// is already queued (an error message, say) goes before the close frame;
// otherwise it is dropped, all but a batch the writer is writing already.
func (c *conn) close(r CloseReason, drain bool) {
	if c.closed.Swap(true) {
		return
	}
	c.reason = r.Name
	c.wmu.Lock()
	if !drain {
		clear(c.out)
		c.out = c.out[:0]
		c.srv.metrics.queuedBytes.Add(-c.outBytes)
		c.outBytes = 0
	}
	c.out = append(c.out, outFrame{op: websocket.CloseMessage, payload: websocket.FormatCloseMessage(r.Code, r.Text)})
	c.closing = true
	start := !c.writing
	c.writing = true
	if c.pinger != nil {
		c.pinger.Stop()
	}
	if c.expiry != nil {
		c.expiry.Stop()
	}
	if c.holdEnd != nil {
		c.holdEnd.Stop()
	}
	c.wmu.Unlock()
	if r == ReasonSlow || r == ReasonPingTimeout {
		// The peer is not reading: a write to it may be blocked
		// for the whole WriteTimeout. Cut it short now.
		c.ws.UnderlyingConn().SetWriteDeadline(time.Now())
	}
	if start {
		c.srv.turns.run(c)
	}
	c.wake() // a parked reader runs to finish the connection
}

// awaitShut waits until the writer has closed the socket.
func (c *conn) awaitShut() {
	<-c.shutChan()
}

// shutChan returns a channel closed once the writer has closed the socket.
func (c *conn) shutChan() <-chan struct{} {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.shutDone == nil {
		c.shutDone = make(chan struct{})
		if c.shut {
			close(c.shutDone)
		}
	}
	return c.shutDone
}

// runTurn implements turn: the writer's turn on the pool (turns.go).
func (c *conn) runTurn() { c.write() }

// write is a writer's turn on the pool (turns.go): it writes what a write
// at once left (writeNow), then what is queued until the queue is empty,
// or until the close frame, after which it closes the socket. The taking
// and the writing are functions of their own, so that neither calls the
// other and a turn's stack rarely has to grow.
func (c *conn) write() {
	bp := batchPool.Get().(*[]byte)
	defer batchPool.Put(bp)
	fp := framesPool.Get().(*[]outFrame)
	defer framesPool.Put(fp)
	var err error          // once a write failed, nothing more is written
	var pending []outFrame // what a write at once left, before anything taken
	if l := c.leftover; l != nil {
		c.leftover = nil
		if len(l.bytes) > 0 {
			c.setWriteDeadline(c.ws.UnderlyingConn(), false)
			_, err = c.ws.UnderlyingConn().Write(l.bytes)
		}
		pending = l.frames
	}
	for {
		batch, oldest, ok := c.take(append((*fp)[:0], pending...))
		pending = nil
		if !ok {
			return
		}
		closing := false
		closing, err = c.send(bp, batch, err)
		clear(batch) // what they point to is written
		if cap(batch) <= 256 {
			*fp = batch[:0]
		}
		if !oldest.IsZero() {
			c.srv.noteSendWait(time.Since(oldest))
		}
		if closing {
			c.unwatch()
			c.ws.Close()
			c.wmu.Lock()
			c.wrote()
			c.shut = true
			if c.shutDone != nil {
				close(c.shutDone)
			}
			c.wmu.Unlock()
			return // writing stays set: no writer starts again
		}
		if err != nil {
			c.close(ReasonWriteFailed, false)
		}
	}
}

// take takes what is to be written, appended to batch (which may hold
// frames already): the lossless lane, then what the feeds hold for this
// connection; and when the oldest of it was queued. It reports false,
// having ended the writer's turn, when there is nothing.
//
//go:noinline
func (c *conn) take(batch []outFrame) ([]outFrame, time.Time, bool) {
	c.wmu.Lock()
	c.wrote()
	feed, feeds, oldest := c.feed, c.feeds, c.feedsAt
	if c.closing {
		feed, feeds = nil, nil // the close frame ends what is written
	}
	if len(batch) == 0 && len(c.out) == 0 && feed == nil {
		c.writing = false
		c.wmu.Unlock()
		return nil, time.Time{}, false
	}
	batch = append(batch, c.out...)
	clear(c.out)
	if feed != nil {
		c.held.Store(false) // what a hold kept is taken now
	}
	c.out, c.feed, c.feeds = nil, nil, nil
	c.writingBytes, c.outBytes = c.outBytes, 0
	c.wmu.Unlock()
	if feed != nil { // after the lossless lane
		n := len(batch)
		batch = c.takePresence(feed, feeds, batch)
		if len(batch) > n {
			c.srv.metrics.sentEphemeral.Add(float64(len(batch) - n))
		}
	} else {
		oldest = time.Time{}
	}
	for _, f := range batch { // the oldest of the frames that say when they were queued
		if !f.at.IsZero() && (oldest.IsZero() || f.at.Before(oldest)) {
			oldest = f.at
		}
	}
	return batch, oldest, true
}

// send writes batch, joining frames into writes of up to maxBatch bytes,
// unless err says an earlier write failed. It reports whether batch ended
// with the close frame, and the first error.
//
//go:noinline
func (c *conn) send(bp *[]byte, batch []outFrame, err error) (closing bool, _ error) {
	nc := c.ws.UnderlyingConn()
	buf := (*bp)[:0]
	for i, f := range batch {
		buf = c.appendFrame(buf, f)
		closing = f.op == websocket.CloseMessage
		if len(buf) < maxBatch && f.tail == nil && !closing && i < len(batch)-1 {
			continue
		}
		if err == nil {
			c.setWriteDeadline(nc, closing)
			if f.tail == nil {
				_, err = nc.Write(buf)
			} else { // one system call, the tail not copied
				bufs := net.Buffers{buf, f.tail}
				_, err = bufs.WriteTo(nc)
			}
		}
		buf = buf[:0]
		if closing {
			break
		}
	}
	if cap(buf) <= 2*maxBatch {
		*bp = buf
	}
	return closing, err
}

// appendFrame appends f to buf as a WebSocket frame: its head, then its
// payload, or the message prepared for many addressed to this peer. A
// tail is not appended: it is written from where it is.
func (c *conn) appendFrame(buf []byte, f outFrame) []byte {
	if f.prep != nil {
		buf = appendFrameHead(buf, f.op, f.prep.Len(c.peerID))
		return f.prep.AppendFrame(buf, c.peerID)
	}
	buf = appendFrameHead(buf, f.op, len(f.payload)+len(f.tail))
	return append(buf, f.payload...)
}

// leftover is what a write at once (writeNow) could not write without
// waiting: the rest of its bytes, then frames it did not try. The writer's
// next turn writes it first.
type leftover struct {
	bytes  []byte
	frames []outFrame
}

// writeNow is a writer's turn taken by the goroutine that made presence
// ready for an idle connection (PresenceReady, then PresenceFlush), without
// the hand-over to a goroutine of the pool: most turns write a frame or two,
// and the hand-over cost a third again as much as the write. It writes
// only what the socket takes without waiting; what is left (a full
// socket, a large message's tail, the close frame, more than maxBatch) and
// anything queued meanwhile go to a turn on the pool, which may wait.
func (c *conn) writeNow() {
	fp := framesPool.Get().(*[]outFrame)
	defer framesPool.Put(fp)
	batch, oldest, ok := c.take((*fp)[:0])
	if !ok {
		return
	}
	bp := batchPool.Get().(*[]byte)
	defer batchPool.Put(bp)
	buf := (*bp)[:0]
	i := 0
	for ; i < len(batch) && len(buf) < maxBatch; i++ {
		f := batch[i]
		if f.tail != nil || f.op == websocket.CloseMessage {
			break
		}
		buf = c.appendFrame(buf, f)
	}
	n, ok, err := 0, true, error(nil)
	if len(buf) > 0 {
		n, ok, err = c.fr.tryWrite(buf)
	}
	if !ok || err != nil {
		n = 0 // the turn writes it all, and meets the error itself
	}
	if n < len(buf) || i < len(batch) {
		c.leftover = &leftover{bytes: slices.Clone(buf[n:]), frames: slices.Clone(batch[i:])}
	}
	clear(batch)
	*fp = batch[:0]
	if cap(buf) <= 2*maxBatch {
		*bp = buf
	}
	if c.leftover == nil && !oldest.IsZero() {
		c.srv.noteSendWait(time.Since(oldest))
	}
	c.wmu.Lock()
	if c.leftover == nil && len(c.out) == 0 && c.feed == nil {
		c.wrote()
		c.writing = false
		c.wmu.Unlock()
		return
	}
	c.wmu.Unlock()
	c.srv.turns.run(c) // the rest: writing stays set
}

// setWriteDeadline bounds the next write: the close frame's by closeWait,
// any other by WriteTimeout. Setting a deadline costs a timer's update, so
// one that still has half of WriteTimeout to run is kept: a write may so
// block for between half of WriteTimeout and all of it.
func (c *conn) setWriteDeadline(nc net.Conn, closing bool) {
	now := time.Now()
	if closing {
		nc.SetWriteDeadline(now.Add(closeWait))
		return
	}
	if wait := c.srv.cfg.WriteTimeout; c.deadline.Sub(now) < wait/2 {
		c.deadline = now.Add(wait)
		nc.SetWriteDeadline(c.deadline)
	}
}

// wrote gives back the bytes of the lossless frames the writer took, now
// written (or failed). The caller holds c.wmu.
func (c *conn) wrote() {
	if c.writingBytes != 0 {
		c.srv.metrics.queuedBytes.Add(-c.writingBytes)
		c.writingBytes = 0
	}
}

// appendFrameHead appends the head of an unmasked WebSocket frame of
// opcode op and n bytes of payload (RFC 6455 section 5.2), as a server
// sends them.
func appendFrameHead(buf []byte, op, n int) []byte {
	fin := byte(0x80 | op)
	switch {
	case n <= 125:
		return append(buf, fin, byte(n))
	case n <= 0xffff:
		return append(buf, fin, 126, byte(n>>8), byte(n))
	}
	buf = append(buf, fin, 127)
	return binary.BigEndian.AppendUint64(buf, uint64(n))
}
