package wire

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func readFrame(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "frames", name+".cbor"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDecodeCapturedFrames decodes frames captured between stock
// automerge-repo 2.5.6 clients and the stock sync server (capture.mjs).
func TestDecodeCapturedFrames(t *testing.T) {
	const docID = "jN3pd9agHvY1zVqDCHrDTE3fDh1"
	tests := []struct {
		frame string
		check func(t *testing.T, m *Message)
	}{
		{"client-join", func(t *testing.T, m *Message) {
			want(t, m.Type, TypeJoin)
			want(t, m.SenderID, "client-a")
			if m.PeerMetadata == nil || !m.PeerMetadata.IsEphemeral || m.PeerMetadata.StorageID != "" {
				t.Errorf("peerMetadata = %+v, want ephemeral with undefined storageId", m.PeerMetadata)
			}
			if !m.SupportsV1() {
				t.Error("join should support v1")
			}
		}},
		{"client-request", func(t *testing.T, m *Message) {
			want(t, m.Type, TypeRequest)
			want(t, m.DocumentID, docID)
			want(t, m.TargetID, "stock-server")
			if len(m.Data) == 0 || m.Data[0] != 0x42 {
				t.Errorf("data = %x, want an automerge sync message", m.Data)
			}
		}},
		{"client-sync", func(t *testing.T, m *Message) {
			want(t, m.Type, TypeSync)
			want(t, m.SenderID, "client-a")
			want(t, m.DocumentID, docID)
		}},
		{"client-ephemeral", func(t *testing.T, m *Message) {
			want(t, m.Type, TypeEphemeral)
			want(t, m.SessionID, "njf0kvck98l")
			if m.Count != 1 {
				t.Errorf("count = %d, want 1", m.Count)
			}
			if !bytes.Equal(m.Data, []byte{0xb9, 0x00, 0x01, 0x66, 'c', 'u', 'r', 's', 'o', 'r', 0x18, 0x2a}) {
				t.Errorf("data = %x", m.Data)
			}
		}},
		{"server-peer", func(t *testing.T, m *Message) {
			want(t, m.Type, TypePeer)
			want(t, m.SelectedProtocolVersion, ProtocolV1)
			want(t, m.TargetID, "client-a")
		}},
		{"server-doc-unavailable", func(t *testing.T, m *Message) {
			want(t, m.Type, TypeDocUnavailable)
			want(t, m.DocumentID, "2gzyVEWRbEhwBcRvStKvD3gBE5pp")
		}},
		{"server-sync", func(t *testing.T, m *Message) { want(t, m.Type, TypeSync) }},
		{"server-ephemeral", func(t *testing.T, m *Message) { want(t, m.TargetID, "client-a") }},
	}
	for _, tt := range tests {
		t.Run(tt.frame, func(t *testing.T) {
			m, err := Decode(readFrame(t, tt.frame))
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, m)
			if strings.HasPrefix(tt.frame, "client-") {
				if err := m.Validate(); err != nil {
					t.Errorf("Validate: %v", err)
				}
			}
			// What we encode decodes to the same message.
			enc, err := Encode(m)
			if err != nil {
				t.Fatal(err)
			}
			back, err := Decode(enc)
			if err != nil {
				t.Fatal(err)
			}
			if !equalMessages(m, back) {
				t.Errorf("round trip changed the message:\n%+v\n%+v", m, back)
			}
		})
	}
}

func TestDecodeForms(t *testing.T) {
	tests := []struct {
		name    string
		frame   []byte
		wantErr error
		check   func(t *testing.T, m *Message)
	}{
		{
			name: "data wrapped in typed-array tag 64",
			// {"type":"sync","data":64(h'42')}
			frame: []byte{0xa2, 0x64, 't', 'y', 'p', 'e', 0x64, 's', 'y', 'n', 'c',
				0x64, 'd', 'a', 't', 'a', 0xd8, 0x40, 0x41, 0x42},
			check: func(t *testing.T, m *Message) {
				if !bytes.Equal(m.Data, []byte{0x42}) {
					t.Errorf("data = %x", m.Data)
				}
			},
		},
		{
			name: "join without supportedProtocolVersions means v1",
			// {"type":"join","senderId":"a"}
			frame: []byte{0xa2, 0x64, 't', 'y', 'p', 'e', 0x64, 'j', 'o', 'i', 'n',
				0x68, 's', 'e', 'n', 'd', 'e', 'r', 'I', 'd', 0x61, 'a'},
			check: func(t *testing.T, m *Message) {
				if !m.SupportsV1() {
					t.Error("should support v1")
				}
			},
		},
		{
			name: "join with only version 2",
			// {"type":"join","supportedProtocolVersions":["2"]}
			frame: append([]byte{0xa2, 0x64, 't', 'y', 'p', 'e', 0x64, 'j', 'o', 'i', 'n', 0x78, 25},
				append([]byte("supportedProtocolVersions"), 0x81, 0x61, '2')...),
			check: func(t *testing.T, m *Message) {
				if m.SupportsV1() {
					t.Error("should not support v1")
				}
			},
		},
		{name: "empty frame", frame: nil, wantErr: ErrMalformed},
		{name: "garbage", frame: []byte("\xff\x00garbage"), wantErr: ErrMalformed},
		{name: "not a map", frame: []byte{0x83, 1, 2, 3}, wantErr: ErrMalformed},
		{name: "truncated", frame: readFrame(t, "client-sync")[:40], wantErr: ErrMalformed},
		{name: "trailing bytes", frame: append(readFrame(t, "client-join"), 0x00), wantErr: ErrMalformed},
		{name: "map without type", frame: []byte{0xa1, 0x61, 'x', 0x01}, wantErr: ErrMissingType},
		{name: "type of wrong kind", frame: []byte{0xa1, 0x64, 't', 'y', 'p', 'e', 0x01}, wantErr: ErrMalformed},
		{name: "deeply nested", frame: nested(1000), wantErr: ErrMalformed},
		{name: "invalid UTF-8 in a string", frame: []byte{0xa1, 0x64, 't', 'y', 'p', 'e', 0x62, 0xff, 0xfe}, wantErr: ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Decode(tt.frame)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, m)
		})
	}
}

