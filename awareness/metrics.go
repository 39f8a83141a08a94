package awareness

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	received *prometheus.CounterVec
	sent     *prometheus.CounterVec
	updates  *prometheus.CounterVec
	expired  prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_presence_received_total",
			Help: "Presence messages received, by type.",
		}, []string{"type"}),
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_presence_sent_total",
			Help: "Presence messages sent to peers, by type.",
		}, []string{"type"}),
		updates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_presence_updates_not_forwarded_total",
			Help: "Channel updates not forwarded at once: coalesced into a later one, unchanged, or stale.",
		}, []string{"reason"}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tandem_presence_expired_total",
			Help: "Peers removed because they were silent past their TTL.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.received, m.sent, m.updates, m.expired)
	}
	return m
}
