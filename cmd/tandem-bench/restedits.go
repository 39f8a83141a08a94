package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/automerge/automerge-go"
)

// REST edits during typing (--rest-edits): a backend edits the document
// the typists type into over REST, as the README's "Your backend" does,
// while the typists type and the readers read. A paced sender makes
// PATCH /api/docs/{id} requests on a fixed schedule, each a splice of a
// marker of its own at the start of the text, without waiting for the
// answers to the ones before (open loop: a late answer delays no
// request, and each is timed from when it was due, so the sender's own
// delays count against the server too). The readers, which answer every
// sync message as before, read their text after each and time each
// marker from when its edit was due; the drain starts once the last
// edit is answered. Each run with edits is paired with one without on
// the same node (--rest-runs pairs, alternating), the readers reading
// their text in both, so that the typists' latency with and without the
// edits differs by what the edits cost.

var (
	restEditRate = flag.Float64("rest-edits", 0,
		"typing: PATCH edits a second from a paced sender into the typed document, as a backend makes them over REST; runs against one node (--url), each run paired with one without the edits")
	restRuns = flag.Int("rest-runs", 1, "typing with --rest-edits: pairs of runs, without the edits and with them, alternating; prints the medians and ranges")
)

var errRESTOneNode = errors.New("--rest-edits runs against one node: --url, not --compare or --cluster")

// restMarker is the text an edit inserts: its sequence number in
// brackets.
func restMarker(seq int) string { return "[r" + strconv.Itoa(seq) + "]" }

// restMarkers calls fn with the sequence number of each marker in text,
// in order.
func restMarkers(text string, fn func(seq int)) {
	for {
		i := strings.Index(text, "[r")
		if i < 0 {
			return
		}
		text = text[i+2:]
		j := 0
		for j < len(text) && text[j] >= '0' && text[j] <= '9' {
			j++
		}
		if j == 0 || j == len(text) || text[j] != ']' {
			continue
		}
		if n, err := strconv.Atoi(text[:j]); err == nil {
			fn(n)
		}
		text = text[j+1:]
	}
}

// restEdits sends one run's edits and collects what they took.
type restEdits struct {
	// Fixed once the run starts.
	rate   float64
	url    string // the document's URL in the REST API
	client *http.Client

	inflight sync.WaitGroup // the edits sent and not answered

	mu       sync.Mutex // guards the fields below
	start    time.Time  // edit n is due at start + n/rate
	sent     int
	answers  []time.Duration       // of the edits answered 200: from due to answer
	bySecond [][]time.Duration     // answers, by the second of the run they were due in
	failed   map[string]int        // the other answers, by status or error
	written  map[int]time.Duration // the edits answered 200, with their answers' wait
	arrivals []time.Duration       // from due to a reader seeing the marker, each reader's
	seen     []map[int]bool        // by reader: the markers it has seen
}

// newRESTEdits returns the edits of a run into documentID on the node
// whose WebSocket URL is wsURL, at rate a second (0: none, the readers
// only read their text).
func newRESTEdits(wsURL, documentID string, rate float64, readers int) (*restEdits, error) {
	u, err := url.Parse(wsURL)
	if err != nil {
		return nil, err
	}
	switch u.Scheme {
	case "ws":
		u.Scheme = "http"
	case "wss":
		u.Scheme = "https"
	}
	u.Path = strings.TrimSuffix(u.Path, "/ws") + "/api/docs/" + documentID
	r := &restEdits{
		rate: rate, url: u.String(),
		// A backend's client: connections kept and reused, as many as the
		// edits in flight.
		client:  &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 256}},
		failed:  map[string]int{},
		written: map[int]time.Duration{},
		seen:    make([]map[int]bool, readers),
	}
	for i := range r.seen {
		r.seen[i] = map[int]bool{}
	}
	return r, nil
}

// send sends the edits on schedule until ctx ends.
func (r *restEdits) send(ctx context.Context) {
	if r.rate <= 0 {
		return
	}
	interval := time.Duration(float64(time.Second) / r.rate)
	start := time.Now()
	r.mu.Lock()
	r.start = start
	r.mu.Unlock()
	t := time.NewTimer(0)
	defer t.Stop()
	for n := 0; ; n++ {
		due := start.Add(time.Duration(n) * interval)
		t.Reset(time.Until(due))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r.mu.Lock()
		r.sent++
		r.mu.Unlock()
		r.inflight.Add(1)
		go r.edit(n, due)
	}
}

