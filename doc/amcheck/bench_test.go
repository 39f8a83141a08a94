package amcheck

import (
	"strings"
	"testing"

	"github.com/automerge/automerge-go"
)

// benchChanges returns a one-keystroke change and a 10,000-character
// paste, both made by automerge-go in a document with some history.
func benchChanges(b *testing.B) (keystroke, paste []byte) {
	d := automerge.New()
	if err := d.RootMap().Set("text", automerge.NewText("Hello, world")); err != nil {
		b.Fatal(err)
	}
	if _, err := d.Commit("init"); err != nil {
		b.Fatal(err)
	}
	v, _ := d.RootMap().Get("text")
	if err := v.Text().Insert(5, "!"); err != nil {
		b.Fatal(err)
	}
	if _, err := d.Commit(""); err != nil {
		b.Fatal(err)
	}
	if err := v.Text().Insert(6, strings.Repeat("The quick brown fox jumps over the lazy dog. ", 230)[:10000]); err != nil {
		b.Fatal(err)
	}
	if _, err := d.Commit(""); err != nil {
		b.Fatal(err)
	}
	chs, err := d.Changes()
	if err != nil {
		b.Fatal(err)
	}
	return chs[1].Save(), chs[2].Save()
}

func BenchmarkParseChange(b *testing.B) {
	keystroke, paste := benchChanges(b)
	lim := Limits{MaxOps: 100_000, MaxExpandedBytes: 64 << 20}
	for _, bc := range []struct {
		name string
		raw  []byte
		ops  int
	}{{"keystroke", keystroke, 1}, {"paste10k", paste, 10000}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(bc.raw)))
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				c, _, err := ParseChange(bc.raw, lim)
				if err != nil || c.Ops != bc.ops {
					b.Fatalf("%d ops, %v", c.Ops, err)
				}
			}
		})
	}
	bomb := listBomb(1_000_000).chunk()
	b.Run("bomb1M", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, _, err := ParseChange(bomb, lim); !isTooLarge(err) {
				b.Fatal(err)
			}
		}
	})
}
