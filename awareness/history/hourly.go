package history

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// Hour sums up one UTC hour of presence.
type Hour struct {
	Hour        time.Time `json:"hour"`        // its start, in UTC
	Users       int       `json:"users"`       // users present at some moment of it
	Peak        int       `json:"peak"`        // the most users present at one moment
	UserMinutes float64   `json:"userMinutes"` // minutes of presence summed over users, to 0.1
}

// Hourly sums up merged intervals per whole UTC hour, from the hour of
// from up to to (the hour that begins at to is not in it): one Hour per
// hour, empty ones included. Online and away are both presence; an open
// interval lasts until now; a user's overlapping intervals count once.
// The caller bounds the span: the result has one entry per hour of it.
func Hourly(merged []Interval, from, to, now time.Time) []Hour {
	start := from.UTC().Truncate(time.Hour)
	if !start.Before(to) {
		return []Hour{}
	}
	n := int((to.Sub(start) + time.Hour - 1) / time.Hour)
	end := start.Add(time.Duration(n) * time.Hour)
	out := make([]Hour, n)
	for i := range out {
		out[i].Hour = start.Add(time.Duration(i) * time.Hour)
	}

	type span struct{ from, to time.Time }
	byUser := map[string][]span{}
	for _, iv := range merged {
		s := span{iv.From, iv.To}
		if s.to.IsZero() {
			s.to = now
		}
		s.from, s.to = later(s.from, start), earlier(s.to, end)
		if s.from.Before(s.to) {
			byUser[iv.User] = append(byUser[iv.User], s)
		}
	}

	// Each hour's pieces of presence, a user's never overlapping.
	pieces := make([][]span, n)
	for _, spans := range byUser {
		slices.SortFunc(spans, func(a, b span) int { return a.from.Compare(b.from) })
		union := spans[:1]
		for _, s := range spans[1:] {
			if last := &union[len(union)-1]; !s.from.After(last.to) {
				last.to = later(last.to, s.to)
			} else {
				union = append(union, s)
			}
		}
		seen := -1 // the last hour this user was counted in
		for _, s := range union {
			for h := int(s.from.Sub(start) / time.Hour); h < n && out[h].Hour.Before(s.to); h++ {
				p := span{later(s.from, out[h].Hour), earlier(s.to, out[h].Hour.Add(time.Hour))}
				pieces[h] = append(pieces[h], p)
				if h != seen {
					out[h].Users++
					seen = h
				}
			}
		}
	}

	for h, ps := range pieces {
		type edge struct {
			at    time.Time
			delta int
		}
		edges := make([]edge, 0, 2*len(ps))
		var total time.Duration
		for _, p := range ps {
			total += p.to.Sub(p.from)
			edges = append(edges, edge{p.from, 1}, edge{p.to, -1})
		}
		// Intervals are half-open: at one moment, ends go before starts.
		slices.SortFunc(edges, func(a, b edge) int { return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.delta, b.delta)) })
		present := 0
		for _, e := range edges {
			present += e.delta
			out[h].Peak = max(out[h].Peak, present)
		}
		out[h].UserMinutes = math.Round(total.Minutes()*10) / 10
	}
	return out
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
