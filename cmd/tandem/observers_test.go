package main

import (
	"context"
	"iter"
	"maps"
	"testing"

	"github.com/tandemhq/tandem/doc"
	"github.com/tandemhq/tandem/doc/amcheck"
)

// recording is an Observer that counts the changes it is shown and
// answers Journal and Busy as told.
type recording struct {
	changes int
	journal map[string][]byte
	wrote   []map[string][]byte
	busy    bool
}

func (r *recording) Applying(doc.Peer) {}
func (r *recording) Applied(_ doc.Peer, cs iter.Seq[*amcheck.Change], _ bool) {
	for range cs {
		r.changes++
	}
}
func (r *recording) Left(doc.Peer)                             {}
func (r *recording) Loaded(context.Context, map[string][]byte) {}
func (r *recording) Journal() map[string][]byte                { return r.journal }
func (r *recording) Wrote(j map[string][]byte, _ bool)         { r.wrote = append(r.wrote, j) }
func (r *recording) Busy() bool                                { return r.busy }

func TestBothObserversSeeEveryChangeAndOnlyTheFirstJournals(t *testing.T) {
	first := &recording{journal: map[string][]byte{"n1": []byte("j")}}
	second := &recording{journal: map[string][]byte{"n1": []byte("other")}}
	o := observers{first, second}
	cs := []*amcheck.Change{{}, {}}
	o.Applied(nil, func(yield func(*amcheck.Change) bool) {
		for _, c := range cs {
			if !yield(c) {
				return
			}
		}
	}, true)
	if first.changes != 2 || second.changes != 2 {
		t.Fatalf("changes seen: first %d, second %d, want 2 each", first.changes, second.changes)
	}
	j := o.Journal()
	if !maps.EqualFunc(j, first.journal, func(a, b []byte) bool { return string(a) == string(b) }) {
		t.Fatalf("journal %q, want the first's", j)
	}
	o.Wrote(j, true)
	if len(first.wrote) != 1 || len(second.wrote) != 0 {
		t.Fatalf("Wrote told the first %d times and the second %d, want 1 and 0", len(first.wrote), len(second.wrote))
	}
	if o.Busy() {
		t.Fatal("busy with neither busy")
	}
	second.busy = true
	if !o.Busy() {
		t.Fatal("not busy with the second busy: its room would go under it")
	}
}
