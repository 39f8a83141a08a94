package awareness

import (
	"bytes"
	"fmt"
)

// Clock orders the writes of one peer: first its era, then the count of
// its ephemeral messages, then its session id. A peer's counts only grow
// within a session, but a new session (a reloaded tab that keeps its peer
// id) counts from zero again: the era, the time (Unix ms) at which the
// node the peer is connected to first saw the session, puts a later
// session after everything of an earlier one, tombstones included. A
// node gives a session it sees for a peer an era past any it knows of the
// peer, so eras only grow for a peer even across nodes whose clocks
// differ. Writes made by the server in a peer's name (clearing a typing
// flag, removing a vanished peer) use the peer's latest era and count and
// the session with ServerSuffix and a sequence number appended: they beat
// what the server has seen from the peer, and each other in order, and
// lose to anything the peer sends later.
type Clock struct {
	Era     int64 `cbor:"Era,omitempty"` // zero from nodes that predate eras: the oldest
	Count   uint64
	Session string
}

// ServerSuffix marks the session of a write the server makes for a peer.
const ServerSuffix = "~tandem"

// Less reports whether c is older than d.
func (c Clock) Less(d Clock) bool {
	if c.Era != d.Era {
		return c.Era < d.Era
	}
	if c.Count != d.Count {
		return c.Count < d.Count
	}
	return c.Session < d.Session
}

// IsZero reports whether c is the zero clock, older than every write.
func (c Clock) IsZero() bool { return c.Era == 0 && c.Count == 0 && c.Session == "" }

// Server returns the clock of the seq-th server write that supersedes c.
func (c Clock) Server(seq uint64) Clock {
	return Clock{Era: c.Era, Count: c.Count, Session: fmt.Sprintf("%s%s%016x", c.Session, ServerSuffix, seq)}
}

// Register is one channel's last-writer-wins register. Value is the
// channel's value as CBOR, as the peer sent it.
type Register struct {
	Clock Clock
	Value []byte
}

// PeerState is one peer's channels and its removal tombstone. A channel
// whose clock is not newer than Gone is removed.
type PeerState struct {
	Gone     Clock
	Channels map[string]Register
}

// Visible reports whether the peer has any channel newer than its tombstone.
func (p *PeerState) Visible() bool {
	for _, r := range p.Channels {
		if p.Gone.Less(r.Clock) {
			return true
		}
	}
	return false
}

// Get returns a channel's value if it is set and not removed.
func (p *PeerState) Get(channel string) ([]byte, bool) {
	r, ok := p.Channels[channel]
	if !ok || !p.Gone.Less(r.Clock) {
		return nil, false
	}
	return r.Value, true
}

// State is the presence of one document: every peer's state by peer id.
type State map[string]*PeerState

// Set writes one channel. It reports whether the register took the write
// (its clock was newer) and whether the visible value changed.
func (s State) Set(peer, channel string, r Register) (took, changed bool) {
	p := s.peer(peer)
	old, had := p.Get(channel)
	cur, ok := p.Channels[channel]
	if (ok && !cur.Clock.Less(r.Clock)) || !p.Gone.Less(r.Clock) {
		return false, false
	}
	p.Channels[channel] = r
	now, has := p.Get(channel)
	return true, had != has || !bytes.Equal(old, now)
}

// Remove tombstones every channel of the peer up to clock c. It reports
// whether the peer was visible before. Registers the tombstone hides are
// dropped: they can never show again, so the state stays small.
func (s State) Remove(peer string, c Clock) bool {
	p := s.peer(peer)
	was := p.Visible()
	if p.Gone.Less(c) {
		p.Gone = c
	}
	p.collect()
	return was && !p.Visible()
}

// collect drops the registers the tombstone hides. Keeping only live
// registers makes every way of reaching a state give the same one.
func (p *PeerState) collect() {
	for ch, r := range p.Channels {
		if !p.Gone.Less(r.Clock) {
			delete(p.Channels, ch)
		}
	}
}

func (s State) peer(id string) *PeerState {
	p := s[id]
	if p == nil {
		p = &PeerState{Channels: make(map[string]Register)}
		s[id] = p
	}
	return p
}

// Merge folds other into s: per peer the newer tombstone, per channel the
// newer register. It is commutative, associative and idempotent.
func (s State) Merge(other State) {
	for id, op := range other {
		p := s.peer(id)
		if p.Gone.Less(op.Gone) {
			p.Gone = op.Gone
		}
		for ch, r := range op.Channels {
			if cur, ok := p.Channels[ch]; !ok || cur.Clock.Less(r.Clock) {
				p.Channels[ch] = r
			}
		}
		p.collect()
	}
}

// Equal reports whether two states hold the same registers and tombstones.
func (s State) Equal(other State) bool {
	if len(s) != len(other) {
		return false
	}
	for id, p := range s {
		q, ok := other[id]
		if !ok || p.Gone != q.Gone || len(p.Channels) != len(q.Channels) {
			return false
		}
		for ch, r := range p.Channels {
			o, ok := q.Channels[ch]
			if !ok || o.Clock != r.Clock || !bytes.Equal(o.Value, r.Value) {
				return false
			}
		}
	}
	return true
}
