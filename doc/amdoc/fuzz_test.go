package amdoc

import (
	"bytes"
	"compress/flate"
	"context"
	"encoding/binary"
	"runtime"
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

// bomb is a document chunk whose one op column inflates to n zero bytes
// from a few thousandths as many.
func bomb(n int) []byte {
	var z bytes.Buffer
	w, _ := flate.NewWriter(&z, flate.BestCompression)
	w.Write(make([]byte, n))
	w.Close()
	var body []byte
	body = append(body, 1, 1, 0xaa) // one actor
	body = append(body, 0)          // no heads
	body = append(body, 0)          // no change columns
	body = append(body, 1)
	body = binary.AppendUvarint(body, uint64(specAction|8))
	body = binary.AppendUvarint(body, uint64(z.Len()))
	return chunk(append(body, z.Bytes()...))
}

// FuzzLoad holds Load to an error, never a panic or a hang, whatever
// bytes it is given, and to its limits: what it allocates stays within a
// bound its limits set, a compression bomb's included. The seeds are
// documents saved from typed text, a paste and a chain of changes, and a
// bomb.
func FuzzLoad(f *testing.F) {
	for _, changes := range [][]byte{join(amtest.Typing(20)), amtest.Paste(40), join(amtest.Chain(5, 3, 2))} {
		doc, err := Save(changes)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(doc)
	}
	f.Add(bomb(8 << 20))
	const maxBytes, ops = 1 << 20, 1 << 14
	f.Fuzz(func(t *testing.T, b []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		changes, err := Load(b, LoadLimits{MaxBytes: maxBytes, MaxOps: ops, MaxChanges: ops})
		runtime.ReadMemStats(&after)
		// The inflated columns and the chunks written (twice each, as
		// buffers grow), and what ops and changes hold.
		if n := after.TotalAlloc - before.TotalAlloc; n > 4*maxBytes+uint64(ops)*(4*LoadOpBytes+4*LoadChangeBytes)+uint64(16*len(b)) {
			t.Fatalf("a load of %d bytes allocated %d", len(b), n)
		}
		if err == nil && len(changes) > 0 && len(changes[0]) == 0 {
			t.Fatal("an empty change")
		}
	})
}
