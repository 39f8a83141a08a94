package transport

// Parking. A connection with nothing to read gives up its reader
// goroutine: at a frame boundary, with nothing buffered (frames.go), the
// reader arms the poller on its socket and returns. When the socket has
// bytes, or closes, the poller starts a reader again, which goes on where
// the last one stopped. Closing a parked connection starts one too, to
// finish it. An idle connection so keeps no goroutine, no stack and no
// read buffer; its pings and its silence are timers (writer.go).

// park hands the socket to the poller, if it can take it. The reader
// calls it, and returns at once when it reports true: from then on
// another reader may run.
func (c *conn) park() bool {
	p := c.srv.poller
	if p == nil {
		return false
	}
	c.parkMu.Lock()
	defer c.parkMu.Unlock()
	if c.closed.Load() || c.unwatched {
		return false
	}
	if err := p.watch(c); err != nil {
		return false
	}
	c.parked = true
	c.srv.metrics.parked.Inc()
	return true
}

// wake starts a reader on a parked connection: it has something to read,
// or it is closing.
func (c *conn) wake() {
	c.parkMu.Lock()
	if !c.parked {
		c.parkMu.Unlock()
		return
	}
	c.parked = false
	c.parkMu.Unlock()
	c.srv.metrics.parked.Dec()
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
