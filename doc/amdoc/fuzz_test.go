package amdoc

import (
	"context"
	"testing"

	"github.com/tandemhq/tandem/doc/amcheck/amtest"
)

// FuzzSave holds Save to an error, never a panic or a hang, whatever
// bytes it is given: its input was checked where it was taken, but a
// fault of its own must not take a node down. The seeds are typed text
// and a paste.
func FuzzSave(f *testing.F) {
	f.Add(join(amtest.Typing(20)))
	f.Add(amtest.Paste(40))
	f.Add(join(amtest.Chain(5, 3, 2)))
	f.Fuzz(func(t *testing.T, b []byte) {
		doc, err := save(context.Background(), b, 1<<16)
		if err == nil && len(b) > 0 && len(doc) == 0 {
			t.Fatal("no error and no document")
		}
	})
}
