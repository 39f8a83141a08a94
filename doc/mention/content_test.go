package mention

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/automerge/automerge-go"

	"github.com/tandemhq/tandem/doc/amcheck"
	"github.com/tandemhq/tandem/doc/amcheck/amtest"
)

// The text the content keeps in Go is automerge's: over stock automerge's
// editing sessions (several actors typing, deleting, marking and merging,
// with maps, lists and counters besides), after every change.
func TestContentKeepsTheTextAsAutomergeDoes(t *testing.T) {
	o := amtest.StockAutomerge(t)
	seeds := 6
	if testing.Short() {
		seeds = 2
	}
	var f Fields
	f.setDefaults()
	for seed := 1; seed <= seeds; seed++ {
		changes := o.Trace(t, seed, 300)
		c := newContent(f)
		d := automerge.New()
		for i, raw := range changes {
			cs := readChanges(t, raw)
			c.take(slices.Values(cs))
			if err := d.LoadIncremental(raw); err != nil {
				t.Fatal(err)
			}
			want, err := d.Path("text").Text().Get()
			if err != nil {
				t.Fatal(err)
			}
			if got := c.text(); got != want {
				t.Fatalf("seed %d, change %d: the text is %q, automerge's %q", seed, i, got, want)
			}
		}
	}
}

// The fields may be nested, strings as well as texts, and replaced.
func TestContentFollowsNestedFieldsAndTheirReplacement(t *testing.T) {
	d := automerge.New()
	take := func(c *content) {
		t.Helper()
		cs := readChanges(t, d.Save())
		c.take(slices.Values(cs))
	}
	f := Fields{Text: "body.text", Title: "meta.title"}
	if err := d.Path("body", "text").Set(automerge.NewText("first @ana")); err != nil {
		t.Fatal(err)
	}
	if err := d.Path("meta", "title").Set("A title"); err != nil {
		t.Fatal(err)
	}
	d.Commit("one")
	c := newContent(f)
	take(c)
	if c.text() != "first @ana" || c.title() != "A title" {
		t.Fatalf("text %q, title %q", c.text(), c.title())
	}
	if err := d.Path("body", "text").Set(automerge.NewText("second")); err != nil {
		t.Fatal(err)
	}
	if err := d.Path("meta").Delete(); err != nil {
		t.Fatal(err)
	}
	d.Commit("two")
	c = newContent(f)
	take(c)
	if c.text() != "second" || c.title() != "second" {
		t.Fatalf("after the replacement: text %q, title %q", c.text(), c.title())
	}
}

