package amsync

import (
	"encoding/binary"
	"hash/maphash"
	"slices"
	"time"
)

// AnswerWait is how long a peer may leave a message that brought it
// changes unanswered before it is sent the next one anyway. A stock
// client answers such a message as soon as it has applied it; one that
// had the changes already (from another tab, say) may not answer at all.
const AnswerWait = time.Second

// Peer is the sync state kept with one remote peer of a Log: automerge's
// sync state (shared heads, last sent heads, the peer's last heads, need
// and have, the changes sent it), and whether a message bringing it
// changes awaits its answer.
type Peer struct {
	// ReadOnly is set for a peer whose changes are not taken: it is never
	// asked for them (automerge's read-only sync state).
	ReadOnly bool
	// Spacing, if set, is the least time between two messages that bring
	// the peer changes: a change that comes sooner waits for the end of
	// it and goes with whatever else came meanwhile. The first change
	// after a quiet spell goes at once, and so does the answer to a
	// message that brought changes (the stock server answers every
	// sender at once; see TestAPeerThatBringsChangesIsAnsweredAtOnce).
	Spacing time.Duration

	shared   []Hash
	lastSent []Hash
	// From the peer's last message; heard says there was one.
	theirHeads, theirNeed []Hash
	theirHave             []Have
	heard                 bool
	sent                  spanSet
	inFlight, responded   bool
	// A message that carries no changes is not sent again as it was
	// last sent (lastOut, a digest) to a peer whose last message repeated
	// the one before it (theirLast; repeated): neither side would learn
	// anything, and two peers that answer every message would go on
	// forever.
	lastOut, theirLast uint64
	repeated           bool
	// joins is set once the peer's message carried a flags section: it
	// takes a message's changes joined in one entry.
	joins bool
	// awaitUntil is set while a message that brought the peer changes
	// awaits its answer: until then, or the answer, it is sent nothing.
	// lastChanges is when a message last brought it changes. heldUntil
	// is set when Generate held a message back for either, until when.
	awaitUntil, lastChanges, heldUntil time.Time
}

// NewPeer returns the state for a peer the log knows nothing about.
func NewPeer() *Peer { return &Peer{} }

// NewPeerAt returns the state for a peer known to have every change up to
// heads (automerge's saved sync state: shared heads only).
func NewPeerAt(heads []Hash) *Peer {
	return &Peer{shared: slices.Clone(heads)}
}

// Shared returns the heads the peer is known to share with the log.
func (p *Peer) Shared() []Hash { return p.shared }

// TheirHeads returns the heads the peer's last message named, and whether
// there was one.
func (p *Peer) TheirHeads() ([]Hash, bool) { return p.theirHeads, p.heard }

// HeldUntil returns, when Generate last held a message back from the
// peer to wait for its answer, when the wait ends; zero otherwise.
func (p *Peer) HeldUntil() time.Time { return p.heldUntil }

// Receive reads a message from the peer. The caller has already added to
// l the changes of m it admits; before are l's heads from before it did.
// The message's blooms are copied: m may be let go.
func (p *Peer) Receive(l *Log, m *Message, before []Hash) {
	p.inFlight = false
	p.awaitUntil, p.heldUntil = time.Time{}, time.Time{}
	p.joins = p.joins || m.HasFlags
	if m.Flags&flagSyncReset != 0 {
		p.sent.clear()
	}
	if len(m.Changes) > 0 {
		p.shared = advanceHeads(before, l.Heads(), p.shared)
		p.lastChanges = time.Time{}
	}
	l.withoutAncestors(&p.sent, m.Heads)
	if len(m.Changes) == 0 && slices.Equal(m.Heads, before) {
		p.lastSent = slices.Clone(m.Heads)
	}
	known := 0
	for _, h := range m.Heads {
		if l.Has(h) {
			known++
		}
	}
	if known == len(m.Heads) {
		p.shared = slices.Clone(m.Heads)
		if len(m.Heads) == 0 {
			p.lastSent = nil
			p.sent.clear()
		}
	} else {
		s := slices.Clone(p.shared)
		for _, h := range m.Heads {
			if l.Has(h) {
				s = append(s, h)
			}
		}
		sortHashes(s)
		p.shared = slices.Compact(s)
	}
	d := digest(m)
	p.repeated = len(m.Changes) == 0 && d == p.theirLast
	p.theirLast = d
	p.theirHeads = slices.Clone(m.Heads)
	p.theirNeed = slices.Clone(m.Need)
	p.theirHave = make([]Have, len(m.Have))
	for i, h := range m.Have {
		p.theirHave[i] = Have{LastSync: slices.Clone(h.LastSync), Bloom: slices.Clone(h.Bloom)}
	}
	p.heard = true
}

