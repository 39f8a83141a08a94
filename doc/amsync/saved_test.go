package amsync

import (
	"slices"
	"testing"

	"github.com/automerge/automerge-go"
)

// A saved document's heads are read from its chunk; a chunk damaged
// anywhere (its checksum), cut short or followed by other bytes is
// refused.
func TestTheHeadsOfASavedDocument(t *testing.T) {
	var all []byte
	for _, c := range editedChanges(t, 12) {
		all = append(all, c.Save()...)
	}
	d, err := automerge.Load(all)
	if err != nil {
		t.Fatal(err)
	}
	saved := d.Save()
	heads, err := DocumentHeads(saved)
	if err != nil {
		t.Fatal(err)
	}
	if want := hashesOf(d.Heads()); !slices.Equal(heads, want) {
		t.Fatalf("heads %x, want %x", heads, want)
	}
	damaged := slices.Clone(saved)
	damaged[len(damaged)-1] ^= 1
	for name, b := range map[string][]byte{
		"damaged":  damaged,
		"cut":      saved[:len(saved)-1],
		"followed": append(slices.Clone(saved), 0),
		"a change": all[:len(all)/12],
		"nothing":  nil,
	} {
		if _, err := DocumentHeads(b); err == nil {
			t.Errorf("%s: read as a saved document", name)
		}
	}
}
