package awareness

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	received     *prometheus.CounterVec
	sent         *prometheus.CounterVec
	updates      *prometheus.CounterVec
	refused      *prometheus.CounterVec
	expired      prometheus.Counter
	lastSeenLost prometheus.Counter
	// storeRefused counts rows a store refused as data it cannot hold
	// (ErrUnstorable), by store: last_seen, history.
	storeRefused *prometheus.CounterVec
	// presence history (history.go)
	historyWrites *prometheus.CounterVec
	historyLost   prometheus.Counter
	historyPruned prometheus.Counter
	sentType      map[string]prometheus.Counter // sent by message type, resolved once
}

// sentBy is the sent counter of a message type.
func (m *metrics) sentBy(typ string) prometheus.Counter {
	if c, ok := m.sentType[typ]; ok {
		return c
	}
	return m.sent.WithLabelValues(typ)
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
			Help: "Channel updates not forwarded at once: coalesced into a later one in a tick (coalesced), unchanged, or stale; and, per member, messages a newer one replaced before the member took them (superseded), dropped from a feed before some member took them (behind), and rooms sent to a member that fell behind instead (resent_room).",
		}, []string{"reason"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_presence_refused_total",
			Help: "Presence messages refused, nothing of them held: a channel name or a user id over its limit, or a user id or name holding a NUL (channel_name, user_id, user_name), or a peer over its channels or bytes (channels, bytes).",
		}, []string{"reason"}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tandem_presence_expired_total",
			Help: "Peers removed because they were silent past their TTL (a remote peer: unnamed by its node's rosters past the remote TTL).",
		}),
		lastSeenLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tandem_presence_last_seen_dropped_total",
			Help: "Last-seen times not stored because too many waited for the store.",
		}),
		storeRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_presence_store_refused_total",
			Help: "Rows a store refused as data it cannot hold (a NUL in text, a key over its limit), dropped so that the rows after them are written, by store (last_seen, history).",
		}, []string{"store"}),
		historyWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_presence_history_writes_total",
			Help: "Batches of presence history written to the store, by result (ok, failed: kept for the next); a batch holding a row the store cannot hold is written row by row, that row dropped.",
		}, []string{"result"}),
		historyLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tandem_presence_history_dropped_total",
			Help: "Presence history intervals or their ends not stored because too many waited for a failing store.",
		}),
		historyPruned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tandem_presence_history_pruned_total",
			Help: "Presence history intervals deleted past the retention.",
		}),
	}
	m.sentType = make(map[string]prometheus.Counter)
	for _, t := range []string{TypeSnapshot, TypeUpdate, TypeHeartbeat, TypeGoodbye} {
		m.sentType[t] = m.sent.WithLabelValues(t)
	}
	if reg != nil {
		reg.MustRegister(m.received, m.sent, m.updates, m.refused, m.expired, m.lastSeenLost, m.storeRefused, m.historyWrites, m.historyLost, m.historyPruned)
	}
	return m
}
