package doc

import (
	"bytes"
	"testing"

	"github.com/automerge/automerge-go"
)

// stripForReadOnly and settled on raw bytes, as the room uses them.
func stripForReadOnly(msg []byte, known func([]byte) bool, ours [][]byte) ([]byte, bool, error) {
	m, err := parseSyncMessage(msg)
	if err != nil {
		return nil, false, err
	}
	out, had := m.stripForReadOnly(known, ours)
	return out.raw, had, nil
}

func settled(msg []byte, d *automerge.Doc, sentAt []automerge.ChangeHash) bool {
	m, err := parseSyncMessage(msg)
	known := func(h []byte) bool {
		var ch automerge.ChangeHash
		copy(ch[:], h)
		_, err := d.Change(ch)
		return err == nil
	}
	return err == nil && m.settled(d.Heads(), sentAt, known)
}

// FuzzStripForReadOnly: the reader and the rewriter never panic on any
// input; what the rewriter returns reads back with no changes and is never
// longer than needed to hold the heads it adds.
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
		back, err := parseSyncMessage(out)
		if err != nil || len(back.changes) != 0 {
			t.Fatalf("the rewritten message reads back as %v, %v", back, err)
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

// TestSettled: a peer's acknowledgement at the end of a sync exchange
// needs no answer, and neither does one overtaken by a newer message the
// peer was already sent; a message carrying changes, a document that moved
// on since the peer was last sent anything, or a peer never sent anything
// need one.
func TestSettled(t *testing.T) {
	server, peer := automerge.New(), automerge.New()
	if err := server.RootMap().Set("title", "v1"); err != nil {
		t.Fatal(err)
	}
	if _, err := server.Commit("v1"); err != nil {
		t.Fatal(err)
	}
	ss, ps := automerge.NewSyncState(server), automerge.NewSyncState(peer)
	var last []byte // the peer's last message
	for range 10 {
		quiet := true
		if m, ok := ss.GenerateMessage(); ok {
			quiet = false
			if _, err := ps.ReceiveMessage(m.Bytes()); err != nil {
				t.Fatal(err)
			}
		}
		if m, ok := ps.GenerateMessage(); ok {
			quiet = false
			last = m.Bytes()
			if _, err := ss.ReceiveMessage(last); err != nil {
				t.Fatal(err)
			}
		}
		if quiet {
			break
		}
	}
	heads := server.Heads()
	if !settled(last, server, heads) {
		t.Fatal("the peer's acknowledgement needs an answer")
	}
	if settled(last, server, nil) {
		t.Fatal("settled before the peer was ever sent anything")
	}
	if err := peer.RootMap().Set("title", "v2"); err != nil {
		t.Fatal(err)
	}
	if _, err := peer.Commit("v2"); err != nil {
		t.Fatal(err)
	}
	m, ok := ps.GenerateMessage()
	if !ok || settled(m.Bytes(), server, heads) {
		t.Fatal("a message with the peer's new change counted as settled")
	}
	if err := server.RootMap().Set("body", "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := server.Commit("body"); err != nil {
		t.Fatal(err)
	}
	if settled(last, server, heads) {
		t.Fatal("settled with a document that moved on since the peer was last sent anything")
	}
	if !settled(last, server, server.Heads()) {
		t.Fatal("an acknowledgement overtaken by a message at the new heads needs an answer")
	}
	if settled([]byte{0x42, 0xff}, server, heads) || settled(nil, server, heads) {
		t.Fatal("an unreadable message counted as settled")
	}
}
