package transport

import (
	"time"

	"github.com/gorilla/websocket"
)

// Two lanes. Document sync, errors and control frames take the lossless
// lane (out): in order, bounded by SendQueue, and a connection that lets
// it fill is closed as a slow consumer. Presence takes a lane of its own
// (pres) that keeps only the newest frame per document, sender and
// channel (a snapshot or goodbye replaces all of its sender's), never
// closes the connection and, past maxPresence frames or maxPresenceBytes,
// drops the oldest.
// A burst of cursors can so never cut a peer's sync. The writer sends the
// lossless lane first. Presence frames stay in the order they were
// queued, which keeps their relay counts rising, as stock clients need.

// maxPresence bounds the frames waiting in one connection's presence lane,
// and maxPresenceBytes their bytes: a batch may carry hundreds of updates.
const (
	maxPresence      = 1024
	maxPresenceBytes = 1 << 20
)

// presKey is what the presence lane keeps one frame of. A frame with no
// channel that is not whole (a batch) is never superseded.
type presKey struct{ doc, sender, channel string }

// presLane is a connection's presence lane. Guarded by conn.wmu.
type presLane struct {
	frames []outFrame      // in order; superseded ones have op 0
	at     map[presKey]int // index in frames of each key's live frame
	live   int             // frames with op != 0
	bytes  int             // the payload bytes of those
}

// take empties the lane and returns its live frames, in order.
func (l *presLane) take() []outFrame {
	out := l.frames[:0:0]
	if l.live > 0 {
		out = make([]outFrame, 0, l.live)
		for _, f := range l.frames {
			if f.op != 0 {
				out = append(out, f)
			}
		}
	}
	l.frames, l.live, l.bytes = nil, 0, 0
	clear(l.at)
	return out
}

// kill marks frame i superseded.
func (l *presLane) kill(i int) {
	l.bytes -= len(l.frames[i].payload)
	l.frames[i].op, l.frames[i].payload = 0, nil
	l.live--
}

// pushPresence queues a presence frame in the presence lane, superseding
// what it makes old, and starts a writer if none runs.
func (c *conn) pushPresence(k presKey, whole bool, payload []byte) {
	c.wmu.Lock()
	if c.closing {
		c.wmu.Unlock()
		return
	}
	l := &c.pres
	if l.at == nil {
		l.at = make(map[presKey]int)
	}
	superseded, dropped := 0, 0
	if whole {
		for i, f := range l.frames {
			if f.op != 0 && f.key.doc == k.doc && f.key.sender == k.sender {
				delete(l.at, f.key)
				l.kill(i)
				superseded++
			}
		}
	} else if i, ok := l.at[k]; ok {
		l.kill(i)
		superseded++
	}
	for i := 0; l.live > 0 && (l.live >= maxPresence || l.bytes+len(payload) > maxPresenceBytes); i++ {
		if f := l.frames[i]; f.op != 0 {
			if l.at[f.key] == i {
				delete(l.at, f.key)
			}
			l.kill(i)
			dropped++
		}
	}
	if len(l.frames) > 2*l.live+64 { // mostly superseded: compact
		bytes, live := l.bytes, l.take()
		l.frames, l.live, l.bytes = live, len(live), bytes
		for i, f := range live {
			if f.key.channel != "" {
				l.at[f.key] = i
			}
		}
	}
	if !whole && k.channel != "" {
		l.at[k] = len(l.frames)
	}
	l.frames = append(l.frames, outFrame{op: websocket.BinaryMessage, payload: payload, at: time.Now(), key: k})
	l.live++
	l.bytes += len(payload)
	start := !c.writing
	c.writing = true
	c.wmu.Unlock()
	if superseded > 0 {
		c.srv.metrics.presLane.WithLabelValues("superseded").Add(float64(superseded))
	}
	if dropped > 0 {
		c.srv.metrics.presLane.WithLabelValues("dropped").Add(float64(dropped))
	}
	if start {
		go c.write()
	}
}
