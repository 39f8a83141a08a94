package guard

import (
	"testing"

	"github.com/tandemhq/tandem/doc/amcheck/amtest"
)

// TestRefusalMemoryIsBounded: past its bounds the memory forgets the least
// recently used entries, in count and in bytes.
func TestRefusalMemoryIsBounded(t *testing.T) {
	const testDoc = "2gzyVEWRbEhwBcRvStKvD3gBE5pp"
	rf := NewRefusals(3, 1<<20, nil)
	chunks := amtest.Chain(5, 1, 0)
	cause := ErrRefused
	for _, ch := range chunks {
		rf.Refused(testDoc, [][]byte{ch}, cause, Limits{ChangeBytes: 1 << 20})
	}
	if s := rf.Stats(); s.Remembered != 3 {
		t.Fatalf("%d remembered, want 3", s.Remembered)
	}
	for i, ch := range chunks {
		got := rf.Check(testDoc, [][]byte{ch}) != nil
		if want := i >= 2; got != want {
			t.Errorf("chunk %d: known %v, want %v", i, got, want)
		}
	}
	if rf.Check("another document", [][]byte{chunks[4]}) != nil {
		t.Error("a refusal in one document refused another's change")
	}

	per := int64(len(testDoc)+len(cause.Error())) + refusalOverhead
	rf = NewRefusals(100, 2*per, nil)
	for _, ch := range chunks {
		rf.Refused(testDoc, [][]byte{ch}, cause, Limits{ChangeBytes: 1 << 20})
	}
	if s := rf.Stats(); s.Remembered != 2 || s.Bytes != 2*per {
		t.Fatalf("%+v, want 2 entries of %d bytes", s, per)
	}
}
