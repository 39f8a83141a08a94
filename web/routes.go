package web

import (
	"context"
	"embed"
	"encoding/json"
	"io/fs"
	"log/slog"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tandemhq/tandem/internal/auth"
)

// static is the demo page as built from web/demo by `npm run build:web`;
// CI checks that it matches its sources.
//
//go:embed static
var static embed.FS

// Check is one dependency /readyz reports on.
type Check struct {
	Name string
	Ping func(context.Context) error
}

// Config configures the router.
type Config struct {
	// WebSocket serves the automerge-repo endpoint at /ws. Required.
	WebSocket http.Handler
	// Presence serves the presence API; nil serves none.
	Presence Presence
	// History serves presence history beside it; nil answers that this
	// node keeps none.
	History History
	// Notifications serves the notification API; nil serves none.
	Notifications Notifications
	// Documents serves the document API; nil serves none.
	Documents Documents
	// DocumentLimits bound its requests.
	DocumentLimits DocumentLimits
	// Auth, when set, guards the API: a request needs a valid token, and
	// sees only the documents its token allows.
	Auth *auth.Verifier
	// Ready lists what /readyz checks (Redis, PostgreSQL); all must answer.
	Ready []Check
	// Gatherer is exposed at /metrics; nil serves no metrics.
	Gatherer prometheus.Gatherer
	// Registerer receives the router's metrics; nil registers none.
	Registerer prometheus.Registerer
	// Logger receives request errors; default slog.Default().
	Logger *slog.Logger
	// Streams bounds the presence watch and notification streams.
	Streams StreamLimits
	// Requests bounds the API requests of one address.
	Requests RequestLimits
	// AllowsBrowser, if set, says whether an API request may be served
	// for what it says of the page that made it (Origin, Host); others
	// are refused with 403. The WebSocket applies the same rule itself.
	AllowsBrowser func(*http.Request) bool
}

// NewRouter returns the HTTP handler of a Tandem node.
func NewRouter(cfg Config) http.Handler {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	m := newMetrics(cfg.Registerer)
	streams := newStreamGate(cfg.Streams, m)
	r := chi.NewRouter()
	r.Use(middleware.Recoverer)
	r.Handle("/ws", cfg.WebSocket)
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Get("/readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		status, code := map[string]string{}, http.StatusOK
		for _, c := range cfg.Ready {
			if err := c.Ping(ctx); err != nil {
				// The cause (addresses, database text) goes to the log only.
				logger.Warn("readyz: a dependency does not answer", "check", c.Name, "err", err)
				status[c.Name], code = "unreachable", http.StatusServiceUnavailable
			} else {
				status[c.Name] = "ok"
			}
		}
		writeJSON(w, code, map[string]any{"ready": code == http.StatusOK, "checks": status})
	})
	if cfg.Presence != nil || cfg.Notifications != nil || cfg.Documents != nil {
		limits := cfg.Requests
		limits.setDefaults()
		r.Route("/api", func(r chi.Router) {
			// The rate first: a token check costs the server too.
			r.Use(newRateGate(limits, m).limit)
			// The description of the API is for anyone to read.
			r.Get("/openapi.json", serveOpenAPI)
			r.Group(func(r chi.Router) { apiRoutes(r, cfg, limits, m, logger, streams) })
		})
	}
	if cfg.Gatherer != nil {
		r.Handle("/metrics", promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{}))
	}
	pages, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files, err := newStaticFiles(pages)
	if err != nil {
		panic(err)
	}
	r.Handle("/*", files)
	return r
}

// apiRoutes adds the API's routes, behind its body deadline, browser
// gate and token check.
func apiRoutes(r chi.Router, cfg Config, limits RequestLimits, m *metrics, logger *slog.Logger, streams *streamGate) {
	r.Use(bodyDeadline(limits.BodyTimeout, m))
	if cfg.AllowsBrowser != nil {
		r.Use(browserGate(cfg.AllowsBrowser, m))
	}
	r.Use(auth.Middleware(cfg.Auth, logger))
	if cfg.Presence != nil {
		a := &api{presence: cfg.Presence, streams: streams}
		r.Get("/docs/{documentID}/presence", a.documentPresence)
		r.Get("/users/{userID}/presence", a.userPresence)
		r.Get("/presence/watch", a.watchPresence)
		h := &historyAPI{store: cfg.History, now: time.Now, log: logger}
		r.Get("/docs/{documentID}/presence/history", h.docHistory)
		r.Get("/docs/{documentID}/presence/hourly", h.docHourly)
		r.Get("/users/{userID}/presence/history", h.userHistory)
	}
	if cfg.Documents != nil {
		d := newDocsAPI(cfg.Documents, cfg.DocumentLimits, m, logger)
		r.Get("/docs/{documentID}", d.get)
		r.Get("/docs/{documentID}/saved", d.saved)
		r.Get("/docs/{documentID}/changes", d.changes)
		r.Post("/docs/{documentID}/changes", d.postChanges)
		r.Post("/docs", d.create)
		r.Patch("/docs/{documentID}", d.patch)
	}
	if cfg.Notifications != nil {
		n := &notifyAPI{n: cfg.Notifications, log: logger, streams: streams}
		r.Post("/notifications", n.post)
		r.Get("/notifications", n.list)
		r.Post("/notifications/read", n.markRead)
		r.Get("/notifications/stream", n.stream)
	}
}

// api holds what the REST handlers read.
type api struct {
	presence Presence
	streams  *streamGate
}

// internalError answers a request that failed on the server's side with a
// plain message, and logs the cause: what went wrong inside (addresses,
// database text) is for the operator, not the client.
func internalError(log *slog.Logger, w http.ResponseWriter, r *http.Request, err error) {
	log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	writeError(w, http.StatusInternalServerError, "internal error: the server could not complete the request")
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
