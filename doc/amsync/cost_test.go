package amsync

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"testing"
	"time"
)

// The cost model of a peer's sync state: what a message makes the log
// visit (walks, filter tests, filter additions) is paid for by the
// message's bytes (workFor) and by the changes the peer is sent or found
// to lack; what the state keeps of a message is bounded by Holds and by
// what the peer is owed. These tests feed crafted messages and hold the
// work to that bound, counted (Log.visited), not timed.

// allowed is what a message of size bytes may make the log visit, given
// the changes the peer was sent in answer. It is paid as the messages
// come and spent as the work is done: a peer sent a document has paid
// for a walk of it, once.
func allowed(m *Message, sent int) int64 { return int64(workFor(m) + 4*sent + 64) }

// account sums what a peer paid and what its messages cost.
type account struct{ paid, cost int64 }

// message reads m into p, answers it, and checks that all the work so
// far is paid for.
func (a *account) message(t *testing.T, p *State, l *Log, m *Message, now time.Time) *Outgoing {
	t.Helper()
	var out *Outgoing
	a.cost += visits(l, func() {
		receive(t, p, l, m)
		out = p.Generate(l, nil, nil, now)
	})
	sent := 0
	if out != nil {
		sent = len(out.Indices)
	}
	a.paid += allowed(m, sent)
	if a.cost > a.paid {
		t.Fatalf("the messages visited %d changes; they paid for %d (this one: %d bytes, %d changes sent)", a.cost, a.paid, m.size(), sent)
	}
	return out
}

// visits returns how many changes f made the log visit.
func visits(l *Log, f func()) int64 {
	before := l.visited
	f()
	return l.visited - before
}

// receive reads m into p as a peer's message would be, the log's heads
// unchanged by it.
func receive(t *testing.T, p *State, l *Log, m *Message) {
	t.Helper()
	if _, err := Decode(m.Encode()); err != nil {
		t.Fatalf("the crafted message does not read: %v", err)
	}
	p.Receive(l, m, l.Heads())
}

// saturated returns a bloom filter made for n entries with every bit set:
// it says it holds every hash.
func saturated(n int) []byte {
	b := newBloom(n)
	for i := range b.bits {
		b.bits[i] = 0xff
	}
	return b.Encode()
}

// sparse returns a filter made for n entries with no bit set: it says the
// peer holds nothing.
func sparse(n int) []byte { return newBloom(n).Encode() }

// withLargeChange adds a change of size bytes on top of l and returns its
// hash.
func withLargeChange(l *Log, size int) Hash {
	h := sha256.Sum256([]byte("large"))
	deps := l.Heads()
	raw := typedChange(h, deps)
	raw = append(raw, make([]byte, size)...)
	binary.PutUvarint(raw[9:], 0) // a length no strip matches: kept whole
	if _, err := l.Add(h, deps, raw); err != nil {
		panic(err)
	}
	return h
}

// A need list naming one large change 200,000 times (6.4 MB) made one
// reply of 200,000 copies of it, and the node ran out of memory encoding
// it. A change goes at most once in a message, however often it is asked
// for.
func TestAChangeAskedForManyTimesGoesOnce(t *testing.T) {
	l := typedLog(100)
	big := withLargeChange(l, 1<<20)
	need := make([]Hash, 200_000)
	for i := range need {
		need[i] = big
	}
	p := NewState()
	receive(t, p, l, &Message{Heads: l.Heads(), Need: need, Have: []Have{{LastSync: l.Heads()}}})
	out := p.Generate(l, nil, nil, time.Now())
	if out == nil || len(out.Indices) != 1 {
		t.Fatalf("the answer carries %v changes, want the one asked for", out)
	}
	if n := len(out.Encode()); n > 1<<20+1<<10 {
		t.Fatalf("the answer is %d bytes, for one change of 1 MiB", n)
	}
	if kept := p.Kept(); kept > 1<<10 {
		t.Fatalf("the sync state keeps %d bytes of a need list of one change", kept)
	}
}

