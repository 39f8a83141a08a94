package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestReadersFindEveryMarkerAndNothingElse: the markers the REST edits
// insert are found wherever they sit among typed text, in order, and
// text that only looks like the start of one is not taken for one.
func TestReadersFindEveryMarkerAndNothingElse(t *testing.T) {
	for _, tc := range []struct {
		text string
		want []int
	}{
		{"", nil},
		{"xxxx", nil},
		{restMarker(0), []int{0}},
		{restMarker(12) + restMarker(7) + "xxhh" + restMarker(123456), []int{12, 7, 123456}},
		{"x[r" + restMarker(3) + "x", []int{3}},         // an unfinished marker before a whole one
		{"[r]" + restMarker(4) + "[r5" + "x", []int{4}}, // empty, and cut short
		{"[rx5]" + "[r-1]" + "[r5 ]", nil},
		{strings.Repeat("x", 1000) + restMarker(99), []int{99}},
	} {
		var got []int
		restMarkers(tc.text, func(seq int) { got = append(got, seq) })
		if !slices.Equal(got, tc.want) {
			t.Errorf("restMarkers(%q) = %v, want %v", tc.text, got, tc.want)
		}
	}
}

// TestTheMedianIsTheMiddleRunAndTheRangeItsEnds: over an odd count the
// median is the middle value, over an even one the mean of the middle
// two, whatever the order given; the range is the least and the
// greatest.
func TestTheMedianIsTheMiddleRunAndTheRangeItsEnds(t *testing.T) {
	ms := func(xs ...int) []time.Duration {
		var out []time.Duration
		for _, x := range xs {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	for _, tc := range []struct {
		xs             []time.Duration
		median, lo, hi time.Duration
	}{
		{nil, 0, 0, 0},
		{ms(5), 5 * time.Millisecond, 5 * time.Millisecond, 5 * time.Millisecond},
		{ms(30, 10, 20), 20 * time.Millisecond, 10 * time.Millisecond, 30 * time.Millisecond},
		{ms(40, 10, 30, 20), 25 * time.Millisecond, 10 * time.Millisecond, 40 * time.Millisecond},
	} {
		in := slices.Clone(tc.xs)
		m, lo, hi := medianRange(tc.xs)
		if m != tc.median || lo != tc.lo || hi != tc.hi {
			t.Errorf("medianRange(%v) = %v, %v, %v; want %v, %v, %v", tc.xs, m, lo, hi, tc.median, tc.lo, tc.hi)
		}
		if !slices.Equal(in, tc.xs) {
			t.Errorf("medianRange reordered its argument: %v", tc.xs)
		}
	}
}
