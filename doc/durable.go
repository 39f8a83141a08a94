package doc

// Durable before acknowledged. A sync message that names a head tells its
// peer the server has that change: the peer's automerge-repo then stops
// resending it. So no message that names a change leaves the room before
// the store holds it: not the reply to the peer that made it, not the
// messages to the other peers, not the copy for other nodes. Each is made
// at once (automerge's sync states move on as if it were sent, as for a
// message on the wire) and waits in the room's held queue; the hub's
// flusher writes the room as soon as it can, and when the write that
// covers a message's changes succeeds, the messages held for it go out in
// the order they were made. Writes are grouped (one batch holds every
// room that changed while the previous batch was written) but never
// reordered. A failed write keeps them held until a later one succeeds.
//
// Changes that arrive from another node are stored already (that node
// waited for the shared store before publishing them), so they hold
// nothing back by themselves; messages made while a local change waits
// still wait behind it.

// maxUnstored bounds the messages with changes a room applies before the
// store has them: past it, changes are refused (ErrStoreBehind) until a
// write succeeds. While the store fails, held (a few messages per peer per
// applied message) and the document stop growing here.
const maxUnstored = 1024

// storeBehind reports whether the room takes no more changes until the
// store catches up. The caller holds r.mu.
func (r *room) storeBehind() bool { return r.applied-r.stored >= maxUnstored }

// heldSend is a message made while the document had changes not yet
// stored: a sync message or doc-unavailable for a peer, or (peer nil)
// accepted changes for the other nodes, or (then set) another node's
// answer that this node holds the document.
type heldSend struct {
	peer        Peer
	data        []byte
	unavailable bool
	changes     []byte
	shared      *SharedSync // instead of data
	then        func()
	upTo        uint64 // the room's applied count when it was made
}

// send delivers s now if everything the room applied is stored, or holds
// it until it is. The caller holds r.mu.
func (r *room) send(s heldSend) {
	if r.applied == r.stored {
		r.deliver(s)
		return
	}
	s.upTo = r.applied
	r.held = append(r.held, s)
}

func (r *room) deliver(s heldSend) {
	switch {
	case s.then != nil:
		s.then()
	case s.peer == nil:
		r.publish(r.id, s.changes)
	case s.unavailable:
		s.peer.SendDocUnavailable(r.id)
	case s.shared != nil:
		if ss, ok := s.peer.(SharedSender); ok {
			ss.SendSharedSync(r.id, s.shared)
		} else {
			s.peer.SendSync(r.id, s.shared.Data)
		}
	default:
		s.peer.SendSync(r.id, s.data)
	}
}

// release records that the store holds what the room had applied when
// the write was taken, and sends what waited for it. The caller holds r.mu.
func (r *room) release(upTo uint64) {
	r.stored = max(r.stored, upTo)
	n := 0
	for n < len(r.held) && r.held[n].upTo <= r.stored {
		r.deliver(r.held[n])
		r.held[n] = heldSend{}
		n++
	}
	r.held = r.held[n:]
	if len(r.held) == 0 {
		r.held = nil // let the backing array go
	}
}
