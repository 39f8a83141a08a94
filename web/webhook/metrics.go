package webhook

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	events     *prometheus.CounterVec // events decided and queued, by type
	deliveries *prometheus.CounterVec // delivery attempts, by endpoint and result
	retries    *prometheus.CounterVec // attempts after the first, by endpoint
	dropped    *prometheus.CounterVec // what a bound refused, by reason
	backlog    *prometheus.GaugeVec   // deliveries waiting, by endpoint (the queue's depth)
	pending    prometheus.Gauge       // documents with changes not yet in their windows
	handoff    prometheus.Gauge       // presence intervals waiting to be turned into events
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_webhook_events_total", Help: "Webhook events decided by this node and queued for every endpoint, by type.",
		}, []string{"type"}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_webhook_deliveries_total",
			Help: "Webhook delivery attempts on this node, by endpoint and result (ok, failed: to be retried, expired: given up, cancelled: endpoint no longer configured).",
		}, []string{"endpoint", "result"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_webhook_retries_total", Help: "Webhook delivery attempts after a failed one, by endpoint.",
		}, []string{"endpoint"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_webhook_dropped_total",
			Help: "Webhook events or their sources dropped at a bound, by reason (backlog: an endpoint's queue is full; pending: the changes held before they are written are at their bound, in documents or bytes; presence: the presence hand-off is full).",
		}, []string{"reason"}),
		backlog: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tandem_webhook_queue_depth", Help: "Webhook deliveries waiting in the queue (new or to be retried), by endpoint, across the cluster.",
		}, []string{"endpoint"}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tandem_webhook_pending_documents", Help: "Documents whose changes this node has not yet written to their debounce windows.",
		}),
		handoff: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tandem_webhook_presence_handoff", Help: "Presence intervals handed off by the recorder and not yet turned into events.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.events, m.deliveries, m.retries, m.dropped, m.backlog, m.pending, m.handoff)
	}
	return m
}
