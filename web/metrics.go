package web

import "github.com/prometheus/client_golang/prometheus"

// Why the API refused a request (tandem_http_refused_total).
const (
	refusedStreamsPerIP   = "streams_per_ip"
	refusedStreamsPerUser = "streams_per_user"
	refusedWatchedPerIP   = "watched_per_ip"
	refusedWatched        = "watched"
	refusedRate           = "rate_limited"
	refusedSlowBody       = "slow_body"
	refusedOrigin         = "origin"
	refusedTooLarge       = "document_too_large"
)

type metrics struct {
	refused *prometheus.CounterVec
	// The document API's read budget (readbudget.go): bytes charged
	// now, and requests that waited for their charge.
	readCharged prometheus.Gauge
	readWaits   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_http_refused_total",
			Help: "API requests refused: over the per-address request rate (rate_limited), a body not sent within its deadline (slow_body), a browser's page not allowed (origin), or a stream over a limit (streams_per_ip, streams_per_user, watched_per_ip, watched), or a document too large to work on as a whole (document_too_large).",
		}, []string{"reason"}),
		readCharged: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tandem_http_document_read_bytes",
			Help: "Bytes the document API's requests have charged to their budget (--api-read-bytes) for what they hold now: the documents they work on, the changes their edits make, the change bodies they read.",
		}),
		readWaits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tandem_http_document_read_waits_total",
			Help: "Document API requests that waited for their charge to fit the budget (--api-read-bytes).",
		}),
	}
	for _, r := range []string{refusedStreamsPerIP, refusedStreamsPerUser, refusedWatchedPerIP, refusedWatched, refusedRate, refusedSlowBody, refusedOrigin, refusedTooLarge} {
		m.refused.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.refused, m.readCharged, m.readWaits)
	}
	return m
}