// advanceHeads is automerge's: the heads that are new since before,
// together with the old shared heads that are still heads.
func advanceHeads(before, after, shared []Hash) []Hash {
	var out []Hash
	inBefore, inAfter := inList(before), inList(after)
	for _, h := range after {
		if !inBefore(h) {
			out = append(out, h)
		}
	}
	for _, h := range shared {
		if inAfter(h) {
			out = append(out, h)
		}
	}
	sortHashes(out)
	return slices.Compact(out)
}

// inList answers whether a hash is in list: by a scan for a short list,
// by a set for a long one. A document's heads, and the lists a peer
// sends, can run to thousands, and a scan per item of another such list
// would cost their product under the room's lock.
func inList[T comparable](list []T) func(T) bool {
	if len(list) <= 16 {
		return func(x T) bool { return slices.Contains(list, x) }
	}
	set := make(map[T]struct{}, len(list))
	for _, x := range list {
		set[x] = struct{}{}
	}
	return func(x T) bool { _, ok := set[x]; return ok }
}

// Outgoing is a message Generate made: Message, whose changes are the
// log's at Indices (Message.Changes stays empty: Encode takes them from
// the log as it writes, so a message made for many peers copies them
// once). Joined says they go as one entry, the change chunks one after
// another, for a peer that reads them so (Peer.joins). Saved says the
// entry begins with the log's saved document (Log.SetSaved) in place of
// the changes it holds, which are the first Saved of Indices.
type Outgoing struct {
	Message
	Indices []int32
	Joined  bool
	Saved   int
	saved   []byte
	log     *Log
}

// Encode returns the message's bytes, its changes read out of the log.
// The log must not have changed since Generate.
func (o *Outgoing) Encode() []byte {
	changes, size := o.Indices[o.Saved:], len(o.saved)
	for _, x := range changes {
		size += o.log.ChangeLen(x)
	}
	joined := o.Saved > 0 || (o.Joined && len(o.Indices) > 1)
	entries := len(o.Indices)
	if joined {
		entries = 1
	}
	b := o.appendHeader(make([]byte, 0, o.headerSize()+entries*binary.MaxVarintLen64+size), entries)
	if joined {
		b = binary.AppendUvarint(b, uint64(size))
		b = append(b, o.saved...)
	}
	for _, x := range changes {
		if !joined {
			b = binary.AppendUvarint(b, uint64(o.log.ChangeLen(x)))
		}
		b = o.log.AppendChange(b, x)
	}
	return b
}

// Generate returns the next message for the peer, or nil if it needs
// none now. need are hashes the caller waits for besides the heads the
// peer named that l lacks (dependencies of changes it holds back), sorted
// or not; held, if set, reports the changes the caller holds back (never
// asked for). now is the time, for the answer the message may await.
//
// It is automerge's generate_sync_message, but for two things. What the
// peer lacks is worked out from the heads it named when l holds them
// all (exact, and cheap: the changes since them), from its have and bloom
// filter otherwise. And a peer that has not answered a message that
// brought it changes is sent nothing until it answers or AnswerWait has
// passed: it then gets everything new since in one message.
func (p *Peer) Generate(l *Log, need []Hash, held func(Hash) bool, now time.Time) *Outgoing {
	p.heldUntil = time.Time{}
	ours := l.Heads()
	unknown := l.Missing(p.theirHeads) // heads of the peer's the log lacks
	var ourNeed []Hash
	if !p.ReadOnly {
		for _, h := range unknown {
			if held == nil || !held(h) {
				ourNeed = append(ourNeed, h)
			}
		}
	}
	if len(need) > 0 {
		ourNeed = append(ourNeed, need...)
		sortHashes(ourNeed)
		ourNeed = slices.Compact(ourNeed)
	}
	var have []Have
	allTheirs := true
	inTheirHeads := inList(p.theirHeads)
	for _, h := range ourNeed {
		if !inTheirHeads(h) {
			allTheirs = false
			break
		}
	}

	if len(p.theirHave) > 0 {
		for _, h := range p.theirHave[0].LastSync {
			if !l.Has(h) {
				// The peer's last sync point is nothing we know: a
				// reset (an empty have asks it for everything).
				return &Outgoing{Message: Message{Heads: ours, Have: []Have{{}}}, log: l}
			}
		}
	}

	var send []int32
	exact := false
	if p.heard {
		var asked int
		send, asked, exact = p.toSend(l, len(unknown) == 0)
		// What it asked for by hash goes again: it lacks it, sent or not.
		send = append(send[:asked], slices.DeleteFunc(send[asked:], p.sent.has)...)
	}
	if allTheirs {
		if exact {
			// What the message carries brings the peer to our heads.
			have = []Have{{LastSync: ours}}
		} else {
			have = []Have{p.haveSince(l)}
		}
	}

	headsUnchanged := p.responded && slices.Equal(p.lastSent, ours)
	headsEqual := p.heard && slices.Equal(p.theirHeads, ours)
	if headsUnchanged && ((headsEqual && len(send) == 0) || p.inFlight) {
		return nil
	}
	if p.inFlight && !p.awaitUntil.IsZero() && now.Before(p.awaitUntil) {
		p.heldUntil = p.awaitUntil
		return nil // paced: the next message goes when it answers
	}
	if next := p.lastChanges.Add(p.Spacing); len(send) > 0 && p.Spacing > 0 && now.Before(next) {
		p.heldUntil = next
		return nil // spaced: it goes at the end of the spacing, with what comes meanwhile
	}

	out := &Outgoing{Message: Message{Heads: ours, Need: ourNeed, Have: have}, Indices: send, Joined: p.joins, log: l}
	if n, saved := l.Saved(); n > 0 && p.joins && p.heard && len(p.theirHeads) == 0 && p.sent.empty() && len(send) == l.Len() && sortedFrom0(send[:n]) {
		out.Saved, out.saved = n, saved // a peer that has nothing: the saved document, then what came since
	}
	if len(send) == 0 {
		d := digest(&out.Message)
		if p.repeated && d == p.lastOut {
			return nil
		}
		p.lastOut = d
	} else {
		p.lastOut = 0
	}
	p.responded = true
	p.lastSent = ours
	for _, x := range send {
		p.sent.add(x)
	}
	p.inFlight = true
	p.awaitUntil, p.heldUntil = time.Time{}, time.Time{}
	if len(send) > 0 {
		p.awaitUntil = now.Add(AnswerWait)
		p.lastChanges = now
	}
	return out
}

