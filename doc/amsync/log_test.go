package amsync

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"
)

// randomLog builds a log of n changes with random dependencies on recent
// changes (branches and merges), with made-up hashes and bytes.
func randomLog(t testing.TB, rng *rand.Rand, n int) (*Log, [][]int32) {
	l := NewLog()
	deps := make([][]int32, n)
	for i := range n {
		var ds []Hash
		if i > 0 {
			for range 1 + rng.IntN(2) {
				d := int32(max(0, i-1-rng.IntN(min(i, 6))))
				if !slices.Contains(deps[i], d) {
					deps[i] = append(deps[i], d)
					ds = append(ds, l.HashAt(d))
				}
			}
		}
		h := sha256.Sum256(binary.AppendUvarint(nil, uint64(i)))
		if _, err := l.Add(h, ds, []byte{byte(i), byte(i >> 8)}); err != nil {
			t.Fatal(err)
		}
	}
	return l, deps
}

func ancestors(deps [][]int32, from []int32) map[int32]bool {
	seen := map[int32]bool{}
	stack := slices.Clone(from)
	for len(stack) > 0 {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[x] {
			continue
		}
		seen[x] = true
		stack = append(stack, deps[x]...)
	}
	return seen
}

func TestSinceIsWhatTheHeadsLack(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		n := 1 + rng.IntN(200)
		l, deps := randomLog(t, rng, n)
		var from []int32
		var hs []Hash
		for range rng.IntN(4) {
			x := int32(rng.IntN(n))
			from = append(from, x)
			hs = append(hs, l.HashAt(x))
		}
		anc := ancestors(deps, from)
		var want []int32
		for i := range int32(n) {
			if !anc[i] {
				want = append(want, i)
			}
		}
		if got := l.Since(hs); !slices.Equal(got, want) && (len(got) > 0 || len(want) > 0) {
			t.Fatalf("round %d: Since = %v, want %v", round, got, want)
		}
		// The heads are the changes nothing depends on.
		var heads []Hash
		for i := range int32(n) {
			depended := false
			for _, ds := range deps {
				if slices.Contains(ds, i) {
					depended = true
				}
			}
			if !depended {
				heads = append(heads, l.HashAt(i))
			}
		}
		sortHashes(heads)
		if !slices.Equal(l.Heads(), heads) {
			t.Fatalf("round %d: heads differ", round)
		}
		// Removing ancestors from a set of sent changes.
		var s spanSet
		sent := map[int32]bool{}
		for range rng.IntN(50) {
			x := int32(rng.IntN(n))
			s.add(x)
			sent[x] = true
		}
		work := n // enough for any walk of this log
		l.withoutAncestors(&s, hs, &work)
		for i := range int32(n) {
			if want := sent[i] && !anc[i]; s.has(i) != want {
				t.Fatalf("round %d: after removing ancestors, has(%d) = %v", round, i, !want)
			}
		}
	}
}

func TestAChangeWithAMissingDependencyIsNotAdded(t *testing.T) {
	l := NewLog()
	if _, err := l.Add(Hash{1}, []Hash{{2}}, []byte{1}); err == nil {
		t.Fatal("added")
	}
	if l.Len() != 0 || len(l.deps) != 0 {
		t.Fatal("the log changed")
	}
}

func TestSpanSet(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var s spanSet
	ref := map[int32]bool{}
	for range 20000 {
		x := int32(rng.IntN(300))
		if rng.IntN(2) == 0 {
			s.add(x)
			ref[x] = true
		} else {
			s.remove(x)
			delete(ref, x)
		}
	}
	for i := range int32(300) {
		if s.has(i) != ref[i] {
			t.Fatalf("has(%d) = %v", i, s.has(i))
		}
	}
	for i := 1; i < len(s.s); i++ {
		if s.s[i-1].hi >= s.s[i].lo {
			t.Fatalf("spans %v and %v touch", s.s[i-1], s.s[i])
		}
	}
}

