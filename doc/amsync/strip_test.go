package amsync

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/automerge/automerge-go"
)

// The log gives back every change as the bytes it was given: automerge's
// own changes (one dependency, several, none), which it keeps without
// their header and dependencies, and chunks it keeps whole because
// putting those back would not give the same bytes (a length written
// long, a compressed chunk, dependencies in another order than the
// caller's).
func TestTheLogGivesBackEachChangeAsItCame(t *testing.T) {
	a := automerge.New()
	b := automerge.New()
	var raws [][]byte
	for i := range 30 {
		d := a
		if i%3 == 1 {
			d = b
		}
		if err := d.RootMap().Set(fmt.Sprint("k", i%4), fmt.Sprint("value ", i)); err != nil {
			t.Fatal(err)
		}
		d.Commit(fmt.Sprint("change ", i))
		if i%5 == 4 {
			if _, err := a.Merge(b); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Merge(a); err != nil {
				t.Fatal(err)
			}
		}
	}
	cs, err := a.Changes()
	if err != nil {
		t.Fatal(err)
	}
	l := NewLog()
	short := 0
	for _, c := range cs {
		raw := c.Save()
		var deps []Hash
		for _, d := range c.Dependencies() {
			deps = append(deps, Hash(d))
		}
		if _, err := l.Add(Hash(c.Hash()), deps, raw); err != nil {
			t.Fatal(err)
		}
		raws = append(raws, raw)
		if l.at(l.n-1).size&stripped != 0 {
			short++
		}
	}
	if short != len(cs) {
		t.Errorf("%d of %d of automerge's changes are kept short", short, len(cs))
	}

	// A change written with its length as a longer varint than needed.
	long := func(h Hash, deps []Hash) []byte {
		body := binary.AppendUvarint(nil, uint64(len(deps)))
		for _, d := range deps {
			body = append(body, d[:]...)
		}
		body = append(body, "the rest"...)
		out := append(append([]byte{}, chunkMagic...), h[:4]...)
		out = append(out, 1, 0x80|byte(len(body)), 0) // two bytes for a length under 128
		return append(out, body...)
	}
	heads := l.Heads()
	odd := []struct {
		name string
		h    Hash
		deps []Hash
		raw  func(Hash, []Hash) []byte
	}{
		{"a long length", sha256.Sum256([]byte("long")), heads, long},
		{"a compressed chunk", sha256.Sum256([]byte("compressed")), heads, func(h Hash, _ []Hash) []byte {
			return append(append(append([]byte{}, chunkMagic...), h[:4]...), 2, 3, 'x', 'y', 'z')
		}},
		{"a checksum not the hash's", sha256.Sum256([]byte("checksum")), heads, func(h Hash, deps []Hash) []byte {
			b := long(h, deps)
			b[4] ^= 0xff
			return b
		}},
	}
	if len(heads) > 1 {
		swapped := []Hash{heads[1], heads[0]}
		odd = append(odd, struct {
			name string
			h    Hash
			deps []Hash
			raw  func(Hash, []Hash) []byte
		}{"dependencies in another order than given", sha256.Sum256([]byte("order")), swapped, func(h Hash, _ []Hash) []byte {
			body := binary.AppendUvarint(nil, 2)
			body = append(append(append(body, heads[0][:]...), heads[1][:]...), "rest"...)
			out := append(append([]byte{}, chunkMagic...), h[:4]...)
			out = append(out, 1)
			out = binary.AppendUvarint(out, uint64(len(body)))
			return append(out, body...)
		}})
	}
	for _, o := range odd {
		raw := o.raw(o.h, o.deps)
		if _, err := l.Add(o.h, o.deps, raw); err != nil {
			t.Fatal(err)
		}
		raws = append(raws, raw)
		if l.at(l.n-1).size&stripped != 0 {
			t.Errorf("%s is kept short", o.name)
		}
	}
	var joined []byte
	for i, raw := range raws {
		if got := l.AppendChange(nil, int32(i)); !bytes.Equal(got, raw) {
			t.Fatalf("change %d comes back as %x, came as %x", i, got, raw)
		}
		if l.ChangeLen(int32(i)) != len(raw) {
			t.Fatalf("change %d: length %d, came as %d bytes", i, l.ChangeLen(int32(i)), len(raw))
		}
		joined = l.AppendChange(joined, int32(i))
	}
	if !bytes.Equal(joined, bytes.Join(raws, nil)) {
		t.Fatal("the changes appended one after another are not the bytes that came")
	}
}