// Key identifies the message among those made for peers of one log at
// its current heads: two with one key are the same bytes.
func (o *Outgoing) Key() string {
	b := make([]byte, 0, 32*len(o.Need)+8*len(o.Indices)+64)
	if o.Joined {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(o.Saved))
	b = appendHashes(b, o.Need)
	b = appendHaves(b, o.Have)
	for _, x := range o.Indices {
		b = binary.AppendUvarint(b, uint64(x))
	}
	return string(b)
}

// sortedFrom0 reports whether xs are 0, 1, 2, … in order.
func sortedFrom0(xs []int32) bool {
	for i, x := range xs {
		if x != int32(i) {
			return false
		}
	}
	return true
}

// toSend returns the changes the peer lacks, in log order, the asked
// ones it asked for by hash first; exact says they were worked out from
// its heads (knowsTheirHeads: the log holds them all) and are all it
// lacks.
func (p *Peer) toSend(l *Log, knowsTheirHeads bool) (send []int32, asked int, exact bool) {
	var need []int32
	for _, h := range p.theirNeed {
		if i, ok := l.IndexOf(h); ok {
			need = append(need, i)
		}
	}
	if len(p.theirHave) == 0 {
		return need, len(need), false
	}
	if knowsTheirHeads {
		return withFirst(need, l.Since(p.theirHeads)), len(need), true
	}
	// From its have: every change since its last sync points that no
	// bloom holds, and every change depending on one of those.
	var last []Hash
	blooms := make([]Bloom, 0, len(p.theirHave))
	for _, h := range p.theirHave {
		last = append(last, h.LastSync...)
		b, _ := ParseBloom(h.Bloom) // checked when the message was read
		blooms = append(blooms, b)
	}
	since := l.Since(last)
	in := make(map[int32]bool)
	for _, x := range since {
		h := l.HashAt(x)
		missing := true
		for _, b := range blooms {
			if b.Contains(&h) {
				missing = false
				break
			}
		}
		if !missing {
			for _, d := range l.DepsAt(x) {
				if in[d] {
					missing = true // depends on one it lacks
					break
				}
			}
		}
		if missing {
			in[x] = true
		}
	}
	var out []int32
	for _, x := range since {
		if in[x] {
			out = append(out, x)
		}
	}
	return withFirst(need, out), len(need), false
}

// withFirst returns first, then the rest not in first.
func withFirst(first, rest []int32) []int32 {
	if len(first) == 0 {
		return rest
	}
	out := slices.Clone(first)
	inFirst := inList(first)
	for _, x := range rest {
		if !inFirst(x) {
			out = append(out, x)
		}
	}
	return out
}

// haveSince is automerge's have entry: the shared heads, and a bloom
// filter of the changes since them.
func (p *Peer) haveSince(l *Log) Have {
	since := l.Since(p.shared)
	b := NewBloom(len(since), func(i int) Hash { return l.HashAt(since[i]) })
	return Have{LastSync: slices.Clone(p.shared), Bloom: b.Encode()}
}

var digestSeed = maphash.MakeSeed()

// digest sums a message's heads, need and have (not its changes).
func digest(m *Message) uint64 {
	var h maphash.Hash
	h.SetSeed(digestSeed)
	for _, l := range [][]Hash{m.Heads, {{}}, m.Need} {
		for i := range l {
			h.Write(l[i][:])
		}
	}
	for _, hv := range m.Have {
		h.WriteByte(1)
		for i := range hv.LastSync {
			h.Write(hv.LastSync[i][:])
		}
		h.WriteByte(2)
		h.Write(hv.Bloom)
	}
	return h.Sum64()
}