// A filter with every bit set, sent with a head the log lacks and no
// last sync point, made every Generate for its peer test each change of
// the log against it and find it held, before deciding there was nothing
// to send: fifty bytes froze a 100,000-change document for everyone. A
// filter with more bits set than its entries could set is refused as
// the message is read, at the cost of its bytes.
func TestASaturatedFilterIsRefusedAsItIsRead(t *testing.T) {
	m := &Message{Heads: unheardHashes(1, 7), Have: []Have{{Bloom: saturated(16)}}}
	if _, err := Decode(m.Encode()); !errors.Is(err, ErrBloom) {
		t.Fatalf("a saturated filter: err = %v, want ErrBloom", err)
	}
	// As full as automerge's can be: 7 bits for each entry.
	b := newBloom(16)
	for i := range 16 * bloomProbes {
		b.bits[i/8] |= 1 << (i % 8)
	}
	m.Have[0].Bloom = b.Encode()
	if _, err := Decode(m.Encode()); err != nil {
		t.Fatalf("a filter with 7 bits an entry: %v", err)
	}
}

// A filter as full as one can be (7 bits an entry, set where they hold
// most), with a head the log lacks and no last sync point, costs its
// entries and what its peer is sent, message after message: a filter
// that holds too many is trusted no further, and what it claimed is
// sent.
func TestAFullFilterCostsItsEntriesAndWhatIsSent(t *testing.T) {
	l := typedLog(100_000)
	p := NewState()
	var a account
	for i := range 50 {
		b := newBloom(64)
		for k := range 64 * bloomProbes {
			b.bits[k/8] |= 1 << (k % 8) // the first 70%: as many hashes held as a filter can
		}
		m := &Message{Heads: unheardHashes(1, i), Have: []Have{{Bloom: b.Encode()}}}
		a.message(t, p, l, m, time.Now().Add(time.Duration(i)*time.Hour))
	}
}

// The same with a filter that holds nothing: the peer says it lacks the
// whole document, and is sent it, once. Messages after that which say
// the same (each a little different, so none is a repeat) cost their own
// bytes, not a pass over the document the peer has been sent.
func TestAPeerThatKeepsSayingItLacksEverythingIsNotWalkedAgain(t *testing.T) {
	const n = 100_000
	l := typedLog(n)
	p := NewState()
	var a account
	out := a.message(t, p, l, &Message{Heads: unheardHashes(1, 0), Have: []Have{{Bloom: sparse(16)}}}, time.Now())
	if out == nil || len(out.Indices) != n {
		t.Fatalf("the first answer: %v", out)
	}
	old := l.HashAt(10)
	for i := range 200 {
		heads := unheardHashes(1, i+1)
		if i%2 == 1 {
			heads = append(heads, old)
			sortHashes(heads)
		}
		m := &Message{Heads: heads, Have: []Have{{Bloom: sparse(16)}}}
		if i%3 == 2 {
			m.Have[0].LastSync = []Hash{old}
		}
		a.message(t, p, l, m, time.Now().Add(time.Duration(i+1)*time.Hour))
	}
	// Spent as it goes: the document sent paid for a walk or two of it,
	// not one per message.
	if a.cost > 4*n+200*1200 {
		t.Fatalf("200 messages visited %d changes", a.cost)
	}
}

// A peer that names old heads of a long document, once it has been sent
// the document, costs its bytes too, whichever old heads it names.
func TestOldHeadsCostTheirBytesOnceTheDocumentIsSent(t *testing.T) {
	const n = 100_000
	l := typedLog(n)
	p := NewState()
	var a account
	if out := a.message(t, p, l, &Message{Have: []Have{{}}}, time.Now()); out == nil || len(out.Indices) != n {
		t.Fatal("the document was not sent")
	}
	for i := range 200 {
		old := []Hash{l.HashAt(int32(i))}
		a.message(t, p, l, &Message{Heads: old, Have: []Have{{LastSync: old}}}, time.Now().Add(time.Duration(i+1)*time.Hour))
	}
	if a.cost > 4*n+200*1200 {
		t.Fatalf("200 messages visited %d changes", a.cost)
	}
}

