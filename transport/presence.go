package transport

import (
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tandemhq/tandem/awareness"
	"github.com/tandemhq/tandem/transport/wire"
)

// Presence frames. What a connection is to be sent of a document's
// presence waits in the document's feed (awareness/feed.go), which decides
// what replaces what. The connection only notes which feeds have
// something for it, and its writer takes from them when it is about to
// write: when it is idle, on the goroutine that posted, once that has
// told every member of the post and let the goroutines waiting for a core
// run (awareness.Flusher), as far as the socket takes it without waiting
// (writeNow); when it is busy (a write in progress, a full socket), after
// that. Either way all that piled up meanwhile goes in the same write, as
// one frame per message (one batch frame per document for a client that
// takes batches), each peer's newest value only. At light load nothing
// waits: no goroutine waits for a core, and each update is a write of
// its own. The busier the node, the longer the goroutines that run first,
// the more each write carries, and the less each delivery costs. Presence
// so never waits for company or a timer, and never fills the lossless
// lane: a connection cannot be closed for the presence it is sent, and
// holds none of it itself.
//
// Each client is also sent presence at its own pace. A stock client
// passes back every ephemeral it is sent, once it has read it
// (passedon.go): so while one that passes back has not passed back the
// presence it was last sent, what comes for it waits in the feeds (hold),
// each peer's newest value only, and goes in one write once it has
// (release). A client that reads as fast as presence comes owes nothing
// when the next comes, and is written each at once; a busy one gets
// fewer, fuller writes, and no stale values to read. A client that has
// passed back nothing of what it was last sent for Config.maxHold (1 s)
// is written to at once again, until it passes something back; one that
// passes nothing back is never held.

// PresenceReady implements awareness.Peer: f has presence for this
// connection, which the writer takes. If no writer runs, the caller takes
// the writer's place, and writes in PresenceFlush.
func (c *conn) PresenceReady(f *awareness.Feed) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closing {
		return
	}
	if c.feed == nil {
		c.feed, c.feedsAt = f, time.Now()
	} else {
		c.feeds = append(c.feeds, f)
	}
	if !c.writing {
		if c.passing.Load() && c.presOwed.Load() > c.releaseAt.Load() {
			if h := c.srv.holdHook.Load(); h != nil {
				(*h)(c)
			}
			if c.hold() {
				return
			}
		}
		c.writing, c.told = true, true
	}
}

// hold leaves what the feeds have for the connection in them until the
// client has passed back the presence it was last sent (release), or
// Config.maxHold has passed: then a client that has not is written to at
// once again, until it passes something back. It reports false, holding
// nothing, if the client has passed it back meanwhile. The caller holds
// c.wmu.
func (c *conn) hold() bool {
	if c.held.Load() {
		return true
	}
	// Set before presOwed is looked at again: a pass-back that lowers it
	// after this look sees held, and releases (presencePassedOn).
	c.held.Store(true)
	if c.presOwed.Load() <= c.releaseAt.Load() {
		c.held.Store(false)
		return false
	}
	if c.holdEnd == nil {
		c.holdEnd = time.AfterFunc(c.srv.cfg.maxHold, c.holdExpired)
	} else {
		c.holdEnd.Reset(c.srv.cfg.maxHold)
	}
	return true
}

// release writes what a hold kept, at once (writeNow), unless the
// writer has taken it meanwhile.
func (c *conn) release() {
	c.wmu.Lock()
	if !c.held.Load() || c.writing || c.closing {
		c.wmu.Unlock()
		return
	}
	c.held.Store(false)
	c.writing = true
	c.wmu.Unlock()
	c.writeNow()
}

// holdExpired ends a hold the client has not ended in time: it no longer
// counts as passing back until it passes something back.
func (c *conn) holdExpired() {
	if c.held.Load() {
		c.passing.Store(false)
		c.release()
	}
}

// PresenceFlush implements awareness.Flusher: the goroutine that took the
// writer's place in PresenceReady (this one or another that told this
// connection meanwhile) writes what it can at once (writeNow), what was
// posted since included.
func (c *conn) PresenceFlush() {
	c.wmu.Lock()
	told := c.told
	c.told = false
	c.wmu.Unlock()
	if told {
		c.writeNow()
	}
}

// PresenceBatches implements awareness.Batcher: the client asked for
// batches in its join.
func (c *conn) PresenceBatches() bool { return c.batches }

// takePresence takes what the feeds hold for this connection, as frames
// appended to out: feed's, then those of feeds. It runs in the writer,
// without c.wmu. Until the client has passed them back, presence posted
// for it waits in the feeds (PresenceReady).
func (c *conn) takePresence(feed *awareness.Feed, feeds []*awareness.Feed, out []outFrame) []outFrame {
	before := c.presOwed.Load()
	out = c.appendDelivery(out, feed.Document(), feed.Take(c))
	for _, f := range feeds {
		out = c.appendDelivery(out, f.Document(), f.Take(c))
	}
	c.releaseAt.Store(before)
	return out
}

