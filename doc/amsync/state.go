package amsync

import (
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"slices"
	"time"
)

// AnswerWait is how long a peer may leave a message that brought it
// changes unanswered before it is sent the next one anyway, at the least:
// a peer whose last answer took longer than half of it is given twice
// that answer's time (at most MaxAnswerWait), so that a reader busy with
// one message is not sent the next before it could have read it. A stock
// client answers such a message as soon as it has applied it; one that
// had the changes already (from another tab, say) may not answer at all.
const AnswerWait = time.Second

// MaxAnswerWait bounds the wait for a peer's answer, however long its
// last one took.
const MaxAnswerWait = 10 * time.Second

// State is the sync state kept with one remote peer of a Log: automerge's
// sync state (shared heads, last sent heads, the peer's last heads, the
// changes sent it), what the peer's last message says it lacks, and
// whether a message bringing it changes awaits its answer.
//
// What a message says is worked out once, as it is received, and kept
// in the few bytes it comes to (Kept): the changes asked for by hash as
// log indices, each once; the have entries as the changes they say the
// peer lacks, after which every change the log takes is lacked too. Its
// bloom filters and need list are not kept, and what is owed is dropped
// once sent. Generate then costs what it sends, whatever the document's
// size.
type State struct {
	// ReadOnly is set for a peer whose changes are not taken: it is never
	// asked for them (automerge's read-only sync state).
	ReadOnly bool
	// Spacing, if set, is the least time between two messages that bring
	// the peer changes: a change that comes sooner waits for the end of
	// it and goes with whatever else came meanwhile. The next message
	// also waits for the peer's answer to the last (or AnswerWait,
	// longer for a peer whose last answer was slow). So the messages a
	// peer is sent are the spacing or its own round trip apart, whichever
	// is longer: a peer that answers within the spacing is sent as often
	// as the stock server sends one, and a change that comes a spacing
	// after the last goes at once, however long the peer's round trip
	// (TestSpacingRunsFromTheLastMessage). The first change after a quiet
	// spell goes at once (or after Gather), and the answer to a message
	// that brought changes goes at once (the stock server answers every
	// sender at once; see TestAPeerThatBringsChangesIsAnsweredAtOnce).
	Spacing time.Duration
	// Gather, if set, is how long the first change after a quiet spell
	// waits for the changes that come with it before it goes to the
	// peer: where several people type, their keystrokes may come
	// together, and a stock client pays far more for each message that
	// brings changes than for each change in it
	// (TestGatherJoinsChangesThatComeTogether). The caller may set it
	// before each Generate (doc sets it while several peers write). It
	// holds only changes the log took since the peer's last message: a
	// peer's first sync, what it asked for and the answer to a message
	// that brought changes go at once.
	Gather time.Duration

	shared   []Hash
	lastSent []Hash
	// From the peer's last message; heard says there was one. unknown
	// are the heads it named that the log lacked, as of unknownAt (the
	// log's length then): the log only grows, so only they are looked up
	// again.
	theirHeads []Hash
	unknown    []Hash
	unknownSet map[Hash]struct{} // those of unknown the log still lacks
	unknownAt  int32
	heard      bool
	// asked are the changes its last message asked for by hash that the
	// log holds, once each, in the order asked; they go in the next
	// message that brings it changes, sent before or not, and are
	// dropped once sent.
	asked []int32
	// have says how its last message's have list was read; lacks are the
	// changes it says the peer lacks, in log order, and every change at
	// or past lacksFrom is lacked too (the log took it since).
	have      haveKind
	lacks     []int32
	lacksFrom int32
	// refunded is the work given back for lacks not sent yet: taken back
	// if the next message comes first (they are worked out anew then), so
	// that messages answered with nothing (held by Spacing) pay for
	// what they cost.
	refunded int
	sent     spanSet
	// work is what the peer may still make the log visit, in changes
	// walked, tested or put in a filter: each message gives it some for
	// its bytes (workFor), each change it is sent gives one, and the
	// visits that find a change it lacks, or one it was sent and now
	// has, are refunded. A walk that runs out stops, having cost no more
	// than the peer paid: so its messages cost their bytes and at most
	// four visits per change they brought it.
	work int
	// ours is the bloom filter of the log's changes since shared that
	// goes in the have entry of a message to a peer whose heads the log
	// does not all hold: made once per shared heads, grown as the log
	// grows.
	ours                ownFilter
	inFlight, responded bool
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
	// lastChanges is when a message last brought it changes: the
	// spacing runs from it. spacedTo is set when the last Generate held
	// a message for the spacing, until when: the message that goes at
	// its end counts from it, not from the room's timer, which fires a
	// little late. awaiting says that message has not been answered;
	// answered, that Receive took its answer and the next Generate,
	// which follows at once, is to note how long it took (Receive is not
	// told the time). heldUntil is set when Generate held a message back,
	// until when.
	awaitUntil, lastChanges, heldUntil, spacedTo time.Time
	awaiting, answered                           bool
	// owedSince is when Generate first found the peer owed changes the
	// log took since its last message (zero while it is owed none or
	// anything else); Gather runs from it. heardAt is the log's length
	// when that message came. brought says the message brought changes:
	// its answer goes at once.
	owedSince time.Time
	heardAt   int32
	brought   bool
	// took is how long the peer took to answer the last message that
	// brought it changes and was answered: its wait for the next answer
	// is twice that, AnswerWait at the least.
	took time.Duration
}