// nested returns {"type":"sync","x":[[[...]]]} nested depth deep.
func nested(depth int) []byte {
	b := []byte{0xa2, 0x64, 't', 'y', 'p', 'e', 0x64, 's', 'y', 'n', 'c', 0x61, 'x'}
	for i := 0; i < depth; i++ {
		b = append(b, 0x81)
	}
	return append(b, 0x01)
}

func TestValidate(t *testing.T) {
	const doc = "2gzyVEWRbEhwBcRvStKvD3gBE5pp"
	tests := []struct {
		name    string
		m       Message
		wantErr error
	}{
		{"join", Message{Type: TypeJoin, SenderID: "a"}, nil},
		{"sync", Message{Type: TypeSync, SenderID: "a", DocumentID: doc, Data: []byte{0x42}}, nil},
		{"request", Message{Type: TypeRequest, SenderID: "a", DocumentID: doc, Data: []byte{0x42}}, nil},
		{"ephemeral", Message{Type: TypeEphemeral, SenderID: "a", DocumentID: doc, Data: []byte{0xa0}, SessionID: "s", Count: 1}, nil},
		{"remote heads", Message{Type: TypeRemoteHeadsChanged, SenderID: "a", DocumentID: doc}, nil},
		{"no sender", Message{Type: TypeJoin}, ErrMissingSender},
		{"sync without data", Message{Type: TypeSync, SenderID: "a", DocumentID: doc}, ErrMissingData},
		{"sync with bad doc id", Message{Type: TypeSync, SenderID: "a", DocumentID: "nope", Data: []byte{0x42}}, ErrInvalidDocumentID},
		{"ephemeral without count", Message{Type: TypeEphemeral, SenderID: "a", DocumentID: doc, Data: []byte{0xa0}, SessionID: "s"}, ErrMissingClock},
		{"peer from a client", Message{Type: TypePeer, SenderID: "a"}, ErrNotFromClient},
		{"unknown type", Message{Type: "launch-missiles", SenderID: "a"}, ErrUnknownType},
		{"peer id at the limit", Message{Type: TypeJoin, SenderID: strings.Repeat("a", MaxIDBytes)}, nil},
		{"peer id over the limit", Message{Type: TypeJoin, SenderID: strings.Repeat("a", MaxIDBytes+1)}, ErrIDTooLong},
		{"peer id with a NUL", Message{Type: TypeJoin, SenderID: "ana\x00"}, ErrBadID},
		{"peer id not UTF-8", Message{Type: TypeJoin, SenderID: "ana\xff"}, ErrBadID},
		{"session id with a NUL", Message{Type: TypeEphemeral, SenderID: "a", DocumentID: doc, Data: []byte{0xa0}, SessionID: "s\x00", Count: 1}, ErrBadID},
		{"session id over the limit", Message{Type: TypeEphemeral, SenderID: "a", DocumentID: doc, Data: []byte{0xa0}, SessionID: strings.Repeat("s", MaxIDBytes+1), Count: 1}, ErrIDTooLong},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.m.Validate(); !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
		})
	}
}

