package amcheck

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/automerge/automerge-go"
)

// checkAgainst parses each of a document's changes and compares the
// result with what automerge-go says about it.
func checkAgainst(t *testing.T, doc *automerge.Doc) []Change {
	t.Helper()
	chs, err := doc.Changes()
	if err != nil {
		t.Fatal(err)
	}
	var out []Change
	for i, ch := range chs {
		raw := ch.Save()
		c, n, err := ParseChange(raw, Limits{MaxOps: 1 << 20, MaxExpandedBytes: 64 << 20})
		if err != nil {
			t.Fatalf("change %d: %v", i, err)
		}
		if n != len(raw) {
			t.Errorf("change %d: consumed %d of %d bytes", i, n, len(raw))
		}
		if c.Hash != [32]byte(ch.Hash()) {
			t.Errorf("change %d: hash %x, automerge says %s", i, c.Hash, ch.Hash())
		}
		if got := hex.EncodeToString(c.Actor); got != ch.ActorID() {
			t.Errorf("change %d: actor %s, automerge says %s", i, got, ch.ActorID())
		}
		if c.Seq != ch.ActorSeq() {
			t.Errorf("change %d: seq %d, automerge says %d", i, c.Seq, ch.ActorSeq())
		}
		if c.Message != ch.Message() {
			t.Errorf("change %d: message %q, automerge says %q", i, c.Message, ch.Message())
		}
		deps := ch.Dependencies()
		if len(deps) != len(c.Deps) {
			t.Errorf("change %d: %d deps, automerge says %d", i, len(c.Deps), len(deps))
		} else {
			for j := range deps {
				if c.Deps[j] != [32]byte(deps[j]) {
					t.Errorf("change %d: dep %d is %x, automerge says %s", i, j, c.Deps[j], deps[j])
				}
			}
		}
		if _, err := ParseSyncChange(raw, Limits{}); err != nil {
			t.Errorf("change %d: ParseSyncChange: %v", i, err)
		}
		out = append(out, c)
	}
	// Everything at once, as SaveChanges writes it.
	all, err := ParseChanges(automerge.SaveChanges(chs), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != len(out) {
		t.Fatalf("ParseChanges: %d changes, want %d", len(all), len(out))
	}
	return out
}

// opsOf returns the op count automerge implies for a single-actor history:
// each change starts where the previous one ended.
func checkStartOps(t *testing.T, cs []Change, wantOps []int) {
	t.Helper()
	if len(cs) != len(wantOps) {
		t.Fatalf("%d changes, want %d", len(cs), len(wantOps))
	}
	for i, c := range cs {
		if c.Ops != wantOps[i] {
			t.Errorf("change %d: %d ops, want %d", i, c.Ops, wantOps[i])
		}
		if i > 0 && cs[i-1].StartOp+uint64(cs[i-1].Ops) != c.StartOp {
			t.Errorf("change %d starts at op %d; the previous one started at %d with %d ops",
				i, c.StartOp, cs[i-1].StartOp, cs[i-1].Ops)
		}
	}
}

func commit(t *testing.T, d *automerge.Doc, msg string) {
	t.Helper()
	if _, err := d.Commit(msg); err != nil {
		t.Fatal(err)
	}
}

func TestRealChanges(t *testing.T) {
	d := automerge.New()
	root := d.RootMap()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(root.Set("k", "v"))
	commit(t, d, "msg") // 1 op
	must(root.Set("n", 42))
	must(root.Set("u", uint64(7)))
	must(root.Set("f", 1.5))
	must(root.Set("b", true))
	must(root.Set("nil", nil))
	must(root.Set("bytes", []byte{1, 2, 3}))
	must(root.Set("when", time.UnixMilli(1700000000000)))
	commit(t, d, "scalars") // 7 ops
	must(root.Set("text", automerge.NewText("hello")))
	commit(t, d, "text") // make text + 5 inserts
	txt, err := root.Get("text")
	must(err)
	must(txt.Text().Insert(5, " world"))
	must(txt.Text().Delete(0, 1))
	commit(t, d, "edit") // 6 inserts + 1 delete
	must(root.Set("list", automerge.NewList()))
	lv, err := root.Get("list")
	must(err)
	must(lv.List().Append(1, "two", 3.0, false))
	must(lv.List().Insert(0, "zero"))
	commit(t, d, "list") // make list + 5 inserts
	must(lv.List().Delete(1))
	must(lv.List().Set(0, "ZERO"))
	commit(t, d, "list edits") // delete + put
	must(root.Set("count", automerge.NewCounter(10)))
	commit(t, d, "counter") // 1
	cv, err := root.Get("count")
	must(err)
	must(cv.Counter().Inc(5))
	must(cv.Counter().Inc(-2))
	commit(t, d, "incs") // 2 increments
	must(root.Set("m", automerge.NewMap()))
	mv, err := root.Get("m")
	must(err)
	must(mv.Map().Set("inner", "x"))
	must(mv.Map().Set("ключ", "значение ✓"))
	commit(t, d, "nested map") // make + 2
	must(root.Delete("k"))
	must(mv.Map().Delete("inner"))
	commit(t, d, "deletes") // 2
	if _, err := d.Commit("empty", automerge.CommitOptions{AllowEmpty: true}); err != nil {
		t.Fatal(err)
	}

	cs := checkAgainst(t, d)
	checkStartOps(t, cs, []int{1, 7, 6, 7, 6, 2, 1, 2, 3, 2, 0})
	if cs[0].Message != "msg" || cs[0].Seq != 1 || cs[0].StartOp != 1 {
		t.Errorf("first change: %+v", cs[0])
	}
}

func TestManyActors(t *testing.T) {
	base := automerge.New()
	if err := base.RootMap().Set("text", automerge.NewText("shared")); err != nil {
		t.Fatal(err)
	}
	commit(t, base, "base")
	var forks []*automerge.Doc
	for i := 0; i < 5; i++ {
		f, err := base.Fork()
		if err != nil {
			t.Fatal(err)
		}
		v, err := f.RootMap().Get("text")
		if err != nil {
			t.Fatal(err)
		}
		if err := v.Text().Insert(i, strings.Repeat(string(rune('a'+i)), i+1)); err != nil {
			t.Fatal(err)
		}
		if err := f.RootMap().Set("who", i); err != nil {
			t.Fatal(err)
		}
		commit(t, f, "fork edit")
		forks = append(forks, f)
	}
	for _, f := range forks {
		if _, err := base.Merge(f); err != nil {
			t.Fatal(err)
		}
	}
	// A change after the merge refers to the forks' ops: concurrent puts
	// of "who" become its predecessors, across actors.
	if err := base.RootMap().Set("who", "base"); err != nil {
		t.Fatal(err)
	}
	v, err := base.RootMap().Get("text")
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Text().Delete(0, 10); err != nil {
		t.Fatal(err)
	}
	commit(t, base, "after merge")
	cs := checkAgainst(t, base)
	last := cs[len(cs)-1]
	if last.OtherActors != 5 {
		t.Errorf("merge change has %d other actors, want 5", last.OtherActors)
	}
	if len(last.Deps) < 5 {
		t.Errorf("merge change has %d deps, want at least 5", len(last.Deps))
	}
	if last.Ops != 11 {
		t.Errorf("merge change has %d ops, want 11", last.Ops)
	}
	// Expanded counts the predecessors: at least 5 for "who" and 10 deletes.
	if last.Expanded < int64(15*8) {
		t.Errorf("Expanded %d does not count predecessors", last.Expanded)
	}
}

func TestPaste(t *testing.T) {
	d := automerge.New()
	if err := d.RootMap().Set("text", automerge.NewText("")); err != nil {
		t.Fatal(err)
	}
	commit(t, d, "")
	v, _ := d.RootMap().Get("text")
	paste := strings.Repeat("lorem ipsum ", 1000)[:10000]
	if err := v.Text().Insert(0, paste); err != nil {
		t.Fatal(err)
	}
	commit(t, d, "paste")
	cs := checkAgainst(t, d)
	checkStartOps(t, cs, []int{1, 10000})
	if cs[1].Expanded < 10000 {
		t.Errorf("Expanded %d, want at least the pasted text", cs[1].Expanded)
	}
	raw := func() []byte { chs, _ := d.Changes(); return chs[1].Save() }()
	if _, _, err := ParseChange(raw, Limits{MaxOps: 9999}); !isTooLarge(err) {
		t.Errorf("MaxOps 9999: %v", err)
	}
	if _, _, err := ParseChange(raw, Limits{MaxExpandedBytes: 1000}); !isTooLarge(err) {
		t.Errorf("MaxExpandedBytes 1000: %v", err)
	}

	// SaveIncremental may compress large changes (type 2 chunks).
	inc := d.SaveIncremental()
	if _, err := ParseChanges(inc, Limits{}); err != nil && !bytes.Equal(inc[:4], magic[:]) {
		t.Fatal(err)
	}
}

func TestCompressedChunk(t *testing.T) {
	d := automerge.New()
	if err := d.RootMap().Set("text", automerge.NewText(strings.Repeat("abc", 500))); err != nil {
		t.Fatal(err)
	}
	commit(t, d, "big")
	chs, _ := d.Changes()
	raw := chs[0].Save()
	plain, _, err := ParseChange(raw, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	_, k, _ := strictUvarint(raw[9:])
	z := compressedOf(raw[9+k:])
	if len(z) >= len(raw) {
		t.Fatalf("compressed %d bytes, plain %d", len(z), len(raw))
	}
	c, n, err := ParseChange(z, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if n != len(z) || !c.Compressed || c.Hash != plain.Hash || c.Ops != plain.Ops || c.Expanded != plain.Expanded {
		t.Errorf("compressed: n=%d/%d %+v, plain %+v", n, len(z), c, plain)
	}
	// automerge loads it, with the same hash.
	loaded, err := automerge.LoadChanges(z)
	if err != nil {
		t.Fatal(err)
	}
	if len(loaded) != 1 || loaded[0].Hash() != automerge.ChangeHash(c.Hash) {
		t.Errorf("automerge loaded %d changes", len(loaded))
	}
	if _, err := ParseSyncChange(z, Limits{}); !isMalformed(err) {
		t.Errorf("ParseSyncChange of a compressed chunk: %v", err)
	}
	if _, _, err := ParseChange(z, Limits{MaxExpandedBytes: 1000}); !isTooLarge(err) {
		t.Errorf("inflating past MaxExpandedBytes: %v", err)
	}
}
