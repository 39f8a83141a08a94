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