func TestDocumentID(t *testing.T) {
	valid := []string{"2gzyVEWRbEhwBcRvStKvD3gBE5pp", "jN3pd9agHvY1zVqDCHrDTE3fDh1"}
	for _, id := range valid {
		if err := ValidateDocumentID(id); err != nil {
			t.Errorf("%s: %v", id, err)
		}
	}
	invalid := []string{
		"", "x", "2gzyVEWRbEhwBcRvStKvD3gBE5pq", // checksum off by one
		"0gzyVEWRbEhwBcRvStKvD3gBE5pp", // 0 is not base58
		"../../etc/passwd", strings.Repeat("z", 100),
		"2gzyVEWRbEhwBcRvStKvD3g", // too short
	}
	for _, id := range invalid {
		if err := ValidateDocumentID(id); !errors.Is(err, ErrInvalidDocumentID) {
			t.Errorf("%q: err = %v, want ErrInvalidDocumentID", id, err)
		}
	}
	var uuid [16]byte
	for i := range uuid {
		uuid[i] = byte(i * 17)
	}
	id := NewDocumentID(uuid)
	if err := ValidateDocumentID(id); err != nil {
		t.Errorf("NewDocumentID made %q: %v", id, err)
	}
	var zero [16]byte
	if err := ValidateDocumentID(NewDocumentID(zero)); err != nil {
		t.Errorf("all-zero uuid: %v", err)
	}
}

func want(t *testing.T, got, exp string) {
	t.Helper()
	if got != exp {
		t.Errorf("got %q, want %q", got, exp)
	}
}

func equalMessages(a, b *Message) bool {
	ea, _ := Encode(a)
	eb, _ := Encode(b)
	return bytes.Equal(ea, eb)
}

// A prepared message addressed to a target decodes to the message with
// that targetId, whatever the lengths of the target and the fields; its
// data is the message's own bytes, not a copy.
func TestPreparedTo(t *testing.T) {
	msgs := []*Message{
		{Type: TypeEphemeral, SenderID: "alice", DocumentID: "3bNqoT3cGWVe5GkGk7oYsi5xGUiS", SessionID: "s", Count: 7, Data: Bytes{0xa1, 0x61, 0x61, 0x01}},
		{Type: TypePeer, SenderID: "server", PeerMetadata: &PeerMetadata{StorageID: "x"}, SelectedProtocolVersion: ProtocolV1},
	}
	for _, n := range []int{1, 23, 24, 255, 256, 65535, 65536, 70000} {
		msgs = append(msgs, &Message{Type: TypeSync, SenderID: "server", DocumentID: "3bNqoT3cGWVe5GkGk7oYsi5xGUiS", Data: bytes.Repeat([]byte{1}, n)})
	}
	for _, m := range msgs {
		p, err := Prepare(m)
		if err != nil {
			t.Fatal(err)
		}
		if _, data := p.To("t"); len(m.Data) > 0 && &data[0] != &m.Data[0] {
			t.Fatalf("%s of %d bytes of data: the data was copied", m.Type, len(m.Data))
		}
		for _, n := range []int{0, 1, 23, 24, 255, 256, 70000} {
			target := strings.Repeat("t", n)
			frame := p.Frame(target)
			if len(frame) != p.Len(target) || cap(frame) != len(frame) {
				t.Fatalf("%s to a %d-byte target: %d bytes (room for %d), Len says %d", m.Type, n, len(frame), cap(frame), p.Len(target))
			}
			got, err := Decode(frame)
			if err != nil {
				t.Fatalf("%s to a %d-byte target: %v", m.Type, n, err)
			}
			want := *m
			want.TargetID = target
			if !reflect.DeepEqual(got, &want) {
				t.Fatalf("%s to a %d-byte target:\n got %+v\nwant %+v", m.Type, n, got, &want)
			}
		}
	}
	if _, err := Prepare(&Message{Type: TypeSync, TargetID: "x"}); err == nil {
		t.Fatal("Prepare took a message with a targetId")
	}
}

// A batch assembled from entries encoded one by one decodes as the same
// message Encode writes.
func TestAppendBatchIsEncode(t *testing.T) {
	for _, n := range []int{1, 2, 23, 24, 300} {
		m := &Message{Type: TypePresenceBatch, SenderID: "server", DocumentID: "3bNqoT3cGWVe5GkGk7oYsi5xGUiS", SessionID: "relay"}
		var entries [][]byte
		for i := range n {
			e := BatchEntry{SenderID: strings.Repeat("p", i%40), Count: uint64(i) * 1000003, Data: bytes.Repeat([]byte{byte(i)}, i%300)}
			m.Batch = append(m.Batch, e)
			entries = append(entries, AppendBatchEntry(nil, e.SenderID, e.Count, e.Data))
		}
		want, err := Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		got := AppendBatch(nil, m.SenderID, m.DocumentID, m.SessionID, entries)
		a, err := Decode(got)
		if err != nil {
			t.Fatalf("%d entries: %v", n, err)
		}
		b, _ := Decode(want)
		if !reflect.DeepEqual(a, b) || len(got) != len(want) {
			t.Fatalf("%d entries: assembled %d bytes (%+v), Encode %d bytes", n, len(got), a.Batch[:1], len(want))
		}
	}
}
