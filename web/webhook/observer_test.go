package webhook

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/tandemhq/tandem/awareness"
	"github.com/tandemhq/tandem/doc"
	"github.com/tandemhq/tandem/doc/amcheck"
)

type testRoom string

func (r testRoom) DocumentID() string { return string(r) }
func (testRoom) Hold(f func())        { f() }
func (testRoom) Write()               {}

// identified is a local peer whose token names its user.
type identified struct{ id, user string }

func (p identified) ID() string                        { return p.id }
func (identified) SendSync(string, []byte)             {}
func (identified) SendDocUnavailable(string)           {}
func (identified) SendEphemeral(string, doc.Ephemeral) {}
func (p identified) Identity() awareness.Identity      { return awareness.Identity{UserID: p.user} }

func changes(cs ...*amcheck.Change) func(func(*amcheck.Change) bool) {
	return slices.Values(cs)
}

// The observer follows the heads through every change the log takes,
// notes only local peers' changes under their token's user, and takes a
// document's first changes from a peer for its creation.
func TestTheObserverFollowsHeadsAndNotesLocalChanges(t *testing.T) {
	open, _ := sqliteBackend.open(t)
	clk := newClock()
	h := newHooks(t, open(), false, &captured{}, Config{Now: clk.Now})
	o := h.Observe(testRoom("docA"))
	ana := identified{"p1", "ana"}
	o.Applied(ana, changes(&amcheck.Change{Hash: head(1)}), false)
	if c := h.pending["docA"]; c == nil || !c.created || !c.users["ana"] || !reflect.DeepEqual(c.heads, [][32]byte{head(1)}) {
		t.Fatalf("after the first change: %+v", c)
	}
	// Two concurrent changes on head 1, from another node: heads 2 and 3,
	// not noted here.
	h.pending = map[string]*docChange{}
	o.Applied(nil, changes(&amcheck.Change{Hash: head(2), Deps: [][32]byte{head(1)}}, &amcheck.Change{Hash: head(3), Deps: [][32]byte{head(1)}}), true)
	// Noted as heads alone (the window this node's change opened is
	// named by them), for nobody.
	if c := h.pending["docA"]; c == nil || c.local || len(c.users) != 0 || !reflect.DeepEqual(c.heads, [][32]byte{head(2), head(3)}) {
		t.Fatalf("another node's changes noted as %+v, want heads alone", c)
	}
	// A merge by a local peer.
	o.Applied(ana, changes(&amcheck.Change{Hash: head(4), Deps: [][32]byte{head(2), head(3)}}), false)
	c := h.pending["docA"]
	if c == nil || c.created || !reflect.DeepEqual(c.heads, [][32]byte{head(4)}) {
		t.Fatalf("after a merge: %+v", c)
	}
	// Long after this node's last change, another node's name nothing
	// here.
	h.pending = map[string]*docChange{}
	c.local = false
	clk.Set(time.Hour)
	o.Applied(nil, changes(&amcheck.Change{Hash: head(5), Deps: [][32]byte{head(4)}}), true)
	if len(h.pending) != 0 {
		t.Fatal("another node's changes noted an hour after this node's last")
	}
	// A room loaded from the store is not a creation.
	loaded := h.Observe(testRoom("docB"))
	loaded.Applied(nil, changes(&amcheck.Change{Hash: head(9)}), true)
	loaded.Applied(ana, changes(&amcheck.Change{Hash: head(10), Deps: [][32]byte{head(9)}}), false)
	if c := h.pending["docB"]; c == nil || c.created {
		t.Fatalf("a loaded document taken for new: %+v", c)
	}
	if o.Busy() || o.Journal() != nil {
		t.Fatal("the observer keeps a room or journals")
	}
}

// A local peer's change that waited for another and applied after its
// peer left is still this node's to tell, for a user not known.
func TestALocalChangeOfAPeerThatLeftIsNoted(t *testing.T) {
	open, _ := sqliteBackend.open(t)
	h := newHooks(t, open(), false, &captured{}, Config{Now: newClock().Now})
	o := h.Observe(testRoom("docA"))
	o.Applied(identified{"p1", "ana"}, changes(&amcheck.Change{Hash: head(1)}), false)
	h.pending = map[string]*docChange{}
	o.Applied(nil, changes(&amcheck.Change{Hash: head(2), Deps: [][32]byte{head(1)}}), false)
	if c := h.pending["docA"]; c == nil || !c.local || len(c.users) != 0 || !reflect.DeepEqual(c.heads, [][32]byte{head(2)}) {
		t.Fatalf("noted as %+v, want a local change for nobody known", c)
	}
}
