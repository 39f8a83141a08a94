package web

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/tandemhq/tandem/internal/auth"
)

// StreamLimits bound the long-lived streams (presence watch, notification
// stream) a node serves: each holds a goroutine, a subscription and, for
// a watch, follows of its users across the cluster.
type StreamLimits struct {
	PerIP   int // open streams from one remote address; default 16
	PerUser int // open streams of one token's user; default 16
	Watched int // user ids followed by all watch streams of the node; default 100,000
	// WatchedPerIP bounds the user ids followed by the watch streams of
	// one remote address, so that one address (idle streams cost it
	// nothing) cannot take the node's Watched; default a tenth of
	// Watched, but at least one full watch (1,000) and at most Watched.
	WatchedPerIP int
}

func (l *StreamLimits) setDefaults() {
	if l.PerIP <= 0 {
		l.PerIP = 16
	}
	if l.PerUser <= 0 {
		l.PerUser = 16
	}
	if l.Watched <= 0 {
		l.Watched = 100_000
	}
	if l.WatchedPerIP <= 0 {
		l.WatchedPerIP = max(maxWatchedUsers, l.Watched/10)
	}
	l.WatchedPerIP = min(l.WatchedPerIP, l.Watched)
}

// streamGate counts the open streams against StreamLimits.
type streamGate struct {
	lim     StreamLimits
	metrics *metrics
	mu      sync.Mutex // guards perIP, perUser, watchedPerIP and watched
	perIP   map[string]int
	perUser map[string]int
	// watchedPerIP is the user ids followed by each address's watches.
	watchedPerIP map[string]int
	watched      int
}

func newStreamGate(lim StreamLimits, m *metrics) *streamGate {
	lim.setDefaults()
	return &streamGate{lim: lim, metrics: m, perIP: make(map[string]int), perUser: make(map[string]int),
		watchedPerIP: make(map[string]int)}
}

// open admits a stream of r following watched user ids, or answers 429
// and reports false. The caller calls the returned done when the stream
// ends.
func (g *streamGate) open(w http.ResponseWriter, r *http.Request, watched int) (done func(), ok bool) {
	ip := remoteIP(r)
	user := ""
	if gr := auth.FromContext(r.Context()); gr != nil {
		user = gr.UserID
	}
	g.mu.Lock()
	var refusal, reason string
	switch {
	case g.perIP[ip] >= g.lim.PerIP:
		reason, refusal = refusedStreamsPerIP, fmt.Sprintf("%d streams open from this address, the limit", g.lim.PerIP)
	case user != "" && g.perUser[user] >= g.lim.PerUser:
		reason, refusal = refusedStreamsPerUser, fmt.Sprintf("%d streams open for this user, the limit", g.lim.PerUser)
	case g.watchedPerIP[ip]+watched > g.lim.WatchedPerIP:
		reason, refusal = refusedWatchedPerIP, fmt.Sprintf("the watches from this address would follow %d user ids, over the limit of %d: close one first",
			g.watchedPerIP[ip]+watched, g.lim.WatchedPerIP)
	case g.watched+watched > g.lim.Watched:
		reason, refusal = refusedWatched, "this server follows as many users as it may: try again later"
	}
	if refusal != "" {
		g.mu.Unlock()
		g.metrics.refused.WithLabelValues(reason).Inc()
		writeError(w, http.StatusTooManyRequests, refusal)
		return nil, false
	}
	g.perIP[ip]++
	if user != "" {
		g.perUser[user]++
	}
	if watched > 0 {
		g.watchedPerIP[ip] += watched
	}
	g.watched += watched
	g.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			if g.perIP[ip]--; g.perIP[ip] <= 0 {
				delete(g.perIP, ip)
			}
			if user != "" {
				if g.perUser[user]--; g.perUser[user] <= 0 {
					delete(g.perUser, user)
				}
			}
			if g.watchedPerIP[ip] -= watched; g.watchedPerIP[ip] <= 0 {
				delete(g.watchedPerIP, ip)
			}
			g.watched -= watched
		})
	}, true
}

// tokenExpiry returns a channel that receives when the request's token
// expires (nil for a token that does not, or in open mode), and a stop
// for its timer. A stream ends then, as a WebSocket does: what it sends
// is what the token allowed, and only while it is valid.
func tokenExpiry(ctx context.Context) (<-chan time.Time, func()) {
	g := auth.FromContext(ctx)
	if g == nil || g.Expires.IsZero() {
		return nil, func() {}
	}
	t := time.NewTimer(time.Until(g.Expires))
	return t.C, func() { t.Stop() }
}

// endExpired writes the last event of a stream whose token expired, which
// tells the client why it ends: it is to open a new stream with a fresh
// token (an EventSource reconnecting on its own would send the old one,
// and get 401).
func endExpired(w http.ResponseWriter, f http.Flusher) {
	fmt.Fprint(w, "event: expired\ndata: {\"error\":\"the token expired: open a new stream with a fresh token\"}\n\n")
	f.Flush()
}

// remoteIP is the address a request came from, without its port.
func remoteIP(r *http.Request) string {
	ip, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return ip
}
