package history

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"
)

// merged is a merged interval from and to minutes after t0 (10:00 UTC);
// to -1 is open.
func merged(user string, from, to int) Interval {
	iv := Interval{User: user, Status: on, From: at(from)}
	if to != -1 {
		iv.To = at(to)
	}
	return iv
}

func showHours(hs []Hour) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = fmt.Sprintf("%s users=%d peak=%d minutes=%v", h.Hour.Format("15:04"), h.Users, h.Peak, h.UserMinutes)
	}
	return out
}

func TestHourly(t *testing.T) {
	tests := []struct {
		name     string
		merged   []Interval
		from, to time.Time
		now      time.Time
		want     []string
	}{
		{"a peak of 3", []Interval{
			merged("ana", 0, 30), merged("bo", 15, 45), merged("cy", 20, 50), merged("dee", 50, 70),
		}, at(0), at(120), at(180), []string{
			"10:00 users=4 peak=3 minutes=100",
			"11:00 users=1 peak=1 minutes=10",
		}},
		{"one ends as the next begins: never two at once", []Interval{
			merged("ana", 0, 30), merged("bo", 30, 60),
		}, at(0), at(60), at(180), []string{"10:00 users=2 peak=1 minutes=60"}},
		{"a user's overlapping intervals count once", []Interval{
			merged("ana", 0, 40), {User: "ana", Status: away, From: at(30), To: at(50)}, merged("ana", 55, 58),
		}, at(0), at(60), at(180), []string{"10:00 users=1 peak=1 minutes=53"}},
		{"open until now", []Interval{
			merged("ana", 50, -1), merged("bo", 0, 10),
		}, at(0), at(200), at(140), []string{
			"10:00 users=2 peak=1 minutes=20",
			"11:00 users=1 peak=1 minutes=60",
			"12:00 users=1 peak=1 minutes=20",
			"13:00 users=0 peak=0 minutes=0",
		}},
		{"from is truncated to its hour; the hour at to is left out", []Interval{
			merged("ana", -30, 5), merged("bo", 119, 125),
		}, at(17), at(120), at(180), []string{
			"10:00 users=1 peak=1 minutes=5",
			"11:00 users=1 peak=1 minutes=1",
		}},
		{"to within an hour takes it whole", []Interval{
			merged("bo", 119, 125),
		}, at(60), at(121), at(180), []string{
			"11:00 users=1 peak=1 minutes=1",
			"12:00 users=1 peak=1 minutes=5",
		}},
		{"minutes to a tenth", []Interval{
			{User: "ana", Status: on, From: at(0), To: at(0).Add(20 * time.Second)},
			{User: "bo", Status: on, From: at(0), To: at(0).Add(2*time.Minute + 57*time.Second)},
		}, at(0), at(60), at(180), []string{"10:00 users=2 peak=2 minutes=3.3"}},
		{"no hours", []Interval{merged("ana", 0, 30)}, at(60), at(60), at(180), []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := showHours(Hourly(tt.merged, tt.from, tt.to, tt.now))
			if !slices.Equal(got, tt.want) {
				t.Fatalf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestHourJSON(t *testing.T) {
	hs := Hourly([]Interval{merged("ana", 0, 10), {User: "bo", Status: on, From: at(0), To: at(0).Add(20 * time.Second)}}, at(0), at(60), at(60))
	b, err := json.Marshal(hs)
	want := `[{"hour":"2026-03-02T10:00:00Z","users":2,"peak":2,"userMinutes":10.3}]`
	if err != nil || string(b) != want {
		t.Fatalf("Marshal = %s, %v\nwant %s", b, err, want)
	}
}
