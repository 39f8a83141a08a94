package amdoc

import (
	"testing"

	"github.com/tandemhq/tandem/doc/amcheck/amtest"
)

// What a save costs: 100,000 changes typed by two actors in turn, and a
// paste of 1 MiB made as one change. The figures per op are the time and
// the bytes allocated while saving; doc-bytes is what the save holds.
func BenchmarkSave(b *testing.B) {
	for _, c := range []struct {
		name    string
		changes []byte
		ops     int
	}{
		{"typed-100k", join(amtest.Typing(100_000)), 100_001},
		{"paste-1MiB", amtest.Paste(1 << 20), 1<<20 + 1},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			var doc []byte
			for b.Loop() {
				var err error
				if doc, err = Save(c.changes); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(doc)), "doc-bytes")
			b.ReportMetric(float64(len(c.changes)), "change-bytes")
		})
	}
}
