package web

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// RequestLimits bound what one address may ask of the API (/api): how
// often, and how long it may take to send a request's body. The WebSocket
// and the pages are outside them; a stream is one request when it opens,
// and its body deadline never applies (it has no body).
type RequestLimits struct {
	// PerIP is the API requests one remote address may make per second,
	// with bursts of Burst; default 100 and twice PerIP.
	PerIP float64
	Burst int
	// BodyTimeout is how long a request's body may take to arrive, from
	// when its handler starts; default 10s. The server's ReadTimeout
	// cannot say this: it would also end the streams, whose connections
	// stay open for reading long after their request.
	BodyTimeout time.Duration
}

func (l *RequestLimits) setDefaults() {
	if l.PerIP <= 0 {
		l.PerIP = 100
	}
	if l.Burst <= 0 {
		l.Burst = max(1, int(math.Ceil(2*l.PerIP)))
	}
	if l.BodyTimeout <= 0 {
		l.BodyTimeout = 10 * time.Second
	}
}

// rateGate limits the requests of each remote address.
type rateGate struct {
	lim     RequestLimits
	metrics *metrics
	mu      sync.Mutex // guards byIP and swept
	byIP    map[string]*addrRate
	swept   time.Time
}

// addrRate is one address's bucket and when it last asked.
type addrRate struct {
	bucket *rate.Limiter
	last   time.Time
}

// rateSweep is how often the gate forgets addresses whose buckets have
// filled again: what it holds grows with the addresses of the last
// minute, not with every address ever seen.
const rateSweep = time.Minute

func newRateGate(lim RequestLimits, m *metrics) *rateGate {
	return &rateGate{lim: lim, metrics: m, byIP: make(map[string]*addrRate)}
}

// allow takes a request of ip at now from its bucket, and reports whether
// there was one to take.
func (g *rateGate) allow(ip string, now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if now.Sub(g.swept) > rateSweep {
		g.swept = now
		full := time.Duration(float64(g.lim.Burst) / g.lim.PerIP * float64(time.Second))
		for k, a := range g.byIP {
			if now.Sub(a.last) > full {
				delete(g.byIP, k) // as a new bucket: full
			}
		}
	}
	a := g.byIP[ip]
	if a == nil {
		a = &addrRate{bucket: rate.NewLimiter(rate.Limit(g.lim.PerIP), g.lim.Burst)}
		g.byIP[ip] = a
	}
	a.last = now
	return a.bucket.AllowN(now, 1)
}

// limit refuses a request over its address's rate with 429 before the
// handler (or the token check) runs.
func (g *rateGate) limit(next http.Handler) http.Handler {
	retry := strconv.Itoa(max(1, int(math.Ceil(1/g.lim.PerIP))))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.allow(remoteIP(r), time.Now()) {
			g.metrics.refused.WithLabelValues(refusedRate).Inc()
			w.Header().Set("Retry-After", retry)
			writeError(w, http.StatusTooManyRequests,
				fmt.Sprintf("too many API requests from this address: over %g a second (bursts of %d); retry after %ss", g.lim.PerIP, g.lim.Burst, retry))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// errSlowBody is what reading a request body returns once its deadline
// (RequestLimits.BodyTimeout) has passed.
var errSlowBody = errors.New("the request body did not arrive in time")

// bodyDeadline gives a request with a body BodyTimeout to send it: past
// that, reading it fails with errSlowBody and the connection is closed
// after the answer. Requests without a body (streams among them) are
// left alone: their connections' reads are the server's own, which tell
// it that the client went away.
func bodyDeadline(timeout time.Duration, m *metrics) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
				next.ServeHTTP(w, r)
				return
			}
			rc := http.NewResponseController(w)
			if err := rc.SetReadDeadline(time.Now().Add(timeout)); err == nil {
				r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc, metrics: m, timeout: timeout}
			}
			next.ServeHTTP(w, r)
		})
	}
}

// browserGate refuses, with 403, a request whose page allows does not
// allow (Config.AllowsBrowser).
func browserGate(allows func(*http.Request) bool, m *metrics) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !allows(r) {
				m.refused.WithLabelValues(refusedOrigin).Inc()
				writeError(w, http.StatusForbidden, "origin not allowed")
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// deadlineBody is a request body read under a deadline.
type deadlineBody struct {
	io.ReadCloser
	rc      *http.ResponseController
	metrics *metrics
	timeout time.Duration
	done    bool // read to its end, or past its deadline
}

// restartDeadline gives the body its whole time again from now: for a
// handler that waited (for its charge) before reading it.
func (b *deadlineBody) restartDeadline() {
	if !b.done {
		b.rc.SetReadDeadline(time.Now().Add(b.timeout))
	}
}

// restartBodyDeadline gives r's body its whole time to arrive again from
// now, if it has a deadline (bodyDeadline).
func restartBodyDeadline(r *http.Request) {
	if b, ok := r.Body.(*deadlineBody); ok {
		b.restartDeadline()
	}
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case b.done || err == nil:
	case errors.Is(err, io.EOF):
		// Read whole: what the connection reads now is the server's
		// watch for the client going away, which has no deadline.
		b.done = true
		b.rc.SetReadDeadline(time.Time{})
	case errors.Is(err, os.ErrDeadlineExceeded):
		b.done = true
		b.metrics.refused.WithLabelValues(refusedSlowBody).Inc()
		return n, fmt.Errorf("%w: %v", errSlowBody, err)
	}
	return n, err
}

// writeBodyError answers a request whose body could not be read: 408 when
// it did not arrive in time, else 400 with what was wrong.
func writeBodyError(w http.ResponseWriter, err error) {
	if errors.Is(err, errSlowBody) {
		w.Header().Set("Connection", "close")
		writeError(w, http.StatusRequestTimeout, "the request body did not arrive in time: send it at once")
		return
	}
	writeError(w, http.StatusBadRequest, err.Error())
}
