package amsync

import (
	"crypto/sha256"
	"encoding/binary"
	"testing"
	"time"
)

// FuzzReceiveAndGenerate feeds a peer messages made from the fuzzer's
// bytes, over a log of a branching history, and holds every exchange to
// the cost model: the changes visited within what the messages paid for
// (their bytes, and the changes sent), what the state keeps within
// Holds and what the peer is owed, and every change at most once in a
// message. The input is read as a few messages (see fuzzMessage); with
// its first bit set the rest is read as a sync message's bytes.
func FuzzReceiveAndGenerate(f *testing.F) {
	f.Add([]byte{0x00})
	f.Add([]byte{0x02, 1, 0, 5, 0, 1, 2, 3, 4})                 // a have, heads known
	f.Add([]byte{0x06, 3, 1, 0xff, 0xff, 2, 9, 0xff, 0xff})     // unknown heads, last sync, filter
	f.Add([]byte{0x0e, 0, 200, 0, 1, 0, 0xff})                  // a need list of one change, many times
	f.Add([]byte{0x16, 1, 0xfe, 0xfe, 40, 0, 0xff, 0xff, 0xff}) // a saturated filter
	f.Add(append([]byte{0x01}, (&Message{Heads: unheardHashes(2, 1), Have: []Have{{Bloom: sparse(64)}}}).Encode()...))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		l := branchingLog(1500)
		p := NewState()
		var a account
		now := time.Now()
		exchange := func(m *Message) {
			var out *Outgoing
			a.cost += visits(l, func() {
				if err := CheckHeads(l, m); err != nil {
					return
				}
				p.Receive(l, m, l.Heads())
				if kept, limit := p.Kept(), Holds(m)+3*32*len(p.shared)+12*l.Len()+64; kept > limit {
					t.Fatalf("the state keeps %d bytes after a %d-byte message; the bound is %d", kept, m.size(), limit)
				}
				now = now.Add(2 * AnswerWait)
				out = p.Generate(l, nil, nil, now)
			})
			sent := 0
			if out != nil {
				sent = len(out.Indices)
				seen := make(map[int32]bool, sent)
				for _, x := range out.Indices {
					if seen[x] {
						t.Fatalf("change %d goes twice in one message", x)
					}
					seen[x] = true
				}
			}
			a.paid += allowed(m, sent)
			if a.cost > a.paid {
				t.Fatalf("the messages visited %d changes; they paid for %d", a.cost, a.paid)
			}
		}
		if data[0]&1 != 0 {
			m, err := Decode(data[1:])
			if err != nil {
				return
			}
			exchange(m)
			exchange(m) // again: a repeat
			return
		}
		r := fuzzReader{b: data[1:]}
		if data[0]&0x20 != 0 {
			exchange(&Message{Have: []Have{{}}}) // it was sent the document
		}
		for range 3 {
			m := fuzzMessage(&r, l, data[0])
			exchange(m)
			if r.empty() {
				break
			}
		}
	})
}

// fuzzReader reads bytes, zeros past the end.
type fuzzReader struct{ b []byte }

func (r *fuzzReader) empty() bool { return len(r.b) == 0 }

func (r *fuzzReader) byte() byte {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *fuzzReader) uint16() int { return int(r.byte())<<8 | int(r.byte()) }

// hash reads a hash: one of the log's (its index, below its length) or
// one it lacks.
func (r *fuzzReader) hash(l *Log) Hash {
	x := r.uint16()
	if x < l.Len() {
		return l.HashAt(int32(x))
	}
	return sha256.Sum256(binary.AppendUvarint([]byte("unknown"), uint64(x)))
}

// fuzzMessage reads a message: its heads (a count, then hashes), its need
// list (a count, a hash and how many times it is named), and, as flags
// says, a have entry with last sync points and a filter of the fuzzer's
// bits for a number of entries.
func fuzzMessage(r *fuzzReader, l *Log, flags byte) *Message {
	m := &Message{}
	for range int(r.byte()) % 32 {
		m.Heads = append(m.Heads, r.hash(l))
	}
	sortHashes(m.Heads)
	if flags&0x08 != 0 {
		h, times := r.hash(l), int(r.byte())*int(r.byte())
		for range times {
			m.Need = append(m.Need, h)
		}
	}
	if flags&0x02 != 0 {
		var hv Have
		if flags&0x04 != 0 {
			for range int(r.byte()) % 4 {
				hv.LastSync = append(hv.LastSync, r.hash(l))
			}
			sortHashes(hv.LastSync)
		}
		if n := int(r.byte()); n > 0 {
			b := newBloom(n)
			fill := r.byte()
			if flags&0x10 != 0 {
				fill = 0xff
			}
			for i := range b.bits {
				b.bits[i] = fill ^ r.byte()
			}
			hv.Bloom = b.Encode()
		}
		m.Have = []Have{hv}
	}
	return m
}

// branchingLog returns a log of n changes in which every tenth change
// starts a branch of its own off an earlier one, merged back later.
func branchingLog(n int) *Log {
	l := NewLog()
	var prev []Hash
	for i := range n {
		h := sha256.Sum256(binary.AppendUvarint([]byte("branching"), uint64(i)))
		deps := prev
		switch {
		case i%10 == 5 && i > 20:
			deps = []Hash{l.HashAt(int32(i - 17))}
		case i%10 == 9 && i > 20:
			deps = l.Heads()
		}
		if _, err := l.Add(h, deps, typedChange(h, deps)); err != nil {
			panic(err)
		}
		prev = l.Heads()
	}
	return l
}