// edit sends edit seq, due at due, and records its answer.
func (r *restEdits) edit(seq int, due time.Time) {
	defer r.inflight.Done()
	body, _ := json.Marshal([]map[string]any{{"op": "splice", "path": []string{"text"}, "index": 0, "insert": restMarker(seq)}})
	req, err := http.NewRequest(http.MethodPatch, r.url, strings.NewReader(string(body)))
	if err != nil {
		panic(err)
	}
	req.Header.Set("Content-Type", "application/json")
	var outcome string
	res, err := r.client.Do(req)
	if err == nil {
		var answer struct {
			Changes []string `json:"changes"`
			Error   string   `json:"error"`
		}
		err = json.NewDecoder(res.Body).Decode(&answer)
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		switch {
		case res.StatusCode != http.StatusOK:
			outcome = res.Status + ": " + answer.Error
			if seq < 3 { // the start of the run, apart from the rest
				outcome += fmt.Sprintf(" (edit %d)", seq)
			}
		case err != nil || len(answer.Changes) != 1:
			outcome = fmt.Sprintf("200 without its change (%v)", err)
		}
	} else {
		outcome = err.Error()
	}
	took := time.Since(due)
	r.mu.Lock()
	defer r.mu.Unlock()
	if outcome != "" {
		r.failed[outcome]++
		return
	}
	r.answers = append(r.answers, took)
	sec := int(float64(seq) / r.rate)
	for len(r.bySecond) <= sec {
		r.bySecond = append(r.bySecond, nil)
	}
	r.bySecond[sec] = append(r.bySecond[sec], took)
	r.written[seq] = took
}

// read is a reader's look at its document after a sync message: each
// marker it has not seen before arrived now.
func (r *restEdits) read(reader int, d *automerge.Doc) {
	text, err := d.Path("text").Text().Get()
	if err != nil {
		return
	}
	now := time.Now()
	var fresh []int
	restMarkers(text, func(seq int) {
		if !r.seen[reader][seq] { // only this reader's goroutine uses its map
			r.seen[reader][seq] = true
			fresh = append(fresh, seq)
		}
	})
	if len(fresh) == 0 {
		return
	}
	interval := time.Duration(float64(time.Second) / r.rate)
	r.mu.Lock()
	for _, seq := range fresh {
		r.arrivals = append(r.arrivals, now.Sub(r.start.Add(time.Duration(seq)*interval)))
	}
	r.mu.Unlock()
}

// restResult is what a run's edits measured.
type restResult struct {
	sent              int
	answers, arrivals []time.Duration // sorted
	// The answers' p50 by the second of the run they were due in: a
	// server that keeps up answers as fast at the end as at the start.
	bySecond          []time.Duration
	failed            map[string]int
	missing, expected int // arrivals of written edits that did not come, of all due
	// The written edits some reader did not see, by sequence, with
	// their answers' wait and the readers that did not see them.
	unseen []string
}

// result waits for the answers still due, then returns the run's
// figures. The readers must be done.
func (r *restEdits) result() restResult {
	r.inflight.Wait()
	r.client.CloseIdleConnections()
	r.mu.Lock()
	defer r.mu.Unlock()
	res := restResult{sent: r.sent, answers: slices.Clone(r.answers), arrivals: slices.Clone(r.arrivals), failed: r.failed}
	slices.Sort(res.answers)
	for _, xs := range r.bySecond {
		slices.Sort(xs)
		res.bySecond = append(res.bySecond, pct(xs, 50))
	}
	slices.Sort(res.arrivals)
	for _, seq := range slices.Sorted(maps.Keys(r.written)) {
		missed := 0
		for _, seen := range r.seen {
			res.expected++
			if !seen[seq] {
				missed++
			}
		}
		res.missing += missed
		if missed > 0 {
			res.unseen = append(res.unseen, fmt.Sprintf("edit %d (answered after %v) by %d readers", seq, r.written[seq].Round(time.Millisecond), missed))
		}
	}
	return res
}

