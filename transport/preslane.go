package transport

import (
	"slices"
	"strings"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tandemhq/tandem/awareness"
)

// Two lanes. Document sync, errors and control frames take the lossless
// lane (out): in order, bounded by SendQueue frames and SendQueueBytes
// bytes, and a connection that lets it fill is closed as a slow consumer. Presence takes a lane of its own
// (pres) that keeps only the newest frame per document, sender and
// channel (a snapshot or goodbye replaces all of its sender's), never
// closes the connection and, past maxPresence frames or maxPresenceBytes,
// drops the oldest.
// A burst of cursors can so never cut a peer's sync. The writer sends the
// lossless lane first. Presence frames stay in the order they were
// queued, which keeps their relay counts rising, as stock clients need.
//
// A batch frame carries many peers' values, so it is not replaced as it
// is queued. The writer freshens what it takes instead: a value that a
// newer one in the same take makes old is cut out of its batch, which is
// encoded again for this connection only. A connection that keeps up
// takes a frame or two at a time, young ones, and is never freshened; one
// that lags takes its whole backlog at once and gets the newest value of
// each peer and channel once, not every value since it fell behind.

// maxPresence bounds the frames waiting in one connection's presence lane,
// and maxPresenceBytes their bytes: a batch may carry hundreds of updates.
const (
	maxPresence      = 1024
	maxPresenceBytes = 1 << 20
)

// freshenAfter is how long the oldest frame of a take must have waited for
// the writer to freshen it: younger values are as fresh as a presence
// tick (50 ms by default) makes them anyway, and a connection that keeps
// up is spared the work.
const freshenAfter = 50 * time.Millisecond

// presKey is what the presence lane keeps one frame of. A frame with no
// channel that is not whole (a batch) is never superseded.
type presKey struct{ doc, sender, channel string }

// presMeta is what a presence message replaces of its sender's older
// ones (awareness.Message): its channel's (key.channel), the channels of
// a partial snapshot and an older snapshot of the same channels, or
// everything (whole), except that only a goodbye replaces a goodbye.
type presMeta struct {
	channels []string
	whole    bool
	goodbye  bool
}

func metaOf(m awareness.Message) presMeta {
	return presMeta{channels: m.Channels, whole: m.Whole, goodbye: m.Goodbye}
}

// keyOf is the key of a single presence frame: the channel of an update,
// the set of channels of a partial snapshot (whose Channels come sorted),
// none for a whole one.
func keyOf(documentID string, m awareness.Message) presKey {
	k := presKey{documentID, m.SenderID, m.Channel}
	if len(m.Channels) > 0 {
		k.channel = "\x01" + strings.Join(m.Channels, "\x01")
	}
	return k
}

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

// discard takes frame i out of the lane, superseded or dropped: its slot
// stays, with op 0, until take or a compaction passes it by.
func (l *presLane) discard(i int) {
	l.bytes -= len(l.frames[i].payload)
	l.frames[i].op, l.frames[i].payload, l.frames[i].batch = 0, nil, nil
	l.live--
}

