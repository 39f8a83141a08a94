package transport

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemhq/tandem/transport/wire"
)

// metrics are a Server's Prometheus collectors.
type metrics struct {
	connections prometheus.Gauge
	parked      prometheus.Gauge
	woken       prometheus.Counter
	received    *prometheus.CounterVec
	sent        *prometheus.CounterVec
	errors      *prometheus.CounterVec
	dropped     *prometheus.CounterVec
	disconnects *prometheus.CounterVec
	refused     *prometheus.CounterVec
	docsRefused *prometheus.CounterVec
	denied      prometheus.Counter
	syncBytes   *prometheus.CounterVec
	sendWait    prometheus.Histogram

	// Resolved once for the hot paths.
	sentEphemeral     prometheus.Counter // sent{type="ephemeral"}
	receivedEphemeral prometheus.Counter // received{type="ephemeral"}
	droppedForeign    prometheus.Counter // dropped{reason="foreign_sender"}

	readBuffers atomic.Int64 // bytes of read buffers the readers hold (frameConn)
	queuedBytes atomic.Int64 // bytes in the connections' lossless lanes (conn.outBytes, writingBytes)
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tandem_connections",
			Help: "Open WebSocket connections.",
		}),
		parked: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tandem_connections_parked",
			Help: "Open connections with nothing to read, waiting without a goroutine.",
		}),
		woken: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tandem_readers_started_total",
			Help: "Readers started for parked connections: for a message to read, part of one, or the connection's end. What the poller takes itself (pongs, messages passed back) starts none.",
		}),
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_messages_received_total",
			Help: "Protocol messages received, by type.",
		}, []string{"type"}),
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_messages_sent_total",
			Help: "Protocol messages queued for sending, by type.",
		}, []string{"type"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_protocol_errors_total",
			Help: "Bad input answered with an error message, by reason.",
		}, []string{"reason"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_messages_dropped_total",
			Help: "Messages dropped without an error to the client (normal protocol noise), by reason.",
		}, []string{"reason"}),
		disconnects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_disconnects_total",
			Help: "Closed connections, by reason.",
		}, []string{"reason"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_connections_refused_total",
			Help: "Connections refused before the WebSocket upgrade, by reason.",
		}, []string{"reason"}),
		sendWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tandem_send_wait_seconds",
			Help:    "How long the oldest frame of each write waited in its connection's queue: the server's own share of delivery latency.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5},
		}),
		syncBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_sync_bytes_total",
			Help: "Bytes of automerge sync messages, by direction (in, out).",
		}, []string{"direction"}),
		docsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_documents_refused_total",
			Help: "Documents a connection was taken out of because a change it sent to one was refused, by reason (document_limit, sync_refused); the connection's other documents went on.",
		}, []string{"reason"}),
		denied: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tandem_access_denied_total",
			Help: "Messages for documents outside the peer's token, answered as unavailable.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.connections, m.parked, m.woken, m.received, m.sent, m.errors, m.dropped, m.disconnects, m.refused, m.docsRefused, m.denied, m.syncBytes, m.sendWait)
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tandem_read_buffer_bytes",
			Help: "Bytes of read buffers the connections' readers hold: only while bytes wait in them, never while a plain TCP socket is quiet.",
		}, func() float64 { return float64(m.readBuffers.Load()) }))
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tandem_send_queue_bytes",
			Help: "Bytes of frames in the connections' lossless lanes (document sync, errors, relayed ephemerals): waiting for their writers or being written. Each connection's share is bounded by --send-queue-bytes.",
		}, func() float64 { return float64(m.queuedBytes.Load()) }))
	}
	m.sentEphemeral = m.sent.WithLabelValues(wire.TypeEphemeral)
	m.receivedEphemeral = m.received.WithLabelValues(wire.TypeEphemeral)
	m.droppedForeign = m.dropped.WithLabelValues(dropForeignSender)
	return m
}
