package history

import (
	"cmp"
	"encoding/json"
	"slices"
	"time"

	"github.com/tandemhq/tandem/awareness"
)

// Interval is a stretch of time one user was present with one status, as
// users see it: the raw intervals of every run, node and tab merged.
type Interval struct {
	User, Name string
	Status     awareness.Status // online or away
	From       time.Time
	To         time.Time // zero while still open
}

// stampLayout is RFC 3339 in UTC with at most millisecond digits: the
// precision the stores keep.
const stampLayout = "2006-01-02T15:04:05.999Z07:00"

// MarshalJSON gives the HTTP API's form:
// {"user", "name", "status", "from", "to"}, to null while open.
func (iv Interval) MarshalJSON() ([]byte, error) {
	var to *string
	if !iv.To.IsZero() {
		s := iv.To.UTC().Format(stampLayout)
		to = &s
	}
	return json.Marshal(struct {
		User   string           `json:"user"`
		Name   string           `json:"name"`
		Status awareness.Status `json:"status"`
		From   string           `json:"from"`
		To     *string          `json:"to"`
	}{iv.User, iv.Name, iv.Status, iv.From.UTC().Format(stampLayout), to})
}

// Merge turns raw intervals into what users see. For each user, at each
// moment, the status is the best of the raw intervals covering it (online
// beats away; other statuses are not presence); the output has one
// interval per maximal stretch of one status. Stretches separated by at
// most gap join: across the gap the earlier status lasts until the next
// stretch begins, so a user who reconnects, to this node or another,
// within gap has no hole. An open raw interval keeps its stretch open
// (To zero). Name is the newest non-empty name seen for the user.
//
// The intervals of one user never overlap. The result is sorted by From,
// then User, then Status; it is empty, not nil, for no presence.
func Merge(raw []awareness.HistoryInterval, gap time.Duration) []Interval {
	gap = max(gap, 0)
	type named struct {
		name string
		at   time.Time
	}
	byUser := map[string][]awareness.HistoryInterval{}
	names := map[string]named{}
	for _, r := range raw {
		if n, ok := names[r.User]; r.Name != "" && (!ok || !r.From.Before(n.at)) {
			names[r.User] = named{r.Name, r.From}
		}
		if rank(r.Status) == 0 || (!r.To.IsZero() && !r.To.After(r.From)) {
			continue
		}
		byUser[r.User] = append(byUser[r.User], r)
	}
	out := []Interval{}
	for user, ivs := range byUser {
		for _, s := range bridge(sweep(ivs), gap) {
			out = append(out, Interval{User: user, Name: names[user].name, Status: s.status, From: s.from, To: s.to})
		}
	}
	slices.SortFunc(out, func(a, b Interval) int {
		return cmp.Or(a.From.Compare(b.From), cmp.Compare(a.User, b.User), cmp.Compare(a.Status, b.Status))
	})
	return out
}

// rank orders statuses: the better covers the worse; 0 is not presence.
func rank(s awareness.Status) int {
	switch s {
	case awareness.StatusOnline:
		return 2
	case awareness.StatusAway:
		return 1
	}
	return 0
}

// stretch is a span of one status of one user; to zero is open.
type stretch struct {
	status   awareness.Status
	from, to time.Time
}

// sweep walks the starts and ends of one user's intervals in time order,
// counting the intervals of each status that cover the moment, and
// returns the maximal stretches of the best status. They are in order and
// do not overlap; only the last may be open.
func sweep(ivs []awareness.HistoryInterval) []stretch {
	type edge struct {
		at     time.Time
		status awareness.Status
		delta  int
	}
	edges := make([]edge, 0, 2*len(ivs))
	for _, iv := range ivs {
		edges = append(edges, edge{iv.From, iv.Status, 1})
		if !iv.To.IsZero() {
			edges = append(edges, edge{iv.To, iv.Status, -1})
		}
	}
	slices.SortFunc(edges, func(a, b edge) int { return a.at.Compare(b.at) })
	var out []stretch
	var online, away int // how many intervals of each status cover the moment
	var cur stretch
	for i := 0; i < len(edges); {
		at := edges[i].at
		for ; i < len(edges) && edges[i].at.Equal(at); i++ {
			if edges[i].status == awareness.StatusOnline {
				online += edges[i].delta
			} else {
				away += edges[i].delta
			}
		}
		var best awareness.Status
		switch {
		case online > 0:
			best = awareness.StatusOnline
		case away > 0:
			best = awareness.StatusAway
		}
		if best == cur.status {
			continue
		}
		if cur.status != "" {
			cur.to = at
			out = append(out, cur)
		}
		cur = stretch{status: best, from: at}
	}
	if cur.status != "" { // only open intervals cover the end
		out = append(out, cur)
	}
	return out
}

// bridge closes the holes of at most gap between stretches: the earlier
// one lasts until the next begins, and joins it if of the same status.
func bridge(ss []stretch, gap time.Duration) []stretch {
	var out []stretch
	for _, s := range ss {
		if n := len(out); n > 0 && s.from.Sub(out[n-1].to) <= gap {
			last := &out[n-1]
			if last.status == s.status {
				last.to = s.to
				continue
			}
			last.to = s.from
		}
		out = append(out, s)
	}
	return out
}
