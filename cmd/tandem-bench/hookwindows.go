package main

import (
	"slices"
	"time"
)

// windowStats is what the document.changed events a receiver took say
// about the node's debounce windows.
type windowStats struct {
	docs       int   // documents named by an event
	perDoc     []int // events per document, sorted
	duplicates int   // events that arrived more than once (same webhook-id)
	longest    time.Duration
	// overlaps counts pairs of one document's windows whose spans
	// (firstChangeAt to lastChangeAt) overlap: two windows open at once.
	overlaps int
	// Of the edits checked (made before the checked time), those that
	// fall in none of their document's windows.
	checked, uncovered int
}

// analyseWindows reads the document.changed events against the edits
// made (each document's send times, Unix ms, sorted). An edit counts as
// in a window when the window's first change is at most slack after it
// (the node notes it when it arrives, later than it was sent) and its
// last change is not before it. Only edits sent before checkBefore
// (Unix ms) are checked: later ones may be in windows not yet delivered.
func analyseWindows(events []hookEvent, edits map[string][]int64, checkBefore, slack int64) windowStats {
	var s windowStats
	byDoc := map[string][]hookEvent{}
	for _, e := range events {
		if e.typ != "document.changed" {
			continue
		}
		if e.attempts > 1 {
			s.duplicates++
		}
		byDoc[e.doc] = append(byDoc[e.doc], e)
		s.longest = max(s.longest, time.Duration(e.lastChangeAt-e.firstChangeAt)*time.Millisecond)
	}
	s.docs = len(byDoc)
	for _, ws := range byDoc {
		s.perDoc = append(s.perDoc, len(ws))
		slices.SortFunc(ws, func(a, b hookEvent) int { return int(a.firstChangeAt - b.firstChangeAt) })
		for i := 1; i < len(ws); i++ {
			if ws[i].firstChangeAt <= ws[i-1].lastChangeAt {
				s.overlaps++
			}
		}
	}
	slices.Sort(s.perDoc)
	for doc, ts := range edits {
		ws := byDoc[doc]
		for _, t := range ts {
			if t >= checkBefore {
				break
			}
			s.checked++
			in := false
			for _, w := range ws {
				if w.firstChangeAt <= t+slack && w.lastChangeAt >= t {
					in = true
					break
				}
			}
			if !in {
				s.uncovered++
			}
		}
	}
	return s
}

// ratePerSecond is how many of the sorted times fall in each whole
// second from the first: the deliveries' arrivals a second.
func ratePerSecond(times []time.Time) []int {
	if len(times) == 0 {
		return nil
	}
	t0 := times[0]
	var out []int
	for _, t := range times {
		i := int(t.Sub(t0) / time.Second)
		for len(out) <= i {
			out = append(out, 0)
		}
		out[i]++
	}
	return out
}
