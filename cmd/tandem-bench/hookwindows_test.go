package main

import (
	"slices"
	"testing"
	"time"
)

func changed(id, doc string, first, last int64, attempts int) hookEvent {
	return hookEvent{id: id, typ: "document.changed", doc: doc, firstChangeAt: first, lastChangeAt: last, attempts: attempts}
}

func TestAnalyseWindowsCountsWindowsDuplicatesAndOverlaps(t *testing.T) {
	events := []hookEvent{
		changed("1", "a", 1000, 11000, 1),
		changed("2", "a", 11500, 13000, 2),
		changed("3", "b", 1000, 5000, 1),
		changed("4", "b", 4000, 6000, 1), // opened while the one before was
		{id: "5", typ: "document.created", doc: "c"},
	}
	s := analyseWindows(events, nil, 0, 0)
	if s.docs != 2 || !slices.Equal(s.perDoc, []int{2, 2}) || s.duplicates != 1 || s.overlaps != 1 || s.longest != 10*time.Second {
		t.Fatalf("%+v", s)
	}
}

func TestAnalyseWindowsFindsEditsInNoWindow(t *testing.T) {
	events := []hookEvent{changed("1", "a", 1100, 5000, 1), changed("2", "a", 9000, 9000, 1)}
	edits := map[string][]int64{
		"a": {1000, 3000, 5000, 7000, 8900, 20000}, // 7000 in none; 20000 not checked
		"b": {1000},                                // a document never told
	}
	s := analyseWindows(events, edits, 10000, 500)
	if s.checked != 6 || s.uncovered != 2 {
		t.Fatalf("checked %d, uncovered %d; want 6, 2", s.checked, s.uncovered)
	}
	// Without slack the first edit, noted 100 ms after it was sent, is in none.
	if s := analyseWindows(events, edits, 10000, 0); s.uncovered != 4 {
		t.Fatalf("no slack: uncovered %d, want 4", s.uncovered)
	}
}

func TestRatePerSecondCountsEachSecond(t *testing.T) {
	t0 := time.Unix(100, 0)
	times := []time.Time{t0, t0.Add(300 * time.Millisecond), t0.Add(2500 * time.Millisecond)}
	if got := ratePerSecond(times); !slices.Equal(got, []int{2, 0, 1}) {
		t.Fatalf("%v", got)
	}
	if ratePerSecond(nil) != nil {
		t.Fatal("none: want nil")
	}
}
