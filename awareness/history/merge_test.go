package history

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tandemhq/tandem/awareness"
)

const (
	on   = awareness.StatusOnline
	away = awareness.StatusAway
)

// raw is a raw interval from and to minutes after t0; to -1 is open.
func raw(run int64, user string, status awareness.Status, from, to int) awareness.HistoryInterval {
	iv := awareness.HistoryInterval{Run: run, User: user, Status: status, From: at(from)}
	if to != -1 {
		iv.To = at(to)
	}
	return iv
}

// showMerged writes intervals as "user name status from-to" with minutes
// from t0, "…" while open.
func showMerged(ivs []Interval) []string {
	out := make([]string, len(ivs))
	for i, iv := range ivs {
		to := "…"
		if !iv.To.IsZero() {
			to = fmt.Sprint(iv.To.Sub(t0).Minutes())
		}
		out[i] = fmt.Sprintf("%s %s %s %v-%s", iv.User, iv.Name, iv.Status, iv.From.Sub(t0).Minutes(), to)
	}
	return out
}

func TestMerge(t *testing.T) {
	named := func(iv awareness.HistoryInterval, name string) awareness.HistoryInterval {
		iv.Name = name
		return iv
	}
	tests := []struct {
		name string
		raw  []awareness.HistoryInterval
		gap  time.Duration
		want []string
	}{
		{"nothing", nil, time.Minute, []string{}},
		{"two nodes overlapping", []awareness.HistoryInterval{
			raw(1, "ana", on, 0, 30), raw(2, "ana", on, 20, 50),
		}, 0, []string{"ana  online 0-50"}},
		{"two tabs, one inside the other", []awareness.HistoryInterval{
			raw(1, "ana", on, 0, 30), raw(1, "ana", on, 10, 20),
		}, 0, []string{"ana  online 0-30"}},
		{"online beats away", []awareness.HistoryInterval{
			raw(1, "ana", away, 0, 60), raw(2, "ana", on, 10, 20),
		}, 0, []string{"ana  away 0-10", "ana  online 10-20", "ana  away 20-60"}},
		{"away under online shows after it", []awareness.HistoryInterval{
			raw(1, "ana", on, 0, 30), raw(2, "ana", away, 10, 40),
		}, 0, []string{"ana  online 0-30", "ana  away 30-40"}},
		{"touching join", []awareness.HistoryInterval{
			raw(1, "ana", on, 0, 10), raw(1, "ana", on, 10, 20),
		}, 0, []string{"ana  online 0-20"}},
		{"a gap below gap joins", []awareness.HistoryInterval{
			raw(1, "ana", on, 0, 10), raw(2, "ana", on, 11, 20),
		}, 2 * time.Minute, []string{"ana  online 0-20"}},
		{"a gap of gap joins", []awareness.HistoryInterval{
			raw(1, "ana", on, 0, 10), raw(2, "ana", on, 12, 20),
		}, 2 * time.Minute, []string{"ana  online 0-20"}},
		{"a gap above gap stays", []awareness.HistoryInterval{
			raw(1, "ana", on, 0, 10), raw(2, "ana", on, 13, 20),
		}, 2 * time.Minute, []string{"ana  online 0-10", "ana  online 13-20"}},
		{"across a short gap the earlier status lasts", []awareness.HistoryInterval{
			raw(1, "ana", on, 0, 10), raw(2, "ana", away, 11, 20),
		}, 2 * time.Minute, []string{"ana  online 0-11", "ana  away 11-20"}},
		{"reconnecting to another node is one interval", []awareness.HistoryInterval{
			raw(1, "ana", on, 0, 10), raw(2, "ana", on, 10, -1),
		}, time.Minute, []string{"ana  online 0-…"}},
		{"open covers what comes after", []awareness.HistoryInterval{
			raw(1, "ana", away, 0, -1), raw(2, "ana", on, 10, 20),
		}, 0, []string{"ana  away 0-10", "ana  online 10-20", "ana  away 20-…"}},
		{"open online swallows away", []awareness.HistoryInterval{
			raw(1, "ana", on, 0, -1), raw(2, "ana", away, 5, 15),
		}, 0, []string{"ana  online 0-…"}},
		{"users apart, sorted by start then user", []awareness.HistoryInterval{
			raw(1, "bo", on, 0, 10), raw(1, "ana", away, 5, 10), raw(1, "ana", on, 0, 3),
		}, 0, []string{"ana  online 0-3", "bo  online 0-10", "ana  away 5-10"}},
		{"the newest name", []awareness.HistoryInterval{
			named(raw(1, "ana", on, 10, 20), "Ana B"),
			named(raw(1, "ana", on, 0, 10), "Ana"),
			raw(2, "ana", on, 20, 30),
		}, 0, []string{"ana Ana B online 0-30"}},
		{"offline and empty intervals are not presence", []awareness.HistoryInterval{
			raw(1, "ana", awareness.StatusOffline, 0, 30), raw(1, "ana", on, 5, 5), raw(1, "ana", on, 40, 30),
		}, 0, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := showMerged(Merge(tt.raw, tt.gap))
			if !slices.Equal(got, tt.want) {
				t.Fatalf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestIntervalJSON(t *testing.T) {
	for _, tt := range []struct {
		iv   Interval
		want string
	}{
		{
			Interval{User: "u1", Name: "Ana", Status: on, From: at(0).Add(1500 * time.Microsecond), To: at(30)},
			`{"user":"u1","name":"Ana","status":"online","from":"2026-03-02T10:00:00.001Z","to":"2026-03-02T10:30:00Z"}`,
		},
		{
			Interval{User: "u1", Status: away, From: at(0).In(time.FixedZone("CET", 3600))},
			`{"user":"u1","name":"","status":"away","from":"2026-03-02T10:00:00Z","to":null}`,
		},
	} {
		b, err := json.Marshal(tt.iv)
		if err != nil || string(b) != tt.want {
			t.Errorf("Marshal = %s, %v\nwant %s", b, err, tt.want)
		}
	}
}

// Merge's output for hundreds of random raw sets matches a model over
// whole minutes: at each minute, a user's status is the best raw status
// covering it, or, in a hole of at most gap between covered minutes, the
// status before the hole; one user's intervals never overlap, and two
// that touch differ in status.
func TestMergeMatchesTheModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	users := []string{"ana", "bo", "cy"}
	const horizon = 200 // past every finite end: open intervals reach it
	for round := range 500 {
		var rawSet []awareness.HistoryInterval
		for range rng.IntN(12) {
			from := rng.IntN(100)
			to := from + rng.IntN(30)
			if rng.IntN(10) == 0 {
				to = -1
			}
			status := on
			if rng.IntN(2) == 0 {
				status = away
			}
			rawSet = append(rawSet, raw(int64(rng.IntN(3)), users[rng.IntN(len(users))], status, from, to))
		}
		gap := time.Duration(rng.IntN(6)) * time.Minute
		merged := Merge(rawSet, gap)
		if !slices.IsSortedFunc(merged, func(a, b Interval) int { return a.From.Compare(b.From) }) {
			t.Fatalf("round %d: not sorted by From: %q", round, showMerged(merged))
		}
		for _, user := range users {
			want := modelStatus(rawSet, user, gap, horizon)
			got := make([]awareness.Status, horizon)
			var prev *Interval
			for i := range merged {
				iv := &merged[i]
				if iv.User != user {
					continue
				}
				from, to := int(iv.From.Sub(t0)/time.Minute), horizon
				if !iv.To.IsZero() {
					to = int(iv.To.Sub(t0) / time.Minute)
				}
				if prev != nil && (prev.To.IsZero() || prev.To.After(iv.From)) {
					t.Fatalf("round %d: %s's intervals overlap: %q", round, user, showMerged(merged))
				}
				if prev != nil && prev.To.Equal(iv.From) && prev.Status == iv.Status {
					t.Fatalf("round %d: %s's intervals touch with one status: %q", round, user, showMerged(merged))
				}
				for m := from; m < to; m++ {
					got[m] = iv.Status
				}
				prev = iv
			}
			if !slices.Equal(got, want) {
				t.Fatalf("round %d, gap %v, %s:\nraw    %q\nmerged %q\ngot  %v\nwant %v",
					round, gap, user, show(rawSet), showMerged(merged), got, want)
			}
		}
	}
}

// modelStatus is user's status at each minute before horizon, as Merge
// is to give it.
func modelStatus(rawSet []awareness.HistoryInterval, user string, gap time.Duration, horizon int) []awareness.Status {
	status := make([]awareness.Status, horizon)
	for _, iv := range rawSet {
		if iv.User != user {
			continue
		}
		from, to := int(iv.From.Sub(t0)/time.Minute), horizon
		if !iv.To.IsZero() {
			to = int(iv.To.Sub(t0) / time.Minute)
		}
		for m := from; m < to; m++ {
			if status[m] != on {
				status[m] = iv.Status
			}
		}
	}
	for m := 1; m < horizon; m++ {
		if status[m] != "" || status[m-1] == "" {
			continue
		}
		hole := m
		for hole < horizon && status[hole] == "" {
			hole++
		}
		if hole < horizon && time.Duration(hole-m)*time.Minute <= gap {
			for k := m; k < hole; k++ {
				status[k] = status[m-1]
			}
		}
		m = hole
	}
	return status
}

func BenchmarkMerge(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	var rawSet []awareness.HistoryInterval
	for i := range 1000 {
		from := rng.IntN(600)
		rawSet = append(rawSet, raw(int64(i%4), fmt.Sprint("u", rng.IntN(50)), on, from, from+rng.IntN(60)))
	}
	b.ReportAllocs()
	for b.Loop() {
		Merge(rawSet, time.Minute)
	}
}