// appendDelivery appends the frames of d to out: its batch, or each of
// its messages. A message the feed sends to many peers is encoded once,
// by the first of them to take it; the writer splices in each one's
// targetId.
func (c *conn) appendDelivery(out []outFrame, documentID string, d awareness.Delivery) []outFrame {
	if len(d.Messages) > 0 {
		c.owePresence(len(d.Messages)) // a client passes on every one (passedon.go)
	}
	if d.Batch != nil { // it holds d.Messages
		if msgs := d.Batch.Messages; len(msgs) > wire.MaxBatchEntries {
			// A room of more peers than a batch may hold (a cluster's
			// nodes together): several batches, for this peer alone.
			for len(msgs) > 0 {
				n := min(len(msgs), wire.MaxBatchEntries)
				part := &awareness.Batch{Messages: msgs[:n], Shared: &awareness.Shared{}}
				out = appendPresence(out, c.srv.batchFrame(documentID, part), nil)
				msgs = msgs[n:]
			}
			return out
		}
		return appendPresence(out, c.srv.batchFrame(documentID, d.Batch), nil)
	}
	for i := range d.Messages {
		if m := &d.Messages[i]; m.Shared == nil {
			out = appendPresence(out, c.encodePresence(documentID, m), nil)
		} else if sh := c.srv.shared(documentID, m); sh != nil {
			out = appendPresence(out, nil, sh.prep)
		}
	}
	return out
}

// appendPresence appends a presence frame, its payload or a message
// prepared for many peers, unless encoding it failed (neither is set).
//
//go:noinline
func appendPresence(out []outFrame, payload []byte, p *wire.Prepared) []outFrame {
	if payload == nil && p == nil {
		return out
	}
	return append(out, outFrame{op: websocket.BinaryMessage, payload: payload, prep: p})
}

// encodePresence encodes a presence message sent to this peer alone.
//
//go:noinline
func (c *conn) encodePresence(documentID string, m *awareness.Message) []byte {
	b, err := wire.Encode(&wire.Message{
		Type: wire.TypeEphemeral, SenderID: m.SenderID, TargetID: c.peerID, DocumentID: documentID,
		SessionID: m.SessionID, Count: m.Count, Data: m.Data,
	})
	if err != nil {
		c.srv.log.Error("encode presence", "err", err)
		return nil
	}
	return b
}

// shared is a presence message encoded once for every peer it goes to:
// as a message of its own, whose targetId the writer splices in, and, once
// a batch holds it, as an entry of any batch.
type shared struct {
	prep      *wire.Prepared
	entryOnce sync.Once
	entry     []byte
}

// batchEntry returns m as an entry of a batch, encoded once.
func (sh *shared) batchEntry(m *awareness.Message) []byte {
	sh.entryOnce.Do(func() { sh.entry = wire.AppendBatchEntry(nil, m.SenderID, m.Count, m.Data) })
	return sh.entry
}

// shared returns m encoded once for all its recipients, in m.Shared, by
// the first to ask; nil if it could not be encoded.
//
//go:noinline
func (s *Server) shared(documentID string, m *awareness.Message) *shared {
	m.Shared.Once.Do(func() {
		p, err := wire.Prepare(&wire.Message{
			Type: wire.TypeEphemeral, SenderID: m.SenderID, DocumentID: documentID,
			SessionID: m.SessionID, Count: m.Count, Data: m.Data,
		})
		if err != nil {
			s.log.Error("encode presence", "err", err)
			return
		}
		m.Shared.Frame = &shared{prep: p}
	})
	sh, _ := m.Shared.Frame.(*shared)
	return sh
}

// batchFrame returns the frame of a batch of presence messages, made once
// for every connection that takes it, of entries each encoded once for
// every batch it is in.
//
//go:noinline
func (s *Server) batchFrame(documentID string, b *awareness.Batch) []byte {
	b.Shared.Once.Do(func() {
		entries := make([][]byte, 0, len(b.Messages))
		size := 0
		for i := range b.Messages {
			m := &b.Messages[i]
			var e []byte
			if m.Shared == nil {
				e = wire.AppendBatchEntry(nil, m.SenderID, m.Count, m.Data)
			} else if sh := s.shared(documentID, m); sh != nil {
				e = sh.batchEntry(m)
			} else {
				continue
			}
			entries = append(entries, e)
			size += len(e)
		}
		b.Shared.Frame = wire.AppendBatch(make([]byte, 0, size+128+len(documentID)+len(s.cfg.PeerID)+len(b.Messages[0].SessionID)),
			s.cfg.PeerID, documentID, b.Messages[0].SessionID, entries)
	})
	frame, _ := b.Shared.Frame.([]byte)
	return frame
}
