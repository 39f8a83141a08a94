package webhook

import (
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Config configures Hooks. Zero fields take the documented defaults.
type Config struct {
	// Endpoints are the URLs events are posted to (http or https).
	Endpoints []string
	// Secret signs every event: "whsec_" and the base64 of 24 to 64
	// random bytes. Two separated by a space both sign (a rotation).
	Secret string
	// Events selects the event types sent; nil or empty sends all of
	// them (AllEvents).
	Events []string
	// Debounce folds a document's changes into one document.changed until
	// they pause this long (default 2s), but for at most MaxWait after
	// the first (default 10s).
	Debounce, MaxWait time.Duration

	// DB is the notification pipeline's database (web/notify), which holds
	// the River queue; Postgres says it is PostgreSQL, else SQLite.
	DB       *sql.DB
	Postgres bool

	// Timeout bounds one delivery's request, response included; default
	// 10s.
	Timeout time.Duration
	// Concurrency bounds the deliveries to one endpoint in flight on this
	// node; default 4.
	Concurrency int
	// RetryFor is how long a delivery that fails is tried again, with
	// exponential backoff from MinBackoff (default 5s) doubling up to
	// MaxBackoff (default 1h); default 25h. A delivery failing past it is
	// given up (counted, logged).
	RetryFor               time.Duration
	MinBackoff, MaxBackoff time.Duration
	// MaxBacklog bounds the deliveries waiting for one endpoint (queued,
	// being retried); default 100,000. Past it, a new event is not queued
	// for that endpoint: dropped, counted under reason "backlog". The
	// count is read every BacklogEvery (default 5s) and estimated between
	// reads (what this node queued, less what it delivered), so each node
	// may add what other nodes' deliveries free within one period on top.
	MaxBacklog   int
	BacklogEvery time.Duration
	// MaxPendingDocuments and MaxPendingBytes bound the changes this node
	// holds before it writes them to their windows (every FlushEvery,
	// default half the Debounce, from 250ms to 1s: each write rewrites
	// the windows' pages, whose disk writes the node's other stores then
	// wait behind): the documents (default 10,000) and the bytes their
	// entries take, user ids and heads counted (default 8 MiB). A change
	// past either is dropped, or for a document already held its user,
	// counted under reason "pending".
	MaxPendingDocuments int
	MaxPendingBytes     int
	FlushEvery          time.Duration
	// MaxHandoff bounds the presence intervals waiting to be turned into
	// events; default 65,536. A recorder batch past it is dropped, counted
	// under reason "presence".
	MaxHandoff int
	// SweepEvery is how often each node closes the windows whose time has
	// come; default 250ms.
	SweepEvery time.Duration

	// Author names the user behind a peer without a verified identity
	// (awareness.Hub.UserOf); nil leaves such peers out.
	Author func(documentID string, p interface{ ID() string }) (userID, name string)
	// Client sends the deliveries; default a client of its own with no
	// redirects followed.
	Client *http.Client
	// Now is the clock of windows and presence; default time.Now.
	Now        func() time.Time
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// Limits on what one event carries.
const (
	// MaxUsers bounds the user ids one document.changed names; past it
	// the payload says usersTruncated.
	MaxUsers = 100
	// MaxHeads bounds the heads one document.changed names; past it the
	// payload says headsTruncated.
	MaxHeads = 64
	// MaxUserID is the most of a user id an event names (as presence
	// history keeps it): a longer one is cut at a character's start.
	MaxUserID = 256
	// maxResponseBytes is what is read of an endpoint's answer.
	maxResponseBytes = 64 << 10
)

func (c *Config) setDefaults() error {
	if c.Debounce <= 0 {
		c.Debounce = 2 * time.Second
	}
	if c.MaxWait <= 0 {
		c.MaxWait = 10 * time.Second
	}
	if c.MaxWait < c.Debounce {
		return fmt.Errorf("%w: the maximum wait (%v) is shorter than the debounce (%v)", ErrConfig, c.MaxWait, c.Debounce)
	}
	if c.Timeout <= 0 {
		c.Timeout = 10 * time.Second
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 4
	}
	if c.RetryFor <= 0 {
		c.RetryFor = 25 * time.Hour
	}
	if c.MinBackoff <= 0 {
		c.MinBackoff = 5 * time.Second
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = time.Hour
	}
	if c.MaxBacklog <= 0 {
		c.MaxBacklog = 100_000
	}
	if c.BacklogEvery <= 0 {
		c.BacklogEvery = 5 * time.Second
	}
	if c.MaxPendingDocuments <= 0 {
		c.MaxPendingDocuments = 10_000
	}
	if c.MaxPendingBytes <= 0 {
		c.MaxPendingBytes = 8 << 20
	}
	if c.FlushEvery <= 0 {
		c.FlushEvery = min(max(c.Debounce/2, 250*time.Millisecond), time.Second)
	}
	if c.MaxHandoff <= 0 {
		c.MaxHandoff = 1 << 16
	}
	if c.SweepEvery <= 0 {
		c.SweepEvery = 250 * time.Millisecond
	}
	if c.Client == nil {
		c.Client = &http.Client{
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.DB == nil {
		return fmt.Errorf("%w: DB is required", ErrConfig)
	}
	for _, e := range c.Events {
		if !slices.Contains(AllEvents, e) {
			return fmt.Errorf("%w: unknown event %q (known: %v)", ErrConfig, e, AllEvents)
		}
	}
	if len(c.Events) == 0 {
		c.Events = AllEvents
	}
	return nil
}

// endpoint is one URL events go to, with the River queue of its
// deliveries.
type endpoint struct {
	url   string
	key   string // names it in jobs and metrics: the start of its URL's SHA-256
	queue string
}

func parseEndpoints(urls []string) ([]*endpoint, error) {
	var eps []*endpoint
	seen := map[string]bool{}
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("%w: endpoint %q is not an http or https URL", ErrConfig, raw)
		}
		if seen[raw] {
			continue
		}
		seen[raw] = true
		sum := sha256.Sum256([]byte(raw))
		key := hex.EncodeToString(sum[:6])
		eps = append(eps, &endpoint{url: raw, key: key, queue: "tandem_webhook_" + key})
	}
	return eps, nil
}
