package wire

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzDecode feeds the decoder arbitrary frames. It must never panic, and
// whatever it accepts must survive an encode/decode round trip.
func FuzzDecode(f *testing.F) {
	entries, err := os.ReadDir(filepath.Join("testdata", "frames"))
	if err != nil {
		f.Fatal(err)
	}
	for _, e := range entries {
		f.Add(readFrame(f, e.Name()[:len(e.Name())-len(".cbor")]))
	}
	f.Add([]byte{})
	f.Add(nested(20))
	f.Fuzz(func(t *testing.T, frame []byte) {
		m, err := Decode(frame)
		if err != nil {
			return
		}
		_ = m.Validate()
		enc, err := Encode(m)
		if err != nil {
			t.Fatalf("cannot encode a decoded message: %v", err)
		}
		if _, err := Decode(enc); err != nil {
			t.Fatalf("cannot decode our own encoding: %v", err)
		}
	})
}

func FuzzValidateDocumentID(f *testing.F) {
	f.Add("2gzyVEWRbEhwBcRvStKvD3gBE5pp")
	f.Add("111111111111111111111111111")
	f.Fuzz(func(t *testing.T, id string) {
		_ = ValidateDocumentID(id)
	})
}

// FuzzPassedOn feeds PassedOn arbitrary frames. It must never panic, and
// it must agree with Decode on every frame Decode takes: an ephemeral in
// another sender's name, and nothing else, and its session.
func FuzzPassedOn(f *testing.F) {
	entries, err := os.ReadDir(filepath.Join("testdata", "frames"))
	if err != nil {
		f.Fatal(err)
	}
	for _, e := range entries {
		f.Add(readFrame(f, e.Name()[:len(e.Name())-len(".cbor")]), "me")
	}
	f.Add([]byte{}, "")
	f.Add(nested(20), "me")
	f.Fuzz(func(t *testing.T, frame []byte, self string) {
		session, got := PassedOn(frame, self)
		m, err := Decode(frame)
		if err != nil || duplicateKeys(frame) {
			return
		}
		want := m.Type == TypeEphemeral && m.SenderID != "" && m.SenderID != self
		if got != want {
			t.Fatalf("PassedOn says %v for %+v from %q's view", got, m, self)
		}
		if got && string(session) != m.SessionID {
			t.Fatalf("PassedOn read session %q of %+v", session, m)
		}
	})
}

// duplicateKeys reports whether a frame's top-level map names a key twice:
// PassedOn takes the first, Decode the last.
func duplicateKeys(frame []byte) bool {
	var pairs map[string]any
	if decMode.Unmarshal(frame, &pairs) != nil {
		return true
	}
	s := skimmer{b: frame}
	_, n, _ := s.head()
	return uint64(len(pairs)) != n
}