// haveKind is how a message's have list was read.
type haveKind uint8

const (
	haveNone   haveKind = iota // no have entries: the peer is sent only what it asks for
	haveReset                  // a last sync point the log lacks: the peer is asked to start over
	haveFilter                 // lacks worked out from the filters
	haveExact                  // lacks worked out from its heads, all of which the log holds
)

// MaxHeads bounds the heads a client's changes may give a document (a
// change that would give it more is refused), and those a message may
// name beyond the document's own (CheckHeads): each is looked up for
// every message its peer is sent, and kept with its sync state.
const MaxHeads = 10_000

// CheckHeads returns ErrBounds for a message naming more heads than
// MaxHeads beyond the log's own. A peer's heads are the document's and
// a few of its own; the document's may pass MaxHeads when nodes of a
// cluster each took changes apart, and its peers go on naming them all.
func CheckHeads(l *Log, m *Message) error {
	if len(m.Heads) > MaxHeads+len(l.heads) {
		return fmt.Errorf("%w: %d heads, over %d beyond the document's %d", ErrBounds, len(m.Heads), MaxHeads, len(l.heads))
	}
	return nil
}

// maxAsk bounds the heads the log lacks that a message asks a peer for:
// a peer has a head or two the log lacks, its recent changes; what a
// peer names beyond the bound is still sent it, by the bloom filter.
const maxAsk = 256

// workFor is the work a message gives its peer: a unit per 4 of its
// bytes (8 per hash it names), 1,024 besides, and 3 per hash its filters
// say they were made for (a filter's 10 bits each: a test of each change
// it holds, and the walk to it). A peer holds at most maxWork.
func workFor(m *Message) int {
	n := m.size()/4 + 1024
	for _, h := range m.Have {
		if b, err := ParseBloom(h.Bloom); err == nil {
			n += 3 * b.Entries()
		}
	}
	return n
}

const maxWork = 4 << 20

// NewState returns the state for a peer the log knows nothing about.
func NewState() *State { return &State{} }

// NewPeerAt returns the state for a peer known to have every change up to
// heads (automerge's saved sync state: shared heads only).
func NewPeerAt(heads []Hash) *State {
	return &State{shared: slices.Clone(heads)}
}

// Joins reports whether the peer reads a message's changes as one (its
// messages carry a flags section): it can be sent a saved document.
func (p *State) Joins() bool { return p.joins }

// Shared returns the heads the peer is known to share with the log.
func (p *State) Shared() []Hash { return p.shared }

// TheirHeads returns the heads the peer's last message named, and whether
// there was one.
func (p *State) TheirHeads() ([]Hash, bool) { return p.theirHeads, p.heard }

// HeldUntil returns, when Generate last held a message back from the
// peer (for its answer, the spacing or the gather), when the hold ends;
// zero otherwise.
func (p *State) HeldUntil() time.Time { return p.heldUntil }

// Kept returns the bytes the state holds, besides its fixed size: its
// hash lists, what the peer is owed, the spans of what it was sent and
// the log's filter made for it.
func (p *State) Kept() int {
	return 32*(len(p.shared)+len(p.lastSent)+len(p.theirHeads)+len(p.unknown)) + 48*len(p.unknownSet) +
		4*(len(p.asked)+len(p.lacks)) + 8*len(p.sent.s) + len(p.ours.f.bits)
}