// A repeat of the message before costs a lookup: nothing is walked or
// tested again, and what it asks for that is on its way is not sent
// again.
func TestARepeatedMessageCostsALookup(t *testing.T) {
	const n = 20_000
	l := typedLog(n)
	p := NewState()
	m := &Message{Heads: unheardHashes(1, 3), Need: []Hash{l.HashAt(5)}, Have: []Have{{Bloom: sparse(n)}}}
	var a account
	if out := a.message(t, p, l, m, time.Now()); out == nil || len(out.Indices) != n {
		t.Fatal("the document was not sent")
	}
	// The first answer after the document went makes the filter of the
	// log the peer's have entries are answered with (paid by what it was
	// sent); each repeat after that is a lookup.
	a.message(t, p, l, m, time.Now().Add(time.Hour))
	for i := range 10 {
		before := a.cost
		out := a.message(t, p, l, m, time.Now().Add(time.Duration(i+2)*time.Hour))
		if cost := a.cost - before; cost != 0 {
			t.Fatalf("repeat %d visited %d changes", i, cost)
		}
		if out != nil && len(out.Indices) > 0 {
			t.Fatalf("repeat %d was sent %d changes again", i, len(out.Indices))
		}
	}
}

// What a sync state keeps of a message is its few hashes and what the
// peer is owed, never the message's filters or need list: a 16 MB
// message of filters and needs was kept whole until the peer's next.
func TestASyncStateKeepsNoFilterNorNeedList(t *testing.T) {
	l := typedLog(1000)
	need := make([]Hash, 100_000)
	for i := range need {
		need[i] = l.HashAt(int32(i % 1000))
	}
	filter := sparse(8 << 20 / 10 * 8) // 8 MiB of bits
	m := &Message{Heads: unheardHashes(MaxHeads, 9), Need: need, Have: []Have{{Bloom: filter}}}
	p := NewState()
	receive(t, p, l, m)
	if kept, limit := p.Kept(), Holds(m)+4*l.Len(); kept > limit {
		t.Fatalf("the state keeps %d bytes of a %d-byte message; Holds says %d", kept, m.size(), limit)
	}
	// Its heads, kept, and those the log lacks, found by hash: nothing of
	// the need list's 3.2 MB nor of the 8 MiB filter.
	heads := (3*32 + 48) * MaxHeads
	if kept := p.Kept(); kept > heads+4*l.Len()+4096 {
		t.Fatalf("the state keeps %d bytes: more than the heads and what is owed", kept)
	}
	p.Generate(l, nil, nil, time.Now())
	if kept := p.Kept(); kept > heads+4096 {
		t.Fatalf("after the answer the state keeps %d bytes", kept)
	}
}

// Only automerge's filters are read: 10 bits per entry and 7 probes.
func TestFiltersOfOtherParametersAreRefused(t *testing.T) {
	for _, params := range [][2]uint64{{10, 8}, {10, 64}, {64, 7}, {1, 1}} {
		b := binary.AppendUvarint(nil, 8)
		b = binary.AppendUvarint(b, params[0])
		b = binary.AppendUvarint(b, params[1])
		b = append(b, bytes.Repeat([]byte{0xff}, int(8*params[0]+7)/8)...)
		if _, err := ParseBloom(b); !errors.Is(err, ErrBloom) {
			t.Errorf("%d bits per entry, %d probes: err = %v", params[0], params[1], err)
		}
	}
	if _, err := ParseBloom(sparse(8)); err != nil {
		t.Fatal(err)
	}
}

// A message may name MaxHeads heads beyond the document's own, however
// many those are (nodes of a cluster that each took changes apart can
// give a document more than MaxHeads), and no more.
func TestAMessageNamesAtMostMaxHeadsBeyondTheDocuments(t *testing.T) {
	l := NewLog()
	for i := range 3 * MaxHeads / 2 { // as many independent changes: as many heads
		h := sha256.Sum256(binary.AppendUvarint([]byte("apart"), uint64(i)))
		if _, err := l.Add(h, nil, typedChange(h, nil)); err != nil {
			t.Fatal(err)
		}
	}
	m := &Message{Heads: l.Heads()}
	if err := CheckHeads(l, m); err != nil {
		t.Fatalf("the document's own %d heads: %v", len(m.Heads), err)
	}
	m.Heads = unheardHashes(MaxHeads+len(l.Heads()), 4)
	if err := CheckHeads(l, m); err != nil {
		t.Fatalf("%d heads: %v", len(m.Heads), err)
	}
	m.Heads = unheardHashes(MaxHeads+len(l.Heads())+1, 4)
	if err := CheckHeads(l, m); !errors.Is(err, ErrBounds) {
		t.Fatalf("%d heads: err = %v, want ErrBounds", len(m.Heads), err)
	}
}
