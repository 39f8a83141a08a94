package doc

import (
	"testing"

	"github.com/automerge/automerge-go"
)

// The text the content keeps in Go is automerge's: over stock automerge's
// editing sessions (several actors typing, deleting, marking and merging,
// with maps, lists and counters besides), after every change.
func TestContentKeepsTheTextAsAutomergeDoes(t *testing.T) {
	o := stockAutomerge(t)
	seeds := 6
	if testing.Short() {
		seeds = 2
	}
	var f MentionFields
	f.setDefaults()
	for seed := 1; seed <= seeds; seed++ {
		changes := o.trace(t, seed, 300)
		c := newContent(f)
		d := automerge.New()
		for i, raw := range changes {
			cs, err := readChanges(raw)
			if err != nil {
				t.Fatal(err)
			}
			c.take(cs)
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
		cs, err := readChanges(d.Save())
		if err != nil {
			t.Fatal(err)
		}
		c.take(cs)
	}
	f := MentionFields{Text: "body.text", Title: "meta.title"}
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
