package doc

import (
	"hash/maphash"
	"time"
	"weak"

	"github.com/tandemhq/tandem/doc/amsync"
)

// Fan-out: how a change reaches the peers of a room.
//
// Every member has a sync state (amsync.State) over the room's change log.
// When the document changes, each member is sent what its state says it
// lacks; a member that has not answered the last message that brought it
// changes is sent nothing until it answers (or amsync.AnswerWait has
// passed, twice its last answer's time if longer), and then gets
// everything new since in one message. So each reader is paced by its
// own reading: a slow one gets fewer, larger messages, never a queue of
// small ones it cannot read. Config.SyncSpacing spaces the messages that
// bring a member changes besides: a change that comes within the spacing
// of the last such message goes at the spacing's end, with whatever else
// came meanwhile. So the messages a member is sent are the spacing or its
// own round trip apart, whichever is longer: one that answers within the
// spacing is sent as often as the stock server sends a reader (a pass
// over a document's peers at most every 100 ms, timed from the end of
// the last pass, and an answer to each message a peer sends with what
// came since), one that takes longer to read less often, and a lone
// writer's changes, which its client sends about a spacing apart, go on
// as they come. The first change
// after a quiet spell goes at once; while several peers write, it goes
// Config.SyncGather later with the changes that came with it (tookFrom).
// A member
// whose message brought changes is answered at once with everything it
// lacks, as the stock server answers every sender.
//
// Most members of a document being edited stand at the same heads and get
// the same message: it is made and encoded once for all of them
// (SharedSync), only the targetId spliced in per peer by a Peer that can
// (SharedSender).

// SharedSync is one sync message for several peers: made once. A Peer that
// implements SharedSender may keep its encoding in Frame for the next
// peer; Frame is only touched under the room's lock.
type SharedSync struct {
	Data  []byte
	Frame any
}

// SharedSender is implemented by Peers that can send one SharedSync to
// many peers cheaper than SendSync each.
type SharedSender interface {
	SendSharedSync(documentID string, s *SharedSync)
}

// gatherWriters is how close two writers' changes come for readers'
// messages to gather: a document with one writer, or writers this far
// apart, sends each change at once. People typing together pause and go
// on: the gather holds over their pauses.
const gatherWriters = 10 * time.Second

// tookFrom notes that peer's change was taken at now. A peer's changes come
// in messages its own client spaces (a stock Repo at most one every
// 100 ms), so gathering joins changes only where several write at once:
// while another peer wrote within gatherWriters, a change waits
// Config.SyncGather for the others' that come with it; with one writer,
// nothing waits.
func (r *room) tookFrom(peer string, now time.Time) {
	if peer != r.writer {
		r.otherAt, r.writer = r.wroteAt, peer
	}
	r.wroteAt = now
	r.gather = now.Sub(r.otherAt) < gatherWriters
}

// answer sends m the message its sync state calls for, if any, sharing
// the encoding with other members given the same message in this pass
// (cache, nil for a message of its own); a message held back for the
// member's answer or spacing is sent when it is due. The caller holds
// r.mu.
func (r *room) answer(h *Hub, m *member, cache map[string]*SharedSync) {
	if r.waitForSave(h, m) {
		return
	}
	m.sync.Gather = 0
	if r.gather {
		m.sync.Gather = h.cfg.SyncGather
	}
	out := m.sync.Generate(r.log, r.guard.MissingFrom(m.peer.ID(), r.known), r.guard.Waits, time.Now())
	m.settle(h)
	if out == nil {
		r.paceLater(h, m.sync.HeldUntil())
		return
	}
	if m.bare && len(out.Indices) > 0 {
		m.whole = true // to a peer that has nothing, the whole document
	}
	if cache == nil && m.whole && len(out.Indices) == r.log.Len() {
		r.sendWhenStored(outgoing{peer: m.peer, shared: r.whole.shared(r.log.Len(), out)})
		return
	}
	if cache == nil {
		r.sendWhenStored(outgoing{peer: m.peer, data: out.Encode()})
		return
	}
	key := out.Key()
	s := cache[key]
	if s == nil {
		s = &SharedSync{Data: out.Encode()}
		cache[key] = s
	}
	r.sendWhenStored(outgoing{peer: m.peer, shared: s})
}

// wholeCopy keeps the last copy of the whole document made for a peer
// that had nothing, as long as a connection's queue holds it (weakly):
// peers that ask for the document again and again, or many at once,
// share one copy of its bytes instead of each holding its own.
type wholeCopy struct {
	n   int    // the log's length it was made at
	key uint64 // of Outgoing.Key
	p   weak.Pointer[SharedSync]
}

var wholeSeed = maphash.MakeSeed()

// shared returns the copy for out, made now if there is none.
func (w *wholeCopy) shared(n int, out *amsync.Outgoing) *SharedSync {
	key := maphash.String(wholeSeed, out.Key())
	if w.n == n && w.key == key {
		if s := w.p.Value(); s != nil {
			return s
		}
	}
	s := &SharedSync{Data: out.Encode()}
	w.n, w.key, w.p = n, key, weak.Make(s)
	return s
}

// fanout sends every member but except (nil: every member) what the
// document's change gave it to read. The caller holds r.mu.
func (r *room) fanout(h *Hub, except *member) {
	cache := make(map[string]*SharedSync)
	for _, m := range r.members {
		if m != except {
			r.answer(h, m, cache)
		}
	}
}

// paceLater fans out again at t (zero: never), when a message held back
// for a member is due, unless a fan-out is due sooner: that one finds
// what is due later and calls paceLater again. The caller holds r.mu.
func (r *room) paceLater(h *Hub, t time.Time) {
	if t.IsZero() || (!r.paceAt.IsZero() && !t.Before(r.paceAt)) {
		return
	}
	r.paceAt = t
	h.goAfter(time.Until(t), func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.paceAt.Equal(t) {
			r.paceAt = time.Time{}
			if !r.evicted {
				r.fanout(h, nil)
			}
		}
	})
}
