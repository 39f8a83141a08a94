package amsync

import (
	"bytes"
	"encoding/binary"
	"errors"
	"runtime"
	"testing"
)

// message builds a sync message from its parts as encoded: each list a
// count and its items.
func message(heads, need int, haves [][]byte, changes [][]byte) []byte {
	b := []byte{MessageV1}
	for _, n := range []int{heads, need} {
		b = binary.AppendUvarint(b, uint64(n))
		b = append(b, make([]byte, 32*n)...)
	}
	b = binary.AppendUvarint(b, uint64(len(haves)))
	for _, h := range haves {
		b = append(b, h...)
	}
	b = binary.AppendUvarint(b, uint64(len(changes)))
	for _, c := range changes {
		b = binary.AppendUvarint(b, uint64(len(c)))
		b = append(b, c...)
	}
	return b
}

// A message with more have entries than any peer sends is refused as it
// is read: each costs a pass over the log and is kept for its peer until
// its next message. Hash lists are as long as the document's heads are
// many: a message naming thousands reads.
func TestDecodeRefusesHavesPastTheBound(t *testing.T) {
	emptyHave := []byte{0, 0} // no lastSync, an empty bloom filter
	change := bytes.Repeat([]byte{1}, minChange)
	fine := message(5000, 5000, repeated(emptyHave, MaxHaves), [][]byte{change})
	if _, err := Decode(fine); err != nil {
		t.Fatalf("a message of %d have entries and 5,000 heads: %v", MaxHaves, err)
	}
	if _, err := Decode(message(0, 0, repeated(emptyHave, MaxHaves+1), nil)); !errors.Is(err, ErrBounds) {
		t.Errorf("%d have entries: err = %v, want ErrBounds", MaxHaves+1, err)
	}
}

// A message of empty change entries (16 MiB of them made 16.7 million
// slice headers, 2.2 GiB allocated, before the guard refused them) is
// refused at the first entry too short to be a change, having allocated
// next to nothing.
func TestDecodeRefusesEntriesTooShortToBeChanges(t *testing.T) {
	const size = 4 << 20
	b := message(0, 0, nil, nil)
	b = b[:len(b)-1] // the change count goes here
	b = binary.AppendUvarint(b, size)
	b = append(b, make([]byte, size)...)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := Decode(b)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrFormat) {
		t.Fatalf("err = %v, want ErrFormat", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
		t.Fatalf("decoding allocated %d bytes for a message of %d", got, len(b))
	}
	if _, err := Decode(message(0, 0, nil, [][]byte{make([]byte, minChange-1)})); !errors.Is(err, ErrFormat) {
		t.Fatalf("an entry of %d bytes: err = %v, want ErrFormat", minChange-1, err)
	}
}

// repeated returns n times item.
func repeated(item []byte, n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = item
	}
	return out
}
