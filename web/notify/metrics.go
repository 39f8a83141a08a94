package notify

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// maxKindLabels bounds the kinds tandem_notify_events_total keeps a
// series for; kinds are the applications' to name, and every new name
// would be a new series for ever. Later ones count under "other".
const maxKindLabels = 32

// Metrics of the notification pipeline.
type Metrics struct {
	Events        *prometheus.CounterVec // events queued, by kind ("refused" for invalid ones)
	Windows       prometheus.Counter     // windows opened
	Stored        prometheus.Counter     // notifications stored
	Folded        prometheus.Histogram   // events per stored notification
	Pushes        *prometheus.CounterVec // pushes published, by type, or "error"
	Delivered     prometheus.Counter     // pushes handed to live subscriptions on this node
	Duplicates    prometheus.Counter     // repeated pushes not delivered again
	SlowClosed    prometheus.Counter     // subscriptions closed for falling behind
	Subscriptions prometheus.Gauge       // live subscriptions on this node

	kmu   sync.Mutex
	kinds map[string]bool // kinds with a series of their own
}

// event is the Events counter of a kind: its own series for the server's
// mentions and the first maxKindLabels kinds, "other" after.
func (m *Metrics) event(kind string) prometheus.Counter {
	m.kmu.Lock()
	if !m.kinds[kind] && kind != KindMention {
		if m.kinds == nil {
			m.kinds = make(map[string]bool)
		}
		if len(m.kinds) >= maxKindLabels {
			kind = "other"
		} else {
			m.kinds[kind] = true
		}
	}
	m.kmu.Unlock()
	return m.Events.WithLabelValues(kind)
}

// NewMetrics registers the metrics with reg (none if nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_notify_events_total", Help: "Notification events queued, by kind; refused ones under kind=refused.",
		}, []string{"kind"}),
		Windows: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tandem_notify_windows_opened_total", Help: "Aggregation windows opened.",
		}),
		Stored: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tandem_notify_notifications_stored_total", Help: "Notifications stored.",
		}),
		Folded: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "tandem_notify_events_per_notification", Help: "Events folded into one stored notification.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 8),
		}),
		Pushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_notify_pushes_total", Help: "Pushes published to the nodes, by type; failures under type=error.",
		}, []string{"type"}),
		Delivered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tandem_notify_deliveries_total", Help: "Pushes handed to live subscriptions on this node.",
		}),
		Duplicates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tandem_notify_duplicate_pushes_total", Help: "Repeated pushes of a notification a subscription already had.",
		}),
		SlowClosed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tandem_notify_slow_subscriptions_closed_total", Help: "Subscriptions closed because their reader fell behind.",
		}),
		Subscriptions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tandem_notify_subscriptions", Help: "Live notification subscriptions on this node.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.Events, m.Windows, m.Stored, m.Folded, m.Pushes, m.Delivered, m.Duplicates, m.SlowClosed, m.Subscriptions)
	}
	return m
}