// Holds bounds the bytes Receive keeps of m, beyond what the log owes
// the peer: for the caller to charge before it calls Receive.
func Holds(m *Message) int {
	n := 32*4*len(m.Heads) + 48*len(m.Heads) + 4*len(m.Need)
	if len(m.Have) > 0 {
		n += 32 * len(m.Have[0].LastSync)
	}
	return n
}

// Receive reads a message from the peer. The caller has already added to
// l the changes of m it admits; before are l's heads from before it did.
// Nothing of m is kept: m may be let go. What its have entries say the
// peer lacks is worked out here, once (lackedBy).
func (p *State) Receive(l *Log, m *Message, before []Hash) {
	// What the last message found owed and was not sent is worked out
	// anew: its refund is taken back.
	p.work -= p.refunded
	p.refunded = 0
	p.work = min(maxWork, p.work+workFor(m))
	p.inFlight = false
	p.awaitUntil, p.heldUntil = time.Time{}, time.Time{}
	p.answered = p.answered || p.awaiting
	p.awaiting = false
	p.joins = p.joins || m.HasFlags
	p.heardAt = l.n
	if m.Flags&flagSyncReset != 0 {
		p.sent.clear()
	}
	if len(m.Changes) > 0 {
		p.shared = advanceHeads(before, l.Heads(), p.shared)
		// A sender is answered at once, unspaced, ungathered.
		p.lastChanges, p.answered = time.Time{}, false
		p.brought = true
	}
	l.withoutAncestors(&p.sent, m.Heads, &p.work)
	if len(m.Changes) == 0 && slices.Equal(m.Heads, before) {
		p.lastSent = slices.Clone(m.Heads)
	}
	p.unknown = l.Missing(m.Heads)
	p.unknownAt = l.n
	p.unknownSet = nil
	if len(p.unknown) > 0 {
		p.unknownSet = make(map[Hash]struct{}, len(p.unknown))
		for _, h := range p.unknown {
			p.unknownSet[h] = struct{}{}
		}
	}
	if len(p.unknown) == 0 {
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
		if len(m.Have) > 0 && l.holdsAll(m.Have[0].LastSync) {
			// It had every change up to its last sync point, and so do
			// we: shared, though automerge would not say so. The filter
			// of our changes sent it then covers what came since.
			s = append(s, m.Have[0].LastSync...)
		}
		sortHashes(s)
		p.shared = slices.Compact(s)
	}
	d := digest(m)
	repeat := d == p.theirLast && p.heard && len(m.Changes) == 0 && m.Flags&flagSyncReset == 0
	p.repeated = len(m.Changes) == 0 && d == p.theirLast
	p.theirLast = d
	p.theirHeads = slices.Clone(m.Heads)
	p.heard = true
	p.asked = p.asked[:0]
	for _, h := range m.Need {
		// A repeat asks again for what is on its way: not sent twice.
		if i, ok := l.IndexOf(h); ok && !(repeat && p.sent.has(i)) {
			p.asked = append(p.asked, i)
		}
	}
	p.asked = uniqueInOrder(p.asked)
	if repeat {
		return // what its have says is worked out already
	}
	p.lacks, p.lacksFrom = nil, l.n
	switch {
	case len(m.Have) == 0:
		p.have = haveNone
	case !l.holdsAll(m.Have[0].LastSync):
		// The peer's last sync point is nothing we know: a reset (an
		// empty have asks it for everything).
		p.have = haveReset
	case len(p.unknown) == 0:
		p.have = haveExact
		p.exactLacks(l)
	default:
		p.have = haveFilter
		p.lacks, p.lacksFrom, p.refunded = lackedBy(l, m.Have, &p.sent, &p.work)
	}
}

// exactLacks works out what the peer lacks from its heads, all of which
// the log holds: the changes since them not sent it. A peer with no
// heads lacks everything not sent it, which costs nothing to say
// (lacksFrom 0); a walk that takes more than the peer paid for stops,
// and every change not sent it is taken as lacked, and sent.
func (p *State) exactLacks(l *Log) {
	p.lacks, p.lacksFrom = nil, l.n
	if len(p.theirHeads) == 0 {
		p.lacksFrom = 0
		return
	}
	lacks, ok := l.sinceWithin(p.theirHeads, &p.sent, &p.work, 1)
	if !ok {
		p.lacksFrom = 0
		return
	}
	p.lacks, p.refunded = lacks, p.refunded+len(lacks)
}

