package amsync

import (
	"crypto/sha256"
	"encoding/binary"
	"testing"
	"time"
)

// unheardHashes returns n hashes no log here holds.
func unheardHashes(n, seed int) []Hash {
	out := make([]Hash, n)
	for i := range out {
		out[i] = sha256.Sum256(binary.AppendUvarint([]byte{byte(seed)}, uint64(i)))
	}
	sortHashes(out)
	return out
}

// Lists a peer sends, and a document's heads, can run to tens of
// thousands; working out a message costs about their length, not the
// product of two of them. A peer naming 10,000 heads the log lacks, and
// asking for 100,000 changes it has, made Generate compare every head it
// lacks with every head the peer named, under the room's lock, and every
// change asked for with every change to send. It is asked for maxAsk of
// the heads at a time.
func TestLongListsCostTheirLength(t *testing.T) {
	const n = 100_000
	l := typedLog(n)
	asked := make([]Hash, 0, n)
	for i := range int32(n) {
		asked = append(asked, l.HashAt(i))
	}
	p := NewState()
	p.Receive(l, &Message{Heads: unheardHashes(MaxHeads, 1), Need: asked, Have: []Have{{}}}, l.Heads())
	start := time.Now()
	out := p.Generate(l, nil, nil, time.Now())
	took := time.Since(start)
	if out == nil || len(out.Need) != maxAsk || len(out.Indices) != n {
		t.Fatalf("the answer: %v heads asked for, %v changes", len(out.Need), len(out.Indices))
	}
	// Linear, this takes well under a second (a few under -race); the
	// products took minutes.
	if took > 20*time.Second {
		t.Fatalf("Generate took %v", took)
	}
	before, after := unheardHashes(n, 2), unheardHashes(n, 3)
	start = time.Now()
	if got := advanceHeads(before, after, before); len(got) != n {
		t.Fatalf("advanceHeads: %d heads, want %d", len(got), n)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("advanceHeads took %v", took)
	}
}