// typedLog is a log of n changes as a typist makes them: each depends on
// the one before and is 112 bytes written as automerge writes a change
// (a one-character insert).
func typedLog(n int) *Log {
	l := NewLog()
	var prev []Hash
	for i := range n {
		h := sha256.Sum256(binary.AppendUvarint(nil, uint64(i)))
		if _, err := l.Add(h, prev, typedChange(h, prev)); err != nil {
			panic(err)
		}
		prev = []Hash{h}
	}
	return l
}

// typedChange is a change chunk of 112 bytes with hash h (its checksum)
// and these dependencies, the rest of its body filler.
func typedChange(h Hash, deps []Hash) []byte {
	body := binary.AppendUvarint(nil, uint64(len(deps)))
	for _, d := range deps {
		body = append(body, d[:]...)
	}
	raw := append(append([]byte{}, chunkMagic...), h[:4]...)
	raw = append(raw, 1, 0)
	body = append(body, make([]byte, 112-len(raw)-len(body))...)
	raw[9] = byte(len(body))
	return append(raw, body...)
}

// BenchmarkLogMemoryPerTypedChange reports the heap a log holds per
// typed change (112 bytes of change each) at 100,000 changes.
func BenchmarkLogMemoryPerTypedChange(b *testing.B) {
	const n = 100_000
	for range b.N {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		l := typedLog(n)
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/change")
		runtime.KeepAlive(l)
	}
}

// BenchmarkTypingIntoALongHistory is the engine's work for one keystroke
// into a document of 100,000 changes: the change is added, the typist's
// message received and answered, and a reader level with the document
// sent it and its acknowledgement received.
func BenchmarkTypingIntoALongHistory(b *testing.B) {
	for _, n := range []int{0, 100_000} {
		b.Run(map[int]string{0: "empty", 100_000: "100k"}[n], func(b *testing.B) {
			l := typedLog(n)
			typist, reader := NewPeerAt(l.Heads()), NewPeerAt(l.Heads())
			level := &Message{Heads: l.Heads(), Have: []Have{{LastSync: l.Heads()}}}
			typist.Receive(l, level, l.Heads())
			reader.Receive(l, level, l.Heads())
			raw := make([]byte, 112)
			var now = typist.awaitUntil
			b.ResetTimer()
			for i := range b.N {
				before := l.Heads()
				h := sha256.Sum256(binary.AppendUvarint([]byte{1}, uint64(i)))
				if _, err := l.Add(h, before, raw); err != nil {
					b.Fatal(err)
				}
				typist.Receive(l, &Message{Heads: l.Heads(), Have: []Have{{LastSync: before}}, Changes: [][]byte{raw}}, before)
				typist.Generate(l, nil, nil, now)
				out := reader.Generate(l, nil, nil, now)
				if out == nil || len(out.Indices) != 1 {
					b.Fatalf("the reader was sent %v", out)
				}
				reader.Receive(l, &Message{Heads: l.Heads(), Have: []Have{{LastSync: l.Heads()}}}, l.Heads())
			}
		})
	}
}

// A peer that asks by hash for a change it was sent (it could not apply
// it) is sent it again.
func TestWhatAPeerAsksForGoesAgain(t *testing.T) {
	l := typedLog(3)
	p := NewState()
	at := []Hash{l.HashAt(0)}
	p.Receive(l, &Message{Heads: at, Have: []Have{{LastSync: at}}}, l.Heads())
	out := p.Generate(l, nil, nil, time.Unix(0, 0))
	if out == nil || len(out.Indices) != 2 {
		t.Fatalf("a peer at the first change was sent %v", out)
	}
	p.Receive(l, &Message{Heads: at, Need: []Hash{l.HashAt(1)}, Have: []Have{{LastSync: at}}}, l.Heads())
	out = p.Generate(l, nil, nil, time.Unix(0, 0))
	if out == nil || len(out.Indices) != 1 || out.Indices[0] != 1 {
		t.Fatalf("asked for the second change again, the peer was sent %v", out)
	}
}

