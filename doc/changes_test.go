package doc

import (
	"slices"
	"testing"

	"github.com/automerge/automerge-go"

	"github.com/tandemhq/tandem/doc/amcheck"
	"github.com/tandemhq/tandem/doc/amcheck/amtest"
	"github.com/tandemhq/tandem/doc/amsync"
	"github.com/tandemhq/tandem/doc/guard"
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
	var all []guard.Change
	for _, raw := range amtest.Typing(5) {
		cs, err := readChanges(all, raw)
		if err != nil {
			t.Fatal(err)
		}
		all = cs
	}
	hashes := func(cs []guard.Change) (out []amsync.Hash) {
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
	if added := addInOrder(r, []guard.Change{all[2], all[4], all[3]}); !slices.Equal(hashes(added), hashes([]guard.Change{all[3], all[4]})) {
		t.Fatalf("out of order: added %x", hashes(added))
	}
	var lim guard.Limits
	lim.SetDefaults()
	if l := guard.NewLedger(nil, nil, nil); len(l.AdmitStored(lim, all[1:2], func([]byte) bool { return false }).Apply) != 0 {
		t.Fatal("admitted a change without its dependency")
	}
	if n := amcheck.Chunks(append(slices.Concat(amtest.Typing(2)...), 1, 2)); n != 3 {
		t.Fatalf("Chunks counted %d of 3 changes and 2 bytes after them", n)
	}
}

// addInOrder adds stored changes to r's log as a load does, through the
// guard's order, and returns those the log took.
func addInOrder(r *room, cs []guard.Change) []guard.Change {
	var lim guard.Limits
	lim.SetDefaults()
	ad := r.guard.AdmitStored(lim, cs, r.log.HasBytes)
	added := addToLog(r.log, ad.Apply)
	r.guard.Record(added)
	return added
}

// addToLog adds changes, each after what it depends on, to log, and
// returns those it took.
func addToLog(log *amsync.Log, cs []guard.Change) []guard.Change {
	var added []guard.Change
	for _, c := range cs {
		deps := make([]amsync.Hash, len(c.Deps))
		for i, d := range c.Deps {
			deps[i] = d
		}
		if ok, err := log.Add(c.Hash, deps, c.Raw); err == nil && ok {
			added = append(added, c)
		}
	}
	return added
}

// joinRaw returns the changes' bytes one after another.
func joinRaw(cs []guard.Change) []byte {
	var out []byte
	for _, c := range cs {
		out = append(out, c.Raw...)
	}
	return out
}