// holdsAny reports whether the log holds a hash of hs.
func (l *Log) holdsAny(hs []Hash) bool {
	for i := range hs {
		if _, ok := l.find(&hs[i]); ok {
			return true
		}
	}
	return false
}

// holdsAll reports whether the log holds every hash of hs.
func (l *Log) holdsAll(hs []Hash) bool {
	for i := range hs {
		if _, ok := l.find(&hs[i]); !ok {
			return false
		}
	}
	return true
}

// uniqueInOrder drops the repeats of xs, keeping each first.
func uniqueInOrder(xs []int32) []int32 {
	if len(xs) < 2 {
		return xs
	}
	seen := make(map[int32]struct{}, len(xs))
	out := xs[:0]
	for _, x := range xs {
		if _, ok := seen[x]; !ok {
			seen[x] = struct{}{}
			out = append(out, x)
		}
	}
	return out
}

// lackedBy returns, in log order, the changes a peer lacks by its have
// entries: every change since their last sync points that no filter
// holds, and every change depending on one of those; the changes of
// sent are taken as held (they are on their way) and not tested. from
// is where what it says stops being taken: every change not sent at or
// past it is lacked too (the log's length if the filters were taken
// whole); refund is the work given back for the changes found lacked.
//
// Work: the walk to the changes since the last sync points, and each
// test, cost a unit; a change found lacked gives them back (it is owed).
// A filter holds the hashes put in it and, as automerge makes them,
// about 1% of the others; one read (ParseBloom) has at most 7 bits set
// per entry, so it holds at most 8% of the others. One that holds more
// than that, or holds changes the peer has no work left to pay for, is
// trusted no further: every change from that point on is taken as
// lacked, and sent. So what the filter costs is its entries and what is
// sent.
func lackedBy(l *Log, haves []Have, sent *spanSet, work *int) (lacks []int32, from int32, refund int) {
	var last []Hash
	blooms := make([]Bloom, 0, len(haves))
	made := 0
	for _, h := range haves {
		last = append(last, h.LastSync...)
		b, _ := ParseBloom(h.Bloom) // read with the message
		blooms = append(blooms, b)
		made += b.Entries()
	}
	// The changes since the last sync points but those sent, in log
	// order: all of them if it names none the log holds.
	each := func(f func(x int32) bool) { sent.gaps(0, l.n, f) }
	walked := 0
	if l.holdsAny(last) {
		// Walked with each change given back: a held one pays for its
		// walk with its test.
		since, ok := l.sinceWithin(last, sent, work, 1)
		if !ok {
			return nil, 0, 0 // everything not sent is lacked
		}
		walked = 1
		each = func(f func(x int32) bool) {
			for _, x := range since {
				if !f(x) {
					return
				}
			}
		}
		refund = len(since) // taken back below for each held
	}
	var lacked spanSet
	held, tested := 0, 0
	from = l.n
	each(func(x int32) bool {
		l.visited++
		tested++
		*work-- // its test
		h := &l.at(x).hash
		missing := true
		for _, b := range blooms {
			if b.Contains(h) {
				missing = false
				break
			}
		}
		if !missing {
			for _, d := range l.DepsAt(x) {
				if lacked.has(d) {
					missing = true // depends on one it lacks
					break
				}
			}
		}
		if missing {
			// Owed: its test is given back (its walk was as it was walked).
			lacked.add(x)
			lacks = append(lacks, x)
			*work++
			refund++
			return true
		}
		held++
		*work -= walked // its walk's credit is taken back
		refund -= walked
		if held > made+tested/12+64 || *work < 0 {
			from = x // from here on, what it says is not taken
			return false
		}
		return true
	})
	return lacks, from, refund
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
// another, for a peer that reads them so (State.joins). Saved says the
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
	return append(b, ourFlags...)
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
// brought it changes is sent nothing until it answers or its wait has
// passed (AnswerWait, or twice its last answer's time if longer): it then
// gets everything new since in one message.
func (p *State) Generate(l *Log, need []Hash, held func(Hash) bool, now time.Time) *Outgoing {
	p.heldUntil = time.Time{}
	spacedTo := p.spacedTo
	p.spacedTo = time.Time{}
	if p.answered {
		p.answered = false
		p.took = now.Sub(p.lastChanges)
	}
	ours := l.Heads()
	if p.unknownAt != l.n && len(p.unknownSet) > 0 {
		// The log took changes since: some of the unknown heads may be
		// among them (a look at each new change, not at each head).
		for x := p.unknownAt; x < l.n; x++ {
			delete(p.unknownSet, l.at(x).hash)
		}
		if len(p.unknown)-len(p.unknownSet) > maxAsk {
			p.unknown = slices.DeleteFunc(p.unknown, func(h Hash) bool { _, ok := p.unknownSet[h]; return !ok })
		}
	}
	p.unknownAt = l.n
	var ourNeed []Hash
	if !p.ReadOnly {
		for _, h := range p.unknown {
			if len(ourNeed) == maxAsk {
				break
			}
			if _, ok := p.unknownSet[h]; ok && (held == nil || !held(h)) {
				ourNeed = append(ourNeed, h)
			}
		}
	}
	// The heads asked for are the peer's own; what the caller waits for
	// may not be.
	allTheirs := true
	if len(need) > 0 {
		inTheirHeads := inList(p.theirHeads)
		for _, h := range need {
			if !inTheirHeads(h) {
				allTheirs = false
				break
			}
		}
		ourNeed = append(ourNeed, need...)
		sortHashes(ourNeed)
		ourNeed = slices.Compact(ourNeed)
	}

	if p.heard && p.have == haveReset {
		return &Outgoing{Message: Message{V2: p.joins, Heads: ours, Have: []Have{{}}}, log: l}
	}
	if p.heard && p.have == haveFilter && len(p.unknownSet) == 0 {
		// Its heads came since its message: they say exactly what it
		// lacks, worked out once.
		p.work -= p.refunded
		p.refunded = 0
		p.have = haveExact
		p.exactLacks(l)
	}
	owed := p.heard && p.owes(l)
	// Owed only what the log took since the peer's last message (owes
	// has dropped the lacks already sent).
	fresh := owed && !p.brought && len(p.asked) == 0 && len(p.lacks) == 0 && p.lacksFrom >= p.heardAt
	if !fresh {
		p.owedSince = time.Time{}
	} else if p.owedSince.IsZero() {
		p.owedSince = now
	}

	headsUnchanged := p.responded && slices.Equal(p.lastSent, ours)
	headsEqual := p.heard && slices.Equal(p.theirHeads, ours)
	if headsUnchanged && ((headsEqual && !owed) || p.inFlight) {
		return nil
	}
	if p.inFlight && !p.awaitUntil.IsZero() && now.Before(p.awaitUntil) {
		p.heldUntil = p.awaitUntil
		return nil // paced: the next message goes when it answers
	}
	if next := p.lastChanges.Add(p.Spacing); owed && p.Spacing > 0 && now.Before(next) {
		p.heldUntil, p.spacedTo = next, next
		return nil // spaced: it goes at the end of the spacing, with what comes meanwhile
	}
	if fresh && p.Gather > 0 && !p.owedSince.Before(p.lastChanges.Add(p.Spacing)) {
		// The first change after a quiet spell (one that came within the
		// spacing goes at its end, gathered already).
		if until := p.owedSince.Add(p.Gather); now.Before(until) {
			p.heldUntil = until
			return nil
		}
	}
	var send []int32
	exact := p.heard && p.have == haveExact
	if owed {
		send = p.toSend(l)
	}

	var have []Have
	switch {
	case !allTheirs:
	case exact:
		// What the message carries brings the peer to our heads.
		have = []Have{{LastSync: ours}}
	default:
		have = p.haveSince(l)
	}
	if exact || !allTheirs {
		p.ours = ownFilter{} // not needed while its heads say what it lacks
	}
	out := &Outgoing{Message: Message{V2: p.joins, Heads: ours, Need: ourNeed, Have: have}, Indices: send, Joined: p.joins, log: l}
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
	p.work = min(maxWork, p.work+len(send))
	// What it asked for and lacked is sent (the refunds for it stand):
	// it asks again if it must.
	p.asked, p.lacks, p.lacksFrom, p.refunded = nil, nil, l.n, 0
	p.inFlight = true
	p.awaitUntil, p.heldUntil, p.owedSince, p.brought = time.Time{}, time.Time{}, time.Time{}, false
	if len(send) > 0 {
		p.awaitUntil = now.Add(min(MaxAnswerWait, max(AnswerWait, 2*p.took)))
		p.lastChanges = now
		if late := now.Sub(spacedTo); !spacedTo.IsZero() && late >= 0 && late <= p.Spacing/4 {
			p.lastChanges = spacedTo // released by the spacing, however late its timer
		}
		p.awaiting = true
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

// owes reports whether the peer is owed changes: asked for, or lacked
// and not sent. Its cost is the lacks already sent, each looked at once.
func (p *State) owes(l *Log) bool {
	if len(p.asked) > 0 {
		return true
	}
	if p.have == haveNone {
		return false
	}
	p.lacks = slices.DeleteFunc(p.lacks, p.sent.has)
	return len(p.lacks) > 0 || p.sent.countIn(p.lacksFrom, l.n) < int(l.n-p.lacksFrom)
}

// toSend returns the changes the peer is owed, in log order, the ones it
// asked for by hash first (sent before or not: it lacks them). Its cost
// is what it returns and the spans of what was sent.
func (p *State) toSend(l *Log) []int32 {
	if p.have == haveNone {
		return p.asked
	}
	rest := slices.Clip(p.lacks)
	n := len(rest)
	p.sent.gaps(p.lacksFrom, l.n, func(x int32) bool { rest = append(rest, x); return true })
	l.visited += int64(len(rest) - n)
	return withFirst(p.asked, rest)
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

// ownFilter is a bloom filter of the log's changes since some heads, as
// a have entry carries it: made once for those heads and grown as the
// log takes changes (each new change is one since them), made again at
// twice the size when it is full, so each change costs a few additions.
// It is made for more hashes than it holds, which a reader takes as it
// takes any filter: its bits say what it holds.
type ownFilter struct {
	key  uint64 // digest of the heads it is of
	upTo int32  // the log's length when it last took changes
	held int
	f    Bloom
	made bool
}

// haveSince is automerge's have entry: the shared heads, and a bloom
// filter of the changes since them. The filter draws on the peer's work
// (a unit per change walked or put in it); if that runs out the message
// goes with no have entry: the peer then sends only the heads asked of
// it, and their dependencies are asked for as they come.
func (p *State) haveSince(l *Log) []Have {
	o := &p.ours
	key := hashesDigest(p.shared)
	switch {
	case !o.made || o.key != key:
		o.fill(l, p.shared, key, &p.work)
	case o.upTo < l.n && o.held+int(l.n-o.upTo) > o.f.Entries():
		o.fill(l, p.shared, key, &p.work) // full: made again, twice the size
	case o.upTo < l.n:
		for x := o.upTo; x < l.n; x++ {
			o.f.add(&l.at(x).hash)
		}
		l.visited += int64(l.n - o.upTo)
		o.held += int(l.n - o.upTo)
		o.upTo = l.n
	}
	if !o.made {
		return nil // unpaid: no have entry, and the peer sends what is asked of it
	}
	have := Have{LastSync: slices.Clone(p.shared)}
	if o.held > 0 {
		have.Bloom = o.f.Encode()
	}
	return []Have{have}
}

// fill makes the filter anew for the changes since shared, with room for
// as many again if it is growing; made is false if work ran out.
func (o *ownFilter) fill(l *Log, shared []Hash, key uint64, work *int) {
	growing := o.made && o.key == key
	o.made, o.f = false, Bloom{}
	since, ok := l.sinceWithin(shared, nil, work, 0)
	if !ok || *work < len(since) {
		return // unpaid
	}
	*work -= len(since)
	size := len(since)
	if growing {
		size *= 2
	}
	o.f = newBloom(size)
	for _, x := range since {
		o.f.add(&l.at(x).hash)
	}
	l.visited += int64(len(since))
	o.key, o.upTo, o.held, o.made = key, l.n, len(since), true
}

// hashesDigest sums a list of hashes.
func hashesDigest(hs []Hash) uint64 {
	var h maphash.Hash
	h.SetSeed(digestSeed)
	for i := range hs {
		h.Write(hs[i][:])
	}
	return h.Sum64()
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
