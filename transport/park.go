package transport

// Parking. A connection with nothing to read gives up its reader
// goroutine: at a frame boundary, with nothing buffered (frames.go), the
// reader hands the socket to the poller and returns. When the socket has
// bytes, or closes, the poller reads them itself (frameConn.drain): it
// answers pings, takes pongs and drops the messages the client passes
// back, and starts a reader only for a message gorilla is to read, part
// of one, or the socket's end; that reader goes on where the last one
// stopped, and parks again once it has read all there was. Closing a
// parked connection starts one too, to finish it. An idle connection so
// keeps no goroutine, no stack and no read buffer; its pings and its
// silence are timers (writer.go). A busy one's pongs and passed-back
// messages, most of what a client in a busy room sends, cost a read on
// the poller, which reads every socket that has something in one turn,
// and no goroutine at all.

// park hands the socket to the poller, if it can take it. The reader
// calls it with nothing buffered, and returns at once when it reports
// parkedNow: from then on another reader may run. readFirst says that the
// socket had news while the reader ran, which the poller left to it.
func (c *conn) park() parking {
	p := c.srv.poller
	if p == nil {
		return notParked
	}
	c.parkMu.Lock()
	defer c.parkMu.Unlock()
	if c.closed.Load() || c.unwatched || p.dead.Load() {
		return notParked
	}
	if c.pending {
		c.fr.toEnd = c.pendingToEnd
		c.pending, c.pendingToEnd = false, false
		return readFirst
	}
	if c.pollID == 0 {
		if err := p.watch(c); err != nil {
			return notParked
		}
	}
	c.parked = true
	c.srv.metrics.parked.Inc()
	return parkedNow
}

// ready runs on the poller when c's socket has something to read:
// if c is parked, the poller reads it (frameConn.drain) and starts a
// reader if what it read needs one; if not, the reader running reads it
// before it parks. toEnd says that a short read may not have emptied the
// socket (it closed, or urgent data came: a read stops at its mark): it
// is read until it has nothing.
func (c *conn) ready(toEnd bool) {
	c.parkMu.Lock()
	if !c.parked {
		c.pending = true
		c.pendingToEnd = c.pendingToEnd || toEnd
		c.parkMu.Unlock()
		return
	}
	c.parked = false // the poller's: wake leaves it be
	c.parkMu.Unlock()
	if !c.fr.drain(toEnd) {
		c.parkMu.Lock()
		if !c.closed.Load() && !c.unwatched {
			c.parked = true
			c.parkMu.Unlock()
			return
		}
		c.parkMu.Unlock()
		c.srv.metrics.parked.Dec()
		c.srv.metrics.woken.Inc()
		go c.run(true) // closing: a reader finishes it
		return
	}
	c.srv.metrics.parked.Dec()
	c.srv.metrics.woken.Inc()
	c.srv.turns.run((*readTurn)(c))
}

// readTurn is a turn (turns.go) that reads: the reader the poller starts
// for what it read, on a goroutine that keeps the stack earlier turns
// grew.
type readTurn conn

func (r *readTurn) runTurn() { (*conn)(r).run(false) }

// wake starts a reader on a parked connection: it is closing, or the
// poller failed.
func (c *conn) wake() {
	c.parkMu.Lock()
	if !c.parked {
		c.parkMu.Unlock()
		return
	}
	c.parked = false
	c.parkMu.Unlock()
	c.srv.metrics.parked.Dec()
	c.srv.metrics.woken.Inc()
	go c.run(true)
}

// unwatch takes the socket from the poller for good, before the writer
// closes it, and wakes the connection if it is parked, to finish.
func (c *conn) unwatch() {
	if c.srv.poller == nil {
		return
	}
	c.parkMu.Lock()
	c.unwatched = true
	c.srv.poller.forget(c)
	c.parkMu.Unlock()
	c.wake()
}
