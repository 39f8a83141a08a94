package main

import (
	"bytes"
	"testing"

	"github.com/fxamacker/cbor/v2"

	"github.com/tandemhq/tandem/transport/wire"
)

func presenceData(t *testing.T, channel string, value any) []byte {
	t.Helper()
	v, err := cbor.Marshal(value)
	if err != nil {
		t.Fatal(err)
	}
	data, err := cbor.Marshal(map[string]update{"__presence": {Type: "update", Channel: channel, Value: v}})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestTheScannerReadsWhatTheServerSends: the bench's scanner reads a
// batch as the wire package encodes it, and the cursors in it as peers
// encode them; other channels are heard but carry no cursor.
func TestTheScannerReadsWhatTheServerSends(t *testing.T) {
	cur := presenceData(t, "cursor", cursor{Seq: 7, Sent: 1_700_000_000_123_456_789})
	status := presenceData(t, "status", "away")
	frame, err := wire.Encode(&wire.Message{
		Type: wire.TypePresenceBatch, SenderID: "server", DocumentID: "doc", SessionID: "s",
		Batch: []wire.BatchEntry{{SenderID: "a", Count: 1, Data: cur}, {SenderID: "b", Count: 300, Data: status}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var f scannedFrame
	if err := scanFrame(frame, &f); err != nil {
		t.Fatal(err)
	}
	if string(f.typ) != wire.TypePresenceBatch || string(f.sender) != "server" || len(f.entries) != 2 {
		t.Fatalf("frame read as %q from %q with %d entries", f.typ, f.sender, len(f.entries))
	}
	var p scannedPresence
	if err := scanPresence(f.entries[0].data, &p); err != nil || !p.isCursor || p.cursor != (cursor{Seq: 7, Sent: 1_700_000_000_123_456_789}) || string(f.entries[0].sender) != "a" {
		t.Fatalf("first entry read as %+v (%v)", p, err)
	}
	if err := scanPresence(f.entries[1].data, &p); err != nil || p.isCursor || string(p.channel) != "status" || string(p.typ) != "update" {
		t.Fatalf("second entry read as %+v (%v)", p, err)
	}

	sync, err := wire.Encode(&wire.Message{Type: wire.TypeSync, SenderID: "server", TargetID: "me", DocumentID: "doc", Data: []byte{1, 2, 3}})
	if err != nil {
		t.Fatal(err)
	}
	if err := scanFrame(sync, &f); err != nil || string(f.typ) != wire.TypeSync || string(f.data) != "\x01\x02\x03" {
		t.Fatalf("sync read as %q %v (%v)", f.typ, f.data, err)
	}
}

// TestTheScannerRefusesWhatIsCut: every prefix of a frame is refused,
// none read past its end.
func TestTheScannerRefusesWhatIsCut(t *testing.T) {
	frame, err := wire.Encode(&wire.Message{
		Type: wire.TypePresenceBatch, SenderID: "server", DocumentID: "doc",
		Batch: []wire.BatchEntry{{SenderID: "a", Count: 1, Data: presenceData(t, "cursor", cursor{Seq: 1, Sent: 2})}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var f scannedFrame
	for n := range len(frame) {
		if scanFrame(frame[:n], &f) == nil {
			t.Fatalf("a frame cut to %d of %d bytes was read", n, len(frame))
		}
	}
	if scanFrame(append(frame, 0), &f) == nil {
		t.Fatal("a frame with a byte after it was read")
	}
}

// TestTheScannerStopsAtDepth: a frame nested far past anything a server
// sends is refused, not followed down the stack.
func TestTheScannerStopsAtDepth(t *testing.T) {
	deep := append([]byte{0xa1, 0x61, 'x'}, bytes.Repeat([]byte{0x81}, 1_000_000)...)
	deep = append(deep, 0x00)
	var f scannedFrame
	if scanFrame(deep, &f) == nil {
		t.Fatal("a frame nested a million deep was read")
	}
}
