package doc

import (
	"bytes"
	"testing"
)

// FuzzStripForReadOnly: the rewriter never panics on any input, and what
// it returns is never longer than needed to hold the heads it adds.
func FuzzStripForReadOnly(f *testing.F) {
	// Captured from a stock client: one head, have with a bloom filter,
	// no changes, trailing capability bytes.
	f.Add([]byte{0x42, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x02, 0x02, 0x84})
	f.Add(append(append([]byte{0x42, 0x01}, bytes.Repeat([]byte{7}, 32)...), 0x00, 0x00, 0x01, 0x03, 'a', 'b', 'c'))
	f.Add([]byte{0x42, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte{0x43})
	f.Fuzz(func(t *testing.T, msg []byte) {
		ours := [][]byte{bytes.Repeat([]byte{1}, 32)}
		out, _, err := stripForReadOnly(msg, func(h []byte) bool { return h[0]%2 == 0 }, ours)
		if err != nil {
			return
		}
		if len(out) > len(msg)+33 {
			t.Fatalf("rewrote %d bytes into %d", len(msg), len(out))
		}
	})
}

func TestStripKeepsTrailingFields(t *testing.T) {
	head := bytes.Repeat([]byte{9}, 32)
	// heads [head], need [], have [], changes [ "abc" ], trailing 02 02 84
	msg := append(append([]byte{0x42, 0x01}, head...), 0x00, 0x00, 0x01, 0x03, 'a', 'b', 'c', 0x02, 0x02, 0x84)
	out, had, err := stripForReadOnly(msg, func([]byte) bool { return true }, nil)
	if err != nil || !had {
		t.Fatalf("had=%v err=%v", had, err)
	}
	want := append(append([]byte{0x42, 0x01}, head...), 0x00, 0x00, 0x00, 0x02, 0x02, 0x84)
	if !bytes.Equal(out, want) {
		t.Fatalf("got  %x\nwant %x", out, want)
	}
}
