package doc

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/automerge/automerge-go"

	"github.com/tandemhq/tandem/doc/amsave"
	"github.com/tandemhq/tandem/doc/amsync"
)

// jsFlags is the flags section stock JS automerge 3.5 ends each of its
// sync messages with: it reads a message's changes as one.
var jsFlags = []byte{0x02, 0x02, 0x84}

// savedDocument waits, up to 10 s, for the room's saved document, and
// returns how many changes it holds and its bytes.
func savedDocument(t testing.TB, r *room) (int, []byte) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		r.mu.Lock()
		n, saved := r.log.Saved()
		r.mu.Unlock()
		if n > 0 {
			return n, saved
		}
		if time.Now().After(deadline) {
			t.Fatal("no saved document within 10 s")
		}
	}
}

// A large document is saved, in a worker, for new readers: a peer that
// has nothing and sends a flags section is sent the saved document and
// then the changes since, in one entry, which load to the document's
// heads; a peer whose messages carry no flags (automerge-go 0.5) is sent
// the changes.
func TestANewReaderOfALargeDocumentIsSentItSaved(t *testing.T) {
	all := typing(savedMinChanges + 200)
	var snapshot []byte
	for _, c := range all {
		snapshot = append(snapshot, c...)
	}
	s := openStore(t, t.TempDir())
	if err := s.Write(context.Background(), []Write{{DocumentID: testDoc, Snapshot: snapshot}}); err != nil {
		t.Fatal(err)
	}
	saver, err := amsave.New(amsave.Config{})
	if err != nil {
		t.Fatal(err)
	}
	h := newTestHub(t, s, Config{SaveDocument: saver.Save})
	r := roomOf(t, h, testDoc)
	n, saved := savedDocument(t, r)
	if n != len(all) {
		t.Fatalf("the saved document holds %d changes, want the %d loaded", n, len(all))
	}
	heads := r.docHeads()

	fresh := automerge.NewSyncState(automerge.New())
	request, _ := fresh.GenerateMessage()
	for _, tc := range []struct {
		name    string
		data    []byte
		entries int
	}{
		{"with flags", append(slices.Clone(request.Bytes()), jsFlags...), 1},
		{"without flags", request.Bytes(), len(all)},
	} {
		p := &fakePeer{id: tc.name, told: make(chan struct{}, 1)}
		if err := h.Sync(context.Background(), p, SyncMessage{DocumentID: testDoc, Data: tc.data, Request: true}); err != nil {
			t.Fatal(err)
		}
		syncs := p.takeSyncs()
		if len(syncs) != 1 {
			t.Fatalf("%s: sent %d messages, want 1", tc.name, len(syncs))
		}
		m, err := amsync.Decode(syncs[0])
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Changes) != tc.entries {
			t.Fatalf("%s: the changes came in %d entries, want %d", tc.name, len(m.Changes), tc.entries)
		}
		if tc.entries != 1 {
			continue
		}
		if !bytes.HasPrefix(m.Changes[0], saved) {
			t.Fatalf("%s: the entry does not begin with the saved document", tc.name)
		}
		d, err := automerge.Load(m.Changes[0])
		if err != nil {
			t.Fatalf("%s: the entry does not load: %v", tc.name, err)
		}
		if !sameHeads(d.Heads(), heads) {
			t.Fatalf("%s: the entry loads to %v, want %v", tc.name, d.Heads(), heads)
		}
	}
}
