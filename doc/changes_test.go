package doc

import (
	"testing"

	"github.com/automerge/automerge-go"
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
	if got, err := readChanges(raw); err != nil || len(got) != 1 || got[0].Hash != cs[0].Hash() {
		t.Fatalf("a change chunk: %d changes, %v", len(got), err)
	}
	if got, err := readChanges(d.Save()); err != nil || len(got) != 1 || got[0].Hash != cs[0].Hash() {
		t.Fatalf("a saved document: %d changes, %v", len(got), err)
	}
	bad := append([]byte(nil), raw...)
	bad[4] ^= 0xff // its checksum
	if _, err := readChanges(bad); err == nil {
		t.Fatal("a change chunk with a bad checksum was read")
	}
	if _, err := readChanges(append(append([]byte(nil), raw...), 1, 2, 3)); err == nil {
		t.Fatal("trailing garbage was read")
	}
}