// With Spacing, a change that comes within it of the last message that
// brought the peer changes waits for its end (the peer has answered), and
// goes with what came meanwhile; the first after a quiet spell goes at
// once.
func TestSpacingHoldsChangesUntilItsEnd(t *testing.T) {
	l := typedLog(1)
	p := NewPeerAt(l.Heads())
	p.Spacing = 100 * time.Millisecond
	level := func() {
		p.Receive(l, &Message{Heads: l.Heads(), Have: []Have{{LastSync: l.Heads()}}}, l.Heads())
	}
	level()
	t0 := time.Unix(100, 0)
	add := func(i int) {
		h := Hash{byte(i), 1}
		if _, err := l.Add(h, l.Heads(), []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	add(1)
	if out := p.Generate(l, nil, nil, t0); out == nil || len(out.Indices) != 1 {
		t.Fatalf("the first change after a quiet spell: %v, want it at once", out)
	}
	level() // its answer, 10 ms after the message
	if out := p.Generate(l, nil, nil, t0.Add(10*time.Millisecond)); out != nil {
		t.Fatalf("the peer's answer was answered %v", out)
	}
	add(2)
	add(3)
	if out := p.Generate(l, nil, nil, t0.Add(30*time.Millisecond)); out != nil {
		t.Fatalf("within the spacing the peer was sent %v", out)
	}
	if got, want := p.HeldUntil(), t0.Add(100*time.Millisecond); !got.Equal(want) {
		t.Fatalf("held until %v, want %v (the spacing from the last message)", got, want)
	}
	if out := p.Generate(l, nil, nil, t0.Add(99*time.Millisecond)); out != nil {
		t.Fatalf("before the spacing's end: %v", out)
	}
	if out := p.Generate(l, nil, nil, t0.Add(100*time.Millisecond)); out == nil || len(out.Indices) != 2 {
		t.Fatalf("at the end of the spacing: %v, want both changes", out)
	}
	if !p.HeldUntil().IsZero() {
		t.Fatal("still held after the message went")
	}
}

// spacedReader is a reader in a simulation of the spacing: it answers
// each message that brings it changes its round trip after it came.
type spacedReader struct {
	name    string
	rtt     time.Duration
	p       *State
	answer  time.Time // when it answers the message it was sent, zero if none
	heads   []Hash    // that message's heads
	sent    []time.Time
	has     int // changes it holds
	longest time.Duration
}

// simulateSpacing adds a change every `every` for 3 s, then lets a quiet
// second pass, generating for each reader every millisecond (more often
// than the room does, so it must send no more than the room would). It
// records when each reader was sent changes and how long the longest
// change waited to go.
func simulateSpacing(t *testing.T, spacing, every time.Duration, readers []*spacedReader) *Log {
	t.Helper()
	l := typedLog(1)
	for _, r := range readers {
		r.p = NewPeerAt(l.Heads())
		r.p.Spacing = spacing
		r.p.Receive(l, &Message{Heads: l.Heads(), Have: []Have{{LastSync: l.Heads()}}}, l.Heads())
		r.has = l.Len()
	}
	t0 := time.Unix(100, 0)
	added := map[int32]time.Time{}
	for ms := range 4000 {
		now := t0.Add(time.Duration(ms) * time.Millisecond)
		if ms < 3000 && ms%int(every/time.Millisecond) == 0 {
			h := Hash{byte(ms), byte(ms >> 8), 7}
			if _, err := l.Add(h, l.Heads(), typedChange(h, l.Heads())); err != nil {
				t.Fatal(err)
			}
			added[int32(l.Len()-1)] = now
		}
		for _, r := range readers {
			if !r.answer.IsZero() && !now.Before(r.answer) {
				r.p.Receive(l, &Message{Heads: r.heads, Have: []Have{{LastSync: r.heads}}}, l.Heads())
				r.answer = time.Time{}
			}
			out := r.p.Generate(l, nil, nil, now)
			if out == nil || len(out.Indices) == 0 {
				continue
			}
			for _, x := range out.Indices {
				r.longest = max(r.longest, now.Sub(added[x]))
			}
			r.has += len(out.Indices)
			r.sent = append(r.sent, now)
			r.answer, r.heads = now.Add(r.rtt), out.Heads
		}
	}
	for _, r := range readers {
		if r.has != l.Len() {
			t.Fatalf("%s reader: holds %d of %d changes", r.name, r.has, l.Len())
		}
		t.Logf("%s reader: %d messages, the longest wait %v", r.name, len(r.sent), r.longest)
	}
	return l
}

// With changes coming every 25 ms, the messages that bring a peer
// changes go the spacing apart, or its round trip apart if that is
// longer: each waits for the peer's answer to the last. A peer that
// answers in 1 ms or 60 ms is sent as often as the spacing allows, one
// that takes 150 ms less often, and every change reaches each, none
// waiting longer than the longer of the two and the gap between changes.
func TestSpacingRunsFromTheLastMessage(t *testing.T) {
	const spacing, every = 100 * time.Millisecond, 25 * time.Millisecond
	readers := []*spacedReader{{name: "fast", rtt: time.Millisecond}, {name: "slow", rtt: 60 * time.Millisecond},
		{name: "slower than the spacing", rtt: 150 * time.Millisecond}}
	simulateSpacing(t, spacing, every, readers)
	for _, r := range readers {
		apart := max(spacing, r.rtt)
		for i := 1; i < len(r.sent); i++ {
			if gap := r.sent[i].Sub(r.sent[i-1]); gap < apart {
				t.Fatalf("%s reader: messages %v apart, under %v", r.name, gap, apart)
			}
		}
		if bound := apart + every; r.longest > bound {
			t.Errorf("%s reader: a change waited %v, over %v", r.name, r.longest, bound)
		}
	}
	fast, slow, slower := readers[0], readers[1], readers[2]
	if d := len(fast.sent) - len(slow.sent); d < -1 || d > 1 {
		t.Errorf("the fast reader was sent %d messages, the slow one %d: want as many", len(fast.sent), len(slow.sent))
	}
	if len(slower.sent) >= len(slow.sent) {
		t.Errorf("the reader slower than the spacing was sent %d messages, the slow one %d: want fewer", len(slower.sent), len(slow.sent))
	}
}

// One person typing sends a change about every spacing (a stock client
// sends at most one message every 100 ms): each reaches a reader the
// moment it comes, whatever the reader's round trip within the spacing.
// Timed from the reader's answer, the spacing would hold each change a
// round trip longer than the last until one waited a whole spacing.
func TestASteadyWritersChangesAreNotHeld(t *testing.T) {
	const spacing = 100 * time.Millisecond
	readers := []*spacedReader{{name: "near", rtt: 2 * time.Millisecond}, {name: "far", rtt: 40 * time.Millisecond}}
	simulateSpacing(t, spacing, spacing, readers)
	for _, r := range readers {
		if r.longest > 0 {
			t.Errorf("%s reader: a change waited %v, want none held", r.name, r.longest)
		}
	}
}

// A peer that does not answer a message that brought it changes is sent
// the next one AnswerWait after it, not the spacing after.
func TestAPeerThatDoesNotAnswerWaitsForAnswerWait(t *testing.T) {
	l := typedLog(1)
	p := NewPeerAt(l.Heads())
	p.Spacing = 100 * time.Millisecond
	p.Receive(l, &Message{Heads: l.Heads(), Have: []Have{{LastSync: l.Heads()}}}, l.Heads())
	add := func(i int) {
		h := Hash{byte(i), 9}
		if _, err := l.Add(h, l.Heads(), []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Unix(100, 0)
	add(1)
	if out := p.Generate(l, nil, nil, t0); out == nil || len(out.Indices) != 1 {
		t.Fatalf("the first change: %v, want it at once", out)
	}
	add(2)
	if out := p.Generate(l, nil, nil, t0.Add(500*time.Millisecond)); out != nil {
		t.Fatalf("unanswered, the peer was sent %v", out)
	}
	if got, want := p.HeldUntil(), t0.Add(AnswerWait); !got.Equal(want) {
		t.Fatalf("held until %v, want %v", got, want)
	}
	if out := p.Generate(l, nil, nil, t0.Add(AnswerWait)); out == nil || len(out.Indices) != 1 {
		t.Fatalf("its answer overdue: %v, want the second change", out)
	}
}

// A peer whose last answer took long is waited for twice as long before
// it is sent the next message unanswered: a reader still busy with one
// message is not sent another it could not have read yet.
func TestAPeerThatAnsweredSlowlyIsWaitedForLonger(t *testing.T) {
	l := typedLog(1)
	p := NewPeerAt(l.Heads())
	p.Spacing = 100 * time.Millisecond
	answer := func() {
		p.Receive(l, &Message{Heads: l.Heads(), Have: []Have{{LastSync: l.Heads()}}}, l.Heads())
	}
	answer()
	add := func(i int) {
		h := Hash{byte(i), 8}
		if _, err := l.Add(h, l.Heads(), []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Unix(100, 0)
	add(1)
	if out := p.Generate(l, nil, nil, t0); out == nil || len(out.Indices) != 1 {
		t.Fatalf("the first change: %v, want it at once", out)
	}
	answer() // after 3 s
	if out := p.Generate(l, nil, nil, t0.Add(3*time.Second)); out != nil {
		t.Fatalf("its answer was answered %v", out)
	}
	add(2)
	t1 := t0.Add(3200 * time.Millisecond)
	if out := p.Generate(l, nil, nil, t1); out == nil || len(out.Indices) != 1 {
		t.Fatalf("answered, past the spacing: %v, want the second change", out)
	}
	add(3)
	if out := p.Generate(l, nil, nil, t1.Add(AnswerWait)); out != nil {
		t.Fatalf("unanswered for AnswerWait, a peer that took 3 s was sent %v", out)
	}
	if got, want := p.HeldUntil(), t1.Add(6*time.Second); !got.Equal(want) {
		t.Fatalf("held until %v, want %v (twice its last answer's time)", got, want)
	}
	if out := p.Generate(l, nil, nil, t1.Add(6*time.Second)); out == nil || len(out.Indices) != 1 {
		t.Fatalf("its answer overdue: %v, want the third change", out)
	}
}

// A peer whose message brings changes is answered at once with what it
// lacks, spacing or not, as the stock server answers the sender of every
// message: a typist's next keystroke waits on its own client's throttle,
// which the answer restarts, so a spaced answer would lock the typists'
// sends to the readers' spacing and make every change wait for nearly
// the whole of it.
func TestAPeerThatBringsChangesIsAnsweredAtOnce(t *testing.T) {
	l := typedLog(1)
	p := NewPeerAt(l.Heads())
	p.Spacing = 100 * time.Millisecond
	p.Receive(l, &Message{Heads: l.Heads(), Have: []Have{{LastSync: l.Heads()}}}, l.Heads())
	t0 := time.Unix(100, 0)
	other := Hash{2, 1}
	if _, err := l.Add(other, l.Heads(), []byte{2}); err != nil {
		t.Fatal(err)
	}
	if out := p.Generate(l, nil, nil, t0); out == nil || len(out.Indices) != 1 {
		t.Fatalf("the first change after a quiet spell: %v, want it at once", out)
	}
	before := l.Heads()
	p.Receive(l, &Message{Heads: before, Have: []Have{{LastSync: before}}}, before)
	third := Hash{3, 1}
	if _, err := l.Add(third, before, []byte{3}); err != nil {
		t.Fatal(err)
	}
	if out := p.Generate(l, nil, nil, t0.Add(10*time.Millisecond)); out != nil {
		t.Fatalf("a peer that only answered was sent %v within the spacing", out)
	}
	// Its own change, made concurrently with the third.
	mine := Hash{4, 1}
	before = l.Heads()
	if _, err := l.Add(mine, []Hash{other}, []byte{4}); err != nil {
		t.Fatal(err)
	}
	p.Receive(l, &Message{Heads: []Hash{mine}, Have: []Have{{LastSync: []Hash{other}}}, Changes: [][]byte{{4}}}, before)
	out := p.Generate(l, nil, nil, t0.Add(20*time.Millisecond))
	if out == nil || len(out.Indices) != 1 || l.HashAt(out.Indices[0]) != third {
		t.Fatalf("the peer that brought a change was answered %v, want the third change at once", out)
	}
}

// With Gather, the first change after a quiet spell waits that long for
// the changes that come with it, and they go in one message; a change
// within the spacing goes at its end without a further wait; a sender's
// answer and a new reader's first sync go at once.
func TestGatherJoinsChangesThatComeTogether(t *testing.T) {
	const spacing, gather = 100 * time.Millisecond, 10 * time.Millisecond
	l := typedLog(3)
	p := NewPeerAt(l.Heads())
	p.Spacing, p.Gather = spacing, gather
	p.Receive(l, &Message{Heads: l.Heads(), Have: []Have{{LastSync: l.Heads()}}}, l.Heads())
	add := func(b byte) Hash {
		h := Hash{b, 9}
		if _, err := l.Add(h, l.Heads(), typedChange(h, l.Heads())); err != nil {
			t.Fatal(err)
		}
		return h
	}
	t0 := time.Unix(100, 0)
	add(1)
	if out := p.Generate(l, nil, nil, t0); out != nil {
		t.Fatalf("the first change after a quiet spell went at once: %v", out)
	}
	if got := p.HeldUntil(); !got.Equal(t0.Add(gather)) {
		t.Fatalf("held until %v, want %v", got, t0.Add(gather))
	}
	add(2)
	if out := p.Generate(l, nil, nil, t0.Add(4*time.Millisecond)); out != nil || !p.HeldUntil().Equal(t0.Add(gather)) {
		t.Fatalf("a change within the gather: %v, held until %v; want it held to %v", out, p.HeldUntil(), t0.Add(gather))
	}
	out := p.Generate(l, nil, nil, t0.Add(gather))
	if out == nil || len(out.Indices) != 2 {
		t.Fatalf("at the gather's end: %v, want both changes", out)
	}
	// It answers; a change within the spacing goes at its end, ungathered.
	sentAt := t0.Add(gather)
	p.Receive(l, &Message{Heads: out.Heads, Have: []Have{{LastSync: out.Heads}}}, l.Heads())
	if out := p.Generate(l, nil, nil, t0.Add(15*time.Millisecond)); out != nil {
		t.Fatalf("an answer that asked nothing was answered %v", out)
	}
	add(3)
	if out := p.Generate(l, nil, nil, t0.Add(50*time.Millisecond)); out != nil || !p.HeldUntil().Equal(sentAt.Add(spacing)) {
		t.Fatalf("a change within the spacing: %v, held until %v; want %v", out, p.HeldUntil(), sentAt.Add(spacing))
	}
	out = p.Generate(l, nil, nil, sentAt.Add(spacing))
	if out == nil || len(out.Indices) != 1 {
		t.Fatalf("at the spacing's end: %v, want the change at once", out)
	}
	p.Receive(l, &Message{Heads: out.Heads, Have: []Have{{LastSync: out.Heads}}}, l.Heads())
	quiet := t0.Add(time.Second)
	if out := p.Generate(l, nil, nil, quiet); out != nil {
		t.Fatalf("nothing owed, sent %v", out)
	}
	// A quiet spell later the peer sends a change of its own while it is
	// owed another's: it is answered at once with that one.
	other := add(4)
	mine := Hash{5, 9}
	before := l.Heads()
	if _, err := l.Add(mine, out.Heads, typedChange(mine, out.Heads)); err != nil {
		t.Fatal(err)
	}
	if got := p.Generate(l, nil, nil, quiet); got != nil {
		t.Fatalf("the change after a quiet spell went at once: %v", got)
	}
	p.Receive(l, &Message{Heads: []Hash{mine}, Have: []Have{{LastSync: out.Heads}}, Changes: [][]byte{{5}}}, before)
	got := p.Generate(l, nil, nil, quiet.Add(time.Millisecond))
	if got == nil || len(got.Indices) != 1 || l.HashAt(got.Indices[0]) != other {
		t.Fatalf("the peer that brought a change was answered %v, want the other change at once", got)
	}
	// A new reader is sent the document at once.
	r := NewState()
	r.Spacing, r.Gather = spacing, gather
	r.Receive(l, &Message{Have: []Have{{}}}, l.Heads())
	if got := r.Generate(l, nil, nil, quiet.Add(2*time.Millisecond)); got == nil || len(got.Indices) != l.Len() {
		t.Fatalf("a new reader was sent %v, want the whole document at once", got)
	}
}

// Changes whose hashes share their first 8 bytes (the index's key) are
// told apart by the whole hash, as dependencies too.
func TestHashesSharingAPrefixAreTold(t *testing.T) {
	l := NewLog()
	a, b, c := Hash{1, 2, 3}, Hash{1, 2, 3}, Hash{1, 2, 3}
	a[31], b[31], c[31] = 1, 2, 3
	for _, x := range []struct {
		h    Hash
		deps []Hash
	}{{a, nil}, {b, []Hash{a}}, {c, []Hash{a, b}}} {
		if ok, err := l.Add(x.h, x.deps, []byte{x.h[31]}); !ok || err != nil {
			t.Fatalf("add %x: %v %v", x.h[31], ok, err)
		}
	}
	for i, h := range []Hash{a, b, c} {
		if at, ok := l.IndexOf(h); !ok || at != int32(i) || !l.Has(h) || !l.HasBytes(h[:]) {
			t.Fatalf("change %d found at %d (%v)", i, at, ok)
		}
	}
	if d := (Hash{1, 2, 3, 0, 0, 0, 0, 0, 9}); l.Has(d) {
		t.Fatal("a hash sharing the prefix but never added is found")
	}
	if got := l.DepsAt(2); len(got) != 2 || got[0] != 0 || got[1] != 1 {
		t.Fatalf("deps of the third: %v", got)
	}
	if !l.IsHeads([]Hash{c}) {
		t.Fatal("the heads are not the third change")
	}
}

// A log that counts 2³¹-1 changes takes no more: Add says so with
// ErrTooLarge and leaves the log as it was.
func TestAFullLogRefusesAChange(t *testing.T) {
	l := NewLog()
	if _, err := l.Add(Hash{1}, nil, []byte("a")); err != nil {
		t.Fatal(err)
	}
	l.n = math.MaxInt32 // what the entries' 31-bit indices can name
	if ok, err := l.Add(Hash{2}, []Hash{{1}}, []byte("b")); ok || !errors.Is(err, ErrTooLarge) {
		t.Fatalf("a change past the log's count: added %v, %v", ok, err)
	}
	if l.Has(Hash{2}) || l.Bytes() != 1 {
		t.Fatalf("the refused change left a trace: held %v, %d bytes", l.Has(Hash{2}), l.Bytes())
	}
}

// The index finds every change it was given and none it was not, through
// the table's doublings and its wrap from the last slot to the first.
func TestTheIndexFindsWhatItHolds(t *testing.T) {
	l := NewLog()
	rnd := rand.New(rand.NewPCG(1, 2))
	var held []Hash
	for i := range 10_000 {
		var h Hash
		for k := range h {
			h[k] = byte(rnd.Uint32())
		}
		if i%7 == 0 {
			for k := range 8 { // the table's last slot, whatever its size
				h[k] = 0xff
			}
		}
		var deps []Hash
		if i > 0 {
			deps = []Hash{held[i-1]}
		}
		if ok, err := l.Add(h, deps, []byte{byte(i)}); !ok || err != nil {
			t.Fatalf("add %d: %v %v", i, ok, err)
		}
		held = append(held, h)
	}
	for i, h := range held {
		if at, ok := l.IndexOf(h); !ok || at != int32(i) {
			t.Fatalf("change %d found at %d (%v)", i, at, ok)
		}
		h[31]++
		if l.Has(h) {
			t.Fatalf("a hash never added, one bit from change %d, is found", i)
		}
	}
}

// Hashes made to share their first bytes, as a client could make its
// changes' hashes, still spread over the index: the probes stay short.
func TestHashesSharingLowBitsDoNotPileUp(t *testing.T) {
	l := NewLog()
	rnd := rand.New(rand.NewPCG(3, 4))
	var prev []Hash
	const n = 20_000
	for i := range n {
		var h Hash
		for k := 4; k < len(h); k++ { // the first 4 bytes all zero
			h[k] = byte(rnd.Uint32())
		}
		if ok, err := l.Add(h, prev, []byte{1}); !ok || err != nil {
			t.Fatalf("add %d: %v %v", i, ok, err)
		}
		prev = []Hash{h}
	}
	mask := uint64(len(l.index) - 1)
	total := uint64(0)
	for k, v := range l.index {
		if v != 0 {
			total += (uint64(k) - slot(&l.at(v-1).hash, mask)) & mask
		}
	}
	if mean := float64(total) / n; mean > 2 {
		t.Fatalf("a change is found %.1f slots past where its probe starts, on average", mean)
	}
}

// A held message goes when the room's timer fires, a little after the
// spacing's end; the next spacing runs from that end, not from the late
// send. Else, with a writer whose client sends a little over a spacing
// apart and a timer later than that margin, each change would be held a
// little longer than the one before, until one waited a whole spacing.
func TestALateTimerDoesNotDelayTheNextChange(t *testing.T) {
	const spacing, late = 100 * time.Millisecond, 3 * time.Millisecond
	l := typedLog(1)
	p := NewPeerAt(l.Heads())
	p.Spacing = spacing
	p.Receive(l, &Message{Heads: l.Heads(), Have: []Have{{LastSync: l.Heads()}}}, l.Heads())
	t0 := time.Unix(100, 0)
	var heldUntil time.Time
	added := map[int32]time.Time{}
	waited := map[int32]time.Duration{}
	send := func(now time.Time) {
		out := p.Generate(l, nil, nil, now)
		heldUntil = p.HeldUntil()
		if out == nil || len(out.Indices) == 0 {
			return
		}
		for _, x := range out.Indices {
			waited[x] = now.Sub(added[x])
		}
		p.Receive(l, &Message{Heads: out.Heads, Have: []Have{{LastSync: out.Heads}}}, l.Heads()) // it answers at once
		p.Generate(l, nil, nil, now)
	}
	add := func(at time.Time, b byte, c byte) {
		h := Hash{b, c, 9}
		if _, err := l.Add(h, l.Heads(), typedChange(h, l.Heads())); err != nil {
			t.Fatal(err)
		}
		added[int32(l.Len()-1)] = at
		send(at)
	}
	// The second change comes within the spacing of the first and is
	// held; the rest come 101 ms apart, each held a millisecond less than
	// the one before, until none is.
	add(t0, 255, 255)
	first := int32(l.Len())
	next := t0.Add(50 * time.Millisecond)
	for i := range 300 {
		// The room's timer for a held message fires late, before the
		// next change if it is due first.
		if !heldUntil.IsZero() && heldUntil.Add(late).Before(next) {
			send(heldUntil.Add(late))
		}
		add(next, byte(i), byte(i>>8))
		next = next.Add(spacing + time.Millisecond)
	}
	for x := first + 1; x < int32(l.Len()); x++ {
		if waited[x] > waited[first] {
			t.Fatalf("change %d waited %v, longer than the first held (%v): the late timer's delay added up", x-first, waited[x], waited[first])
		}
	}
	if w := waited[int32(l.Len()-1)]; w != 0 {
		t.Fatalf("the last change waited %v, want none", w)
	}
}
