package main

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// hookReceiver is the webhook endpoint of the webhooks scenario: it
// checks each delivery's Standard Webhooks signature, notes it, and
// answers after a fixed delay, as a slow backend does.
type hookReceiver struct {
	// Fixed after newHookReceiver.
	key    []byte
	answer time.Duration

	mu       sync.Mutex // guards everything below
	events   map[string]*hookEvent
	order    []*hookEvent // by first arrival
	arrivals []time.Time  // every attempt's
	bad      int          // deliveries refused: a signature or timestamp that did not verify, a body not JSON
	inFlight int
	maxIn    int
}

// hookEvent is one event as the receiver saw it, over its attempts.
type hookEvent struct {
	id, typ, doc  string
	first, last   time.Time // arrivals of its first and last attempt
	attempts      int
	firstChangeAt int64 // document.changed: its window, Unix ms
	lastChangeAt  int64
}

// newHookSecret makes a Standard Webhooks secret: whsec_ and the base64
// of 32 random bytes.
func newHookSecret() string {
	b := make([]byte, 32)
	rand.Read(b)
	return "whsec_" + base64.StdEncoding.EncodeToString(b)
}

func newHookReceiver(secret string, answer time.Duration) (*hookReceiver, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return nil, err
	}
	return &hookReceiver{key: key, answer: answer, events: map[string]*hookEvent{}}, nil
}

// hookTolerance is how far a delivery's timestamp may be from now, as
// the Standard Webhooks libraries allow.
const hookTolerance = 5 * time.Minute

var errHookSignature = errors.New("no signature matches")

// verifyHook checks a delivery as Standard Webhooks 1.0 says: one of the
// space-separated "v1,<base64>" signatures is the HMAC-SHA256, keyed
// with key, of id "." timestamp "." body, and the timestamp is within
// hookTolerance of now.
func verifyHook(key []byte, id, timestamp, signatures string, body []byte, now time.Time) error {
	if id == "" || timestamp == "" || signatures == "" {
		return errors.New("missing webhook-id, webhook-timestamp or webhook-signature")
	}
	ts, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil {
		return fmt.Errorf("webhook-timestamp %q: %w", timestamp, err)
	}
	if d := now.Sub(time.Unix(ts, 0)); d > hookTolerance || d < -hookTolerance {
		return fmt.Errorf("webhook-timestamp %d is %v from now", ts, d)
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + timestamp + "."))
	m.Write(body)
	want := m.Sum(nil)
	for _, s := range strings.Fields(signatures) {
		b64, ok := strings.CutPrefix(s, "v1,")
		if !ok {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(b64)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return errHookSignature
}

func (r *hookReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	now := time.Now()
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	var ev struct {
		Type string `json:"type"`
		Data struct {
			DocumentID    string `json:"documentId"`
			FirstChangeAt int64  `json:"firstChangeAt"`
			LastChangeAt  int64  `json:"lastChangeAt"`
		} `json:"data"`
	}
	id := req.Header.Get("webhook-id")
	if err == nil {
		err = verifyHook(r.key, id, req.Header.Get("webhook-timestamp"), req.Header.Get("webhook-signature"), body, now)
	}
	if err == nil {
		err = json.Unmarshal(body, &ev)
	}
	r.mu.Lock()
	if err != nil {
		r.bad++
		r.mu.Unlock()
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.arrivals = append(r.arrivals, now)
	e := r.events[id]
	if e == nil {
		e = &hookEvent{id: id, typ: ev.Type, doc: ev.Data.DocumentID, first: now,
			firstChangeAt: ev.Data.FirstChangeAt, lastChangeAt: ev.Data.LastChangeAt}
		r.events[id] = e
		r.order = append(r.order, e)
	}
	e.attempts++
	e.last = now
	r.inFlight++
	r.maxIn = max(r.maxIn, r.inFlight)
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.inFlight--
		r.mu.Unlock()
	}()
	select {
	case <-time.After(r.answer):
		w.WriteHeader(http.StatusNoContent)
	case <-req.Context().Done():
	}
}

// snapshot returns the events received so far (copies), the attempts'
// arrivals, the refused deliveries and the most in flight at once.
func (r *hookReceiver) snapshot() (events []hookEvent, arrivals []time.Time, bad, maxIn int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.order {
		events = append(events, *e)
	}
	return events, append([]time.Time(nil), r.arrivals...), r.bad, r.maxIn
}

// count returns how many distinct events arrived.
func (r *hookReceiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.order)
}

// scrapeMetrics reads a Prometheus text page and sums each metric over
// its labels; with a name{labels} key too, for the series that want
// them apart.
func scrapeMetrics(ctx context.Context, url string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return parseMetrics(resp.Body)
}

// parseMetrics parses the Prometheus text format: each sample's value
// under its full series name (with its labels) and added to its metric
// name's sum.
func parseMetrics(r io.Reader) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		series, rest := line, ""
		if i := strings.LastIndexByte(line, '}'); i >= 0 {
			series, rest = line[:i+1], strings.TrimSpace(line[i+1:])
		} else if i := strings.IndexByte(line, ' '); i >= 0 {
			series, rest = line[:i], strings.TrimSpace(line[i+1:])
		}
		f := strings.Fields(rest) // the value, then perhaps a timestamp
		if len(f) == 0 {
			return nil, fmt.Errorf("metrics: no value in %q", line)
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics: %q: %w", line, err)
		}
		name := series
		if i := strings.IndexByte(series, '{'); i >= 0 {
			name = series[:i]
			out[series] = v
		}
		out[name] += v
	}
	return out, sc.Err()
}
