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
)

type metrics struct {
	refused *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_http_refused_total",
			Help: "API requests refused: over the per-address request rate (rate_limited), a body not sent within its deadline (slow_body), a browser's page not allowed (origin), or a stream over a limit (streams_per_ip, streams_per_user, watched_per_ip, watched).",
		}, []string{"reason"}),
	}
	for _, r := range []string{refusedStreamsPerIP, refusedStreamsPerUser, refusedWatchedPerIP, refusedWatched, refusedRate, refusedSlowBody, refusedOrigin} {
		m.refused.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.refused)
	}
	return m
}