func printREST(r restResult, rate float64) {
	fmt.Printf("REST edits           %d sent at %.0f/s, %d answered 200", r.sent, rate, len(r.answers))
	for outcome, n := range r.failed {
		fmt.Printf(", %d %s", n, outcome)
	}
	fmt.Println()
	fmt.Printf("  answer p50/p99/max %v / %v / %v\n", pct(r.answers, 50), pct(r.answers, 99), pct(r.answers, 100))
	fmt.Printf("  answer p50 by second due %v\n", r.bySecond)
	fmt.Printf("  at readers p50/p99 %v / %v (%d arrivals; %d of %d due did not arrive within the drain)\n",
		pct(r.arrivals, 50), pct(r.arrivals, 99), len(r.arrivals), r.missing, r.expected)
	for _, u := range r.unseen[:min(len(r.unseen), 10)] {
		fmt.Printf("    not seen: %s\n", u)
	}
}

// runRESTTyping runs the typing scenario in pairs, without the edits and
// with them, and prints each run and the medians.
func runRESTTyping(ctx context.Context, o options) error {
	if len(o.urls) != 1 {
		return errRESTOneNode
	}
	fmt.Printf("typing with REST edits: %d pairs of runs, without and with %.0f edits a second\n", *restRuns, *restEditRate)
	var without, with []typingResult
	var rest []restResult
	for i := 0; i < *restRuns; i++ {
		for _, rate := range []float64{0, *restEditRate} {
			l := loadAverages()
			fmt.Printf("== run %d, %.0f REST edits a second (load %.2f %.2f %.2f)\n", i+1, rate, l[0], l[1], l[2])
			var edits *restEdits
			t, err := measureTypingWith(ctx, o, func(doc string) (*restEdits, error) {
				var err error
				edits, err = newRESTEdits(o.urls[0], doc, rate, o.readers)
				return edits, err
			})
			if err != nil {
				return err
			}
			printTyping(t, o)
			if rate == 0 {
				without = append(without, t)
				continue
			}
			with = append(with, t)
			rest = append(rest, edits.result())
			printREST(rest[len(rest)-1], rate)
		}
	}
	fmt.Printf("== medians of %d runs each (range)\n", *restRuns)
	typists := func(rs []typingResult, p float64) []time.Duration {
		var out []time.Duration
		for _, r := range rs {
			out = append(out, pct(r.latencies, p))
		}
		return out
	}
	of := func(p float64, get func(restResult) []time.Duration) []time.Duration {
		var out []time.Duration
		for _, r := range rest {
			out = append(out, pct(get(r), p))
		}
		return out
	}
	answers := func(r restResult) []time.Duration { return r.answers }
	arrivals := func(r restResult) []time.Duration { return r.arrivals }
	fmt.Printf("typists p50, without / with  %s / %s\n", spread(typists(without, 50)), spread(typists(with, 50)))
	fmt.Printf("typists p99, without / with  %s / %s\n", spread(typists(without, 99)), spread(typists(with, 99)))
	if len(o.serverPIDs) > 0 {
		cpu := func(rs []typingResult) []time.Duration {
			var out []time.Duration
			for _, r := range rs {
				out = append(out, time.Duration(r.cpu*float64(time.Second)))
			}
			return out
		}
		fmt.Printf("server CPU, without / with   %s / %s\n", spread(cpu(without)), spread(cpu(with)))
	}
	fmt.Printf("REST answer p50 / p99        %s / %s\n", spread(of(50, answers)), spread(of(99, answers)))
	fmt.Printf("REST at readers p50 / p99    %s / %s\n", spread(of(50, arrivals)), spread(of(99, arrivals)))
	return nil
}

// medianRange returns the median of xs (the mean of the middle two of an
// even count), its least and its greatest.
func medianRange(xs []time.Duration) (median, lo, hi time.Duration) {
	if len(xs) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	median = s[n/2]
	if n%2 == 0 {
		median = (s[n/2-1] + s[n/2]) / 2
	}
	return median, s[0], s[n-1]
}

// spread writes a median and its range.
func spread(xs []time.Duration) string {
	m, lo, hi := medianRange(xs)
	return fmt.Sprintf("%v (%v-%v)", m.Round(100*time.Microsecond), lo.Round(100*time.Microsecond), hi.Round(100*time.Microsecond))
}
