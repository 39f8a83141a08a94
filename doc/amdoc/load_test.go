package amdoc

import (
	"bytes"
	"errors"
	"os"
	"runtime"
	"slices"
	"testing"

	"github.com/tandemhq/tandem/doc/amcheck/amtest"
)

// sameChanges reports how two lists of change chunks differ as sets.
func sameChanges(got, want [][]byte) string {
	g, w := slices.Clone(got), slices.Clone(want)
	slices.SortFunc(g, bytes.Compare)
	slices.SortFunc(w, bytes.Compare)
	if len(g) != len(w) {
		return "a different number of changes"
	}
	for i := range g {
		if !bytes.Equal(g[i], w[i]) {
			return "different bytes"
		}
	}
	return ""
}

// TestALoadedDocumentsChangesAreAutomergesOwn has stock automerge save
// random editing sessions (text, marks, maps, lists, counters, nested
// objects, deletions, by several actors merging now and then) and reads
// each saved document back into its changes in Go: byte for byte the
// changes stock automerge gives for it, each after those it depends on.
func TestALoadedDocumentsChangesAreAutomergesOwn(t *testing.T) {
	o := amtest.StockAutomerge(t)
	check := func(name string, changes [][]byte) {
		t.Helper()
		doc := o.Save(t, changes)
		got, err := Load(doc, LoadLimits{MaxBytes: 1 << 30})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if diff := sameChanges(got, o.Changes(t, doc)); diff != "" {
			t.Fatalf("%s: the changes differ from automerge's: %s", name, diff)
		}
		if diff := sameChanges(got, changes); diff != "" {
			t.Fatalf("%s: the changes differ from those saved: %s", name, diff)
		}
		if _, err := Save(join(got)); err != nil { // in an order a log takes
			t.Fatalf("%s: the changes do not come each after its dependencies: %v", name, err)
		}
	}
	for seed := 1; seed <= 60; seed++ {
		check("seed "+string(rune('0'+seed%10)), o.Trace(t, seed, 40+seed*5))
	}
	for name, cs := range o.Cases(t) {
		check(name, cs)
	}
	check("scalars", o.Scalars(t))
	check("typing", amtest.Typing(2000))
	check("paste", [][]byte{amtest.Paste(100_000)})
}

// TestADocumentSavedInGoLoadsBack reads back what Save writes.
func TestADocumentSavedInGoLoadsBack(t *testing.T) {
	o := amtest.StockAutomerge(t)
	changes := o.Trace(t, 7, 300)
	doc, err := Save(join(changes))
	if err != nil {
		t.Fatal(err)
	}
	got, err := Load(doc, LoadLimits{MaxBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	if diff := sameChanges(got, changes); diff != "" {
		t.Fatalf("the changes differ from those saved: %s", diff)
	}
}

// TestALoadIsBounded refuses a document past each of its limits before
// it holds what they bound.
func TestALoadIsBounded(t *testing.T) {
	doc, err := Save(amtest.Paste(50_000))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Load(doc, LoadLimits{MaxBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	for name, lim := range map[string]LoadLimits{
		"bytes": {MaxBytes: 20_000},
		"ops":   {MaxBytes: 1 << 30, MaxOps: 10_000},
	} {
		if _, err := Load(doc, lim); !errors.Is(err, ErrLoadLimit) {
			t.Errorf("%s: %v, want ErrLoadLimit", name, err)
		}
	}
	if _, err := Load(bomb(8<<20), LoadLimits{MaxBytes: 1 << 20}); !errors.Is(err, ErrLoadLimit) {
		t.Errorf("a compression bomb: %v, want ErrLoadLimit", err)
	}
	told := errors.New("told")
	_, err = Load(doc, LoadLimits{MaxBytes: 1 << 30, BeforeOps: func(held int64) error {
		if held < 50_000*LoadOpBytes+LoadChangeBytes {
			t.Errorf("told it holds %d bytes", held)
		}
		return told
	}})
	if !errors.Is(err, told) {
		t.Errorf("BeforeOps's refusal: %v", err)
	}
}

// A fault inside a load (here one BeforeOps raises, standing in for a
// bug on bytes a peer crafted) refuses the document instead of ending
// the process.
func TestAPanicInALoadRefusesTheDocument(t *testing.T) {
	doc, err := Save(amtest.Paste(100))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Load(doc, LoadLimits{MaxBytes: 1 << 20, BeforeOps: func(int64) error { panic("a fault") }})
	if !errors.Is(err, ErrNotDocument) {
		t.Fatalf("%v, want ErrNotDocument", err)
	}
}

// A document of 129 bytes whose one op names 16 million successors
// (testdata/succ-bomb.bin, run-length columns; found by attacking the
// node from outside) is told to BeforeOps as what it holds before any of
// it is held, so that it is refused at once, not after gigabytes.
func TestSuccessorsAreChargedBeforeTheyAreHeld(t *testing.T) {
	doc, err := os.ReadFile("testdata/succ-bomb.bin")
	if err != nil {
		t.Fatal(err)
	}
	var told int64
	refused := errors.New("refused")
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = Load(doc, LoadLimits{MaxBytes: 1 << 30, BeforeOps: func(held int64) error {
		told = held
		if held > 64<<20 {
			return refused
		}
		return nil
	}})
	runtime.ReadMemStats(&after)
	if !errors.Is(err, refused) {
		t.Fatalf("%v (told %d bytes), want BeforeOps's refusal", err, told)
	}
	if told < 16_000_000*LoadSuccBytes {
		t.Errorf("told %d bytes for 16M successors", told)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 16<<20 { // gigabytes when they were held first
		t.Errorf("allocated %d bytes before the refusal", n)
	}
	// Past MaxOps, the successors alone refuse it.
	if _, err := Load(doc, LoadLimits{MaxBytes: 1 << 30, MaxOps: 1 << 20}); !errors.Is(err, ErrLoadLimit) {
		t.Errorf("with MaxOps 2^20: %v, want ErrLoadLimit", err)
	}
}
