package transport

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemhq/tandem/awareness"
	"github.com/tandemhq/tandem/doc"
)

// Documents is what the transport needs from the document layer.
// *doc.Hub implements it.
type Documents interface {
	Sync(ctx context.Context, p doc.Peer, documentID string, data []byte, isRequest bool) error
	Ephemeral(ctx context.Context, p doc.Peer, documentID string, e doc.Ephemeral) error
	Leave(p doc.Peer, documentID string)
}

var _ Documents = (*doc.Hub)(nil)

// Presence is what the transport needs from the presence layer.
// *awareness.Hub implements it.
type Presence interface {
	// Join is called on a connection's first message for a document.
	Join(p awareness.Peer, documentID string)
	// Receive takes an ephemeral message; false means it is not presence.
	Receive(p awareness.Peer, documentID string, m awareness.Message) (bool, error)
	// Touch is called on every pong.
	Touch(p awareness.Peer)
	// Leave is called once when the connection has closed.
	Leave(p awareness.Peer)
}

var _ Presence = (*awareness.Hub)(nil)

// Config configures a Server. Zero fields take the documented defaults.
type Config struct {
	// Documents receives the protocol messages. Required.
	Documents Documents
	// Presence handles presence ephemerals; nil relays them like any
	// other ephemeral.
	Presence Presence
	// PeerID is the server's own automerge-repo peer id. Required.
	PeerID string
	// StorageID is announced in the peer handshake: the identity of the
	// store behind this server.
	StorageID string
	// Logger receives the transport's logs; default slog.Default().
	Logger *slog.Logger
	// Registerer receives the transport's metrics; nil registers none.
	Registerer prometheus.Registerer

	// MaxMessageBytes bounds one inbound frame; default 16 MiB. A larger
	// frame closes the connection with code 1009 (message too big).
	MaxMessageBytes int64
	// SendQueue bounds the frames waiting for one connection's writer;
	// default 1024.
	SendQueue int
	// PingInterval is the mean time between WebSocket pings, jittered by
	// ±10%; default 5s. A connection that misses three pongs is closed.
	PingInterval time.Duration
	// WriteTimeout bounds every write to a socket; default 10s.
	WriteTimeout time.Duration
	// CheckOrigin decides which Origins may connect; default any.
	CheckOrigin func(r *http.Request) bool
}

func (c *Config) setDefaults() error {
	if c.Documents == nil {
		return errors.New("transport: Config.Documents is required")
	}
	if c.PeerID == "" {
		return errors.New("transport: Config.PeerID is required")
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.MaxMessageBytes <= 0 {
		c.MaxMessageBytes = 16 << 20
	}
	if c.SendQueue <= 0 {
		c.SendQueue = 1024
	}
	if c.PingInterval <= 0 {
		c.PingInterval = 5 * time.Second
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 10 * time.Second
	}
	if c.CheckOrigin == nil {
		c.CheckOrigin = func(*http.Request) bool { return true }
	}
	return nil
}