// pushPresence queues a presence frame in the presence lane, superseding
// what it makes old, and starts a writer if none runs.
func (c *conn) pushPresence(k presKey, meta presMeta, payload []byte, batch *awareness.Batch) {
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
	switch {
	case meta.whole:
		for i, f := range l.frames {
			if f.op != 0 && f.key.doc == k.doc && f.key.sender == k.sender && (meta.goodbye || !f.meta.goodbye) {
				if l.at[f.key] == i {
					delete(l.at, f.key)
				}
				l.discard(i)
				superseded++
			}
		}
	case len(meta.channels) > 0:
		for _, ch := range meta.channels {
			ck := presKey{k.doc, k.sender, ch}
			if i, ok := l.at[ck]; ok {
				delete(l.at, ck)
				l.discard(i)
				superseded++
			}
		}
		fallthrough // and an older snapshot of the same channels (its key)
	case k.channel != "":
		if i, ok := l.at[k]; ok {
			l.discard(i)
			superseded++
		}
	}
	// Past a bound the oldest frames go; a goodbye or a whole snapshot
	// only when nothing else is left, as losing one leaves a ghost or a
	// nameless peer behind.
	over := func() bool { return l.live > 0 && (l.live >= maxPresence || l.bytes+len(payload) > maxPresenceBytes) }
	for pass := 0; pass < 2 && over(); pass++ {
		for i := 0; i < len(l.frames) && over(); i++ {
			if f := l.frames[i]; f.op != 0 && (pass == 1 || !f.meta.whole) {
				if l.at[f.key] == i {
					delete(l.at, f.key)
				}
				l.discard(i)
				dropped++
			}
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
	if k.channel != "" {
		l.at[k] = len(l.frames)
	}
	l.frames = append(l.frames, outFrame{op: websocket.BinaryMessage, payload: payload, at: time.Now(), key: k, meta: meta, batch: batch})
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

// freshen drops from frames, what one write took from the presence lane
// (its oldest having waited freshenAfter or more), every message that a
// newer one among them replaces (presMeta). A batch that loses some of its
// messages is encoded again without them (and without the recipient's
// own); one that loses all is dropped. Order is kept, so relay counts
// still rise. It runs in the writer, outside the lane's lock.
func (c *conn) freshen(frames []outFrame) []outFrame {
	if len(frames) < 2 || !slices.ContainsFunc(frames, func(f outFrame) bool { return f.batch != nil }) {
		return frames // no batch, or nothing newer than it
	}
	var r replaced
	superseded := 0
	keep := len(frames)
	for i := len(frames) - 1; i >= 0; i-- {
		f := frames[i]
		if f.batch == nil {
			if f.key.sender != "" && r.stale(f.key, f.meta) {
				frames[i].op = 0
				keep--
				superseded++
			}
			continue
		}
		msgs := f.batch.Messages
		live := make([]bool, len(msgs))
		n, old := 0, 0
		for j := len(msgs) - 1; j >= 0; j-- {
			m := msgs[j]
			if m.SenderID == c.peerID {
				continue // the recipient ignores its own
			}
			if r.stale(presKey{f.key.doc, m.SenderID, m.Channel}, metaOf(m)) {
				old++
				continue
			}
			live[j] = true
			n++
		}
		switch {
		case old == 0:
			continue
		case n == 0:
			frames[i].op = 0
			keep--
			superseded += old
			continue
		}
		kept := make([]awareness.Message, 0, n)
		for j, m := range msgs {
			if live[j] {
				kept = append(kept, m)
			}
		}
		payload, err := c.srv.encodeBatch(f.key.doc, kept)
		if err != nil {
			c.srv.log.Error("encode presence batch", "err", err)
			continue // the frame as it was
		}
		frames[i].payload = payload
		superseded += old
	}
	if superseded > 0 {
		c.srv.metrics.presLane.WithLabelValues("superseded").Add(float64(superseded))
	}
	if keep == len(frames) {
		return frames
	}
	out := frames[:0]
	for _, f := range frames {
		if f.op != 0 {
			out = append(out, f)
		}
	}
	return out
}

// replaced is what freshen has met, walking a take from its newest
// message back: the (document, sender, channel) keys with a newer value,
// and the senders whose newer whole message replaces all their older
// ones (true if that was a goodbye).
type replaced struct {
	seen  map[presKey]struct{}
	ended map[presKey]bool // by document and sender, channel ""
}

// stale reports whether a newer message met already replaces this one,
// and records what this one replaces of the older ones.
func (r *replaced) stale(k presKey, m presMeta) bool {
	if r.seen == nil {
		r.seen, r.ended = make(map[presKey]struct{}), make(map[presKey]bool)
	}
	s := presKey{doc: k.doc, sender: k.sender}
	if byGoodbye, ok := r.ended[s]; ok {
		if m.goodbye && !byGoodbye {
			r.ended[s] = true // it left, then came back: the leave stays
			return false
		}
		return true
	}
	switch {
	case m.whole:
		r.ended[s] = m.goodbye
		return false
	case len(m.channels) > 0:
		all := true
		for _, ch := range m.channels {
			ck := presKey{k.doc, k.sender, ch}
			if _, ok := r.seen[ck]; !ok {
				all = false
				r.seen[ck] = struct{}{}
			}
		}
		return all
	case k.channel == "":
		return false
	}
	if _, ok := r.seen[k]; ok {
		return true
	}
	r.seen[k] = struct{}{}
	return false
}
