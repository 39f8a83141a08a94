package awareness

import (
	"testing"

	"github.com/fxamacker/cbor/v2"
)

// FuzzParsePresence: the presence parser never panics, and what it accepts
// re-encodes into a payload it accepts again.
func FuzzParsePresence(f *testing.F) {
	for _, m := range []any{
		map[string]any{"__presence": map[string]any{"type": "snapshot", "state": map[string]any{"cursor": "1@a", "user": map[string]any{"id": "ana"}}}},
		map[string]any{"__presence": map[string]any{"type": "update", "channel": "typing", "value": true}},
		map[string]any{"__presence": map[string]any{"type": "heartbeat"}},
		map[string]any{"__presence": map[string]any{"type": "goodbye"}},
		map[string]any{"cursor": 42},
		deep(30),
	} {
		b, err := cbor.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0xb9, 0x00, 0x01, 0x6a, '_', '_', 'p', 'r', 'e', 's', 'e', 'n', 'c', 'e', 0xf7})
	f.Add([]byte{0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := parsePresence(decMode, data)
		if err != nil || m == nil {
			return
		}
		again, err := parsePresence(decMode, encodePresence(m))
		if err != nil || again == nil || again.Type != m.Type {
			t.Fatalf("re-encoded %+v does not parse back: %v", m, err)
		}
	})
}
