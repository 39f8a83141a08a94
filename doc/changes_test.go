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

// Stored changes are admitted each after its dependencies, whatever
// order they come in; those in order come back as they were given, and a
// change the log has is passed over, one whose dependencies it lacks
// waits.
func TestStoredChangesAreAdmittedInOrder(t *testing.T) {
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
	r := newRoom(testDoc)
	if added := addInOrder(r, all[:3]); !slices.Equal(hashes(added), hashes(all[:3])) {
		t.Fatalf("in order: added %x", hashes(added))
	}
	// Again, then the last before the one it follows.
	if added := addInOrder(r, []change{all[2], all[4], all[3]}); !slices.Equal(hashes(added), hashes([]change{all[3], all[4]})) {
		t.Fatalf("out of order: added %x", hashes(added))
	}
	var lim Limits
	lim.setDefaults()
	if ad := newRoom(testDoc).ledger.admitStored(lim, all[1:2], func([]byte) bool { return false }); len(ad.apply) != 0 || len(ad.held) != 1 {
		t.Fatalf("without its dependency: admitted %d, %d wait", len(ad.apply), len(ad.held))
	}
	if n := amcheck.Chunks(append(slices.Concat(typing(2)...), 1, 2)); n != 3 {
		t.Fatalf("Chunks counted %d of 3 changes and 2 bytes after them", n)
	}
}

// addInOrder adds stored changes to r's log as a load does, through the
// guard's order, and returns those the log took.
func addInOrder(r *room, cs []change) []change {
	var lim Limits
	lim.setDefaults()
	ad := r.ledger.admitStored(lim, cs, r.log.HasBytes)
	added := addToLog(r.log, ad.apply)
	r.ledger.record(added)
	return added
}

// addToLog adds changes, each after what it depends on, to log, and
// returns those it took.
func addToLog(log *amsync.Log, cs []change) []change {
	var added []change
	for _, c := range cs {
		deps := make([]amsync.Hash, len(c.Deps))
		for i, d := range c.Deps {
			deps[i] = d
		}
		if ok, err := log.Add(c.Hash, deps, c.raw); err == nil && ok {
			added = append(added, c)
		}
	}
	return added
}

// joinRaw returns the changes' bytes one after another.
func joinRaw(cs []change) []byte {
	var out []byte
	for _, c := range cs {
		out = append(out, c.raw...)
	}
	return out
}
