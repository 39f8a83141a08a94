package doc

import (
	"slices"
	"testing"

	"github.com/automerge/automerge-go"

	"github.com/tandemhq/tandem/doc/amcheck"
	"github.com/tandemhq/tandem/doc/amsync"
)

// Stored bytes read as change chunks, or as a document automerge saved;
// a damaged change chunk is an error, not handed to automerge.
func TestReadChanges(t *testing.T) {
	d := automerge.New()
	if err := d.RootMap().Set("k", "v"); err != nil {
		t.Fatal(err)
	}
	d.Commit("one")
	cs, err := d.Changes()
	if err != nil {
		t.Fatal(err)
	}
	raw := cs[0].Save()
	if got, err := readChanges(nil, raw); err != nil || len(got) != 1 || got[0].Hash != cs[0].Hash() {
		t.Fatalf("a change chunk: %d changes, %v", len(got), err)
	}
	if got, err := readChanges(nil, d.Save()); err != nil || len(got) != 1 || got[0].Hash != cs[0].Hash() {
		t.Fatalf("a saved document: %d changes, %v", len(got), err)
	}
	bad := append([]byte(nil), raw...)
	bad[4] ^= 0xff // its checksum
	if _, err := readChanges(nil, bad); err == nil {
		t.Fatal("a change chunk with a bad checksum was read")
	}
	if _, err := readChanges(nil, append(append([]byte(nil), raw...), 1, 2, 3)); err == nil {
		t.Fatal("trailing garbage was read")
	}
}

// Changes are added each after its dependencies, whatever order they come
// in; those in order come back as they were given, and a change the log
// has, or one whose dependencies it lacks, is not added.
func TestAddChanges(t *testing.T) {
	var all []change
	for _, raw := range typing(5) {
		cs, err := readChanges(all, raw)
		if err != nil {
			t.Fatal(err)
		}
		all = cs
	}
	hashes := func(cs []change) (out []amsync.Hash) {
		for _, c := range cs {
			out = append(out, c.Hash)
		}
		return out
	}
	log := amsync.NewLog()
	added, waiting := addChanges(log, all[:3])
	if !slices.Equal(hashes(added), hashes(all[:3])) || len(waiting) != 0 {
		t.Fatalf("in order: added %d, %d waiting", len(added), len(waiting))
	}
	// Again, then the last before the one it follows, then one without its dependency.
	added, _ = addChanges(log, []change{all[2], all[4], all[3]})
	if !slices.Equal(hashes(added), hashes([]change{all[3], all[4]})) {
		t.Fatalf("out of order: added %x", hashes(added))
	}
	if added, waiting = addChanges(amsync.NewLog(), all[1:2]); len(added) != 0 || len(waiting) != 1 {
		t.Fatalf("without its dependency: added %d, %d waiting", len(added), len(waiting))
	}
	if n := amcheck.Chunks(append(slices.Concat(typing(2)...), 1, 2)); n != 3 {
		t.Fatalf("Chunks counted %d of 3 changes and 2 bytes after them", n)
	}
}