// The text kept in runs stays automerge's through what splits and joins
// them: pastes, typing in the middle of a run, deleting ranges and
// single characters, characters of several bytes, and two actors editing
// apart and merging; checked after every change, by a random walk.
func TestContentRunsKeepTheTextAsAutomergeDoes(t *testing.T) {
	var f Fields
	f.setDefaults()
	words := []string{"a", "lorem ipsum ", "ü", "日本語", "😀x", "\n", strings.Repeat("paste ", 50), "@", "hi @ana "}
	for seed := range uint64(8) {
		rng := rand.New(rand.NewPCG(seed, 3))
		a := automerge.New()
		if err := a.RootMap().Set("text", automerge.NewText("")); err != nil {
			t.Fatal(err)
		}
		a.Commit("text")
		b, err := a.Fork()
		if err != nil {
			t.Fatal(err)
		}
		// c takes each change as a room would, once; seen is automerge's
		// document of the same changes.
		c := newContent(f)
		seen := automerge.New()
		taken := map[automerge.ChangeHash]bool{}
		follow := func(d *automerge.Doc) {
			t.Helper()
			all, err := d.Changes()
			if err != nil {
				t.Fatal(err)
			}
			for _, ch := range all {
				if taken[ch.Hash()] {
					continue
				}
				taken[ch.Hash()] = true
				raw := ch.Save()
				if err := seen.LoadIncremental(raw); err != nil {
					t.Fatal(err)
				}
				cs := readChanges(t, raw)
				c.take(slices.Values(cs))
			}
			want, err := seen.Path("text").Text().Get()
			if err != nil {
				t.Fatal(err)
			}
			if got := c.text(); got != want {
				t.Fatalf("seed %d: the text is %q, automerge's %q", seed, got, want)
			}
			// What is counted as it changes: its @ (a text without
			// one is not read for mentions) and its bytes.
			_, x := c.resolve(0)
			if x.ats != strings.Count(want, "@") || x.size != len(want) {
				t.Fatalf("seed %d: counted %d @ and %d bytes; the text has %d and %d", seed, x.ats, x.size, strings.Count(want, "@"), len(want))
			}
			if m := c.mentionText(); (m == "") != !strings.Contains(want, "@") {
				t.Fatalf("seed %d: the text read for mentions is %q, of %q", seed, m, want)
			}
		}
		for step := range 120 {
			d := a
			if rng.IntN(2) == 1 {
				d = b
			}
			text := d.Path("text").Text()
			n := text.Len()
			switch op := rng.IntN(10); {
			case op < 5 || n == 0:
				if err := text.Insert(rng.IntN(n+1), words[rng.IntN(len(words))]); err != nil {
					t.Fatal(err)
				}
			case op < 8:
				at := rng.IntN(n)
				if err := text.Delete(at, 1+rng.IntN(min(n-at, 20))); err != nil {
					t.Fatal(err)
				}
			default:
				if err := text.Splice(rng.IntN(n), 1, words[rng.IntN(len(words))]); err != nil {
					t.Fatal(err)
				}
			}
			d.Commit(fmt.Sprint("step ", step))
			follow(d)
			if rng.IntN(6) == 0 { // the two merge
				if _, err := a.Merge(b); err != nil {
					t.Fatal(err)
				}
				if _, err := b.Merge(a); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// An op that puts a value over an element of a run (automerge's lists do
// it; its texts do not, but a change may) takes the element out of its
// run, and a deletion naming the value put over it deletes it.
func TestContentPutsOverAnElementOfARun(t *testing.T) {
	var f Fields
	f.setDefaults()
	text := amtest.ID(1, 0)
	first, h1 := amtest.Encode(amtest.Change{Actors: [][]byte{amtest.ActorA}, Seq: 1, StartOp: 1, Ops: []amtest.Op{
		{MapKey: true, Key: "text", Action: amcheck.MakeText},
		amtest.Insert(text, amtest.ID(0, 0), "a"), amtest.Insert(text, amtest.ID(2, 0), "b"), amtest.Insert(text, amtest.ID(3, 0), "c"), amtest.Insert(text, amtest.ID(4, 0), "d"),
	}})
	v, raw := amtest.String("X")
	over, h2 := amtest.Encode(amtest.Change{Deps: [][32]byte{h1}, Actors: [][]byte{amtest.ActorB, amtest.ActorA}, Seq: 1, StartOp: 6, Ops: []amtest.Op{
		{Obj: amtest.ID(1, 1), Elem: amtest.ID(3, 1), Action: amcheck.Put, Value: v, Raw: raw, Preds: []amcheck.OpID{amtest.ID(3, 1)}},
	}})
	stale, h3 := amtest.Encode(amtest.Change{Deps: [][32]byte{h2}, Actors: [][]byte{amtest.ActorB, amtest.ActorA}, Seq: 2, StartOp: 7, Ops: []amtest.Op{
		{Obj: amtest.ID(1, 1), Elem: amtest.ID(3, 1), Action: amcheck.Delete, Preds: []amcheck.OpID{amtest.ID(3, 1)}}, // names the value put over
	}})
	del, _ := amtest.Encode(amtest.Change{Deps: [][32]byte{h3}, Actors: [][]byte{amtest.ActorB, amtest.ActorA}, Seq: 3, StartOp: 8, Ops: []amtest.Op{
		{Obj: amtest.ID(1, 1), Elem: amtest.ID(3, 1), Action: amcheck.Delete, Preds: []amcheck.OpID{amtest.ID(6, 0)}},
		{Obj: amtest.ID(1, 1), Elem: amtest.ID(4, 1), Action: amcheck.Delete, Preds: []amcheck.OpID{amtest.ID(4, 1)}},
	}})
	c := newContent(f)
	for i, step := range []struct {
		raw  []byte
		want string
	}{{first, "abcd"}, {over, "aXcd"}, {stale, "aXcd"}, {del, "ad"}} {
		cs := readChanges(t, step.raw)
		c.take(slices.Values(cs))
		if got := c.text(); got != step.want {
			t.Fatalf("step %d: the text is %q, want %q", i, got, step.want)
		}
		if _, x := c.resolve(0); x.size != len(step.want) {
			t.Fatalf("step %d: counted %d bytes of %q", i, x.size, step.want)
		}
	}
}
