package transport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemhq/tandem/awareness"
	"github.com/tandemhq/tandem/doc"
	"github.com/tandemhq/tandem/internal/auth"
)

// Documents is what the transport needs from the document layer.
// *doc.Hub implements it.
type Documents interface {
	Sync(ctx context.Context, p doc.Peer, m doc.SyncMessage) error
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
	// LeaveDocument is called when the connection leaves one document
	// while it stays connected (a change it sent there was refused).
	LeaveDocument(p awareness.Peer, documentID string)
	// Leave is called once when the connection has closed.
	Leave(p awareness.Peer)
	// Handoff is called instead of Leave when the connection was
	// replaced by a newer one of the same user on another node.
	Handoff(p awareness.Peer, node string)
	// RemoteUser returns the user of a peer id connected to another
	// node, if the presence layer knows it.
	RemoteUser(peerID string) (userID string, ok bool)
	// RelaySession returns the prefix of the ephemeral sessions presence
	// is sent under: what a client passes back of presence carries it.
	RelaySession() string
}

var _ Presence = (*awareness.Hub)(nil)

// Bus is told which documents this node's connections watch, so that a
// cluster bus subscribes only to those. *redisbus.Bus implements it.
type Bus interface {
	Join(documentID string)
	Leave(documentID string)
}

// Claims ties the peer id of each authenticated connection to its user
// across a cluster. *redisbus.Bus implements it.
type Claims interface {
	// ClaimPeer takes peerID for userID on this node. taken reports that
	// another user holds it on some node; a claim of the same user
	// elsewhere is taken over, and moved is later called on the
	// connection that held it, with the node it went to. An error means
	// the cluster could not be asked. unclaim, never nil, gives the claim
	// up; call it once the connection ends.
	ClaimPeer(ctx context.Context, peerID, userID string, moved func(node string)) (unclaim func(), taken bool, err error)
}

// Config configures a Server. Zero fields take the documented defaults.
type Config struct {
	// Documents receives the protocol messages. Required.
	Documents Documents
	// Presence handles presence ephemerals; nil relays them like any
	// other ephemeral.
	Presence Presence
	// Bus, when set, learns which documents the connections watch.
	Bus Bus
	// Claims, when set, holds the peer ids of authenticated connections
	// across the cluster; without it only this node's are checked.
	Claims Claims
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
	// default 256.
	SendQueue int
	// SendQueueBytes bounds the bytes of the frames in one connection's
	// lossless lane (document sync, errors, relayed ephemerals): those
	// waiting for its writer and those it is writing; default four times
	// MaxMessageBytes (64 MiB). A message larger than the bound is queued
	// when nothing else is, so one reply carrying a whole large document
	// still goes out; but a message queued while it is written passes the
	// bound, so keep the bound above the largest document's size. A
	// connection whose lane would pass either bound is closed as a slow
	// consumer (4001): document sync cannot drop a frame.
	SendQueueBytes int64
	// ReadBudgetBytes bounds the bytes of inbound messages the node's
	// readers hold at once (tandem_read_buffer_bytes): each message's
	// bytes are charged as they arrive, before they are held, and given
	// back once it is handled; the chunks sockets are read into count
	// too. Default eight times MaxMessageBytes (128 MiB); at least twice
	// MaxMessageBytes. The first 4 KiB of a message never wait, so small
	// messages go on whatever large ones do; a reader that needs more
	// than the budget has left waits, its socket unread, until others
	// give bytes back, for at most three ping intervals and never past
	// its MessageReadTimeout: then its connection is closed with 1013
	// (try again later). Other connections are never closed for it.
	ReadBudgetBytes int64
	// MessageReadTimeout bounds the time from a message's first frame
	// to its last byte, a wait for the read budget included; default
	// 60s. A message that takes longer (a frame dripped byte by byte,
	// or stopped part way) closes its connection (4005) and gives back
	// what it held.
	MessageReadTimeout time.Duration
	// PingInterval is the mean time between WebSocket pings, jittered by
	// ±10%; default 5s. A connection that misses three pongs is closed.
	PingInterval time.Duration
	// WriteTimeout bounds every write to a socket, within a factor of two
	// (writer.go, setWriteDeadline); default 10s.
	WriteTimeout time.Duration
	// Auth verifies the token of every connection before the upgrade;
	// nil runs open (anyone may connect, read and write).
	Auth *auth.Verifier
	// AllowedOrigins lists the browser Origins that may connect, such as
	// "https://app.example.com"; "*" allows any. Requests without an
	// Origin (non-browser clients) are always allowed, and so is an Origin
	// of the request's own Host, except when it cannot be trusted: with no
	// Auth, a Host name an attacker's page may have rebound to this
	// server's address (DNS rebinding) is trusted only if it is localhost,
	// an IP address, or listed in AllowedHosts.
	AllowedOrigins []string
	// AllowedHosts lists the host names (with or without a port) whose
	// same-host Origins an open node trusts.
	AllowedHosts []string

	// Limits. Each refusal is counted in a metric and told to the client.
	// MaxDocumentsPerConn bounds the documents one connection opens;
	// default 256.
	MaxDocumentsPerConn int
	// MaxPeersPerDocument bounds the connections open on one document on
	// this node; default 1000.
	MaxPeersPerDocument int
	// KeepReaders keeps a reader goroutine on every connection, idle or
	// not. By default (on Linux) a connection with nothing to read parks:
	// its goroutine ends and an epoll set wakes it (frames.go, park.go).
	KeepReaders bool
	// MaxConnsPerIP bounds the open connections from one IP address;
	// default 64.
	MaxConnsPerIP int
	// MaxEphemeralBytes bounds an ephemeral message's payload (presence
	// included); default 64 KiB.
	MaxEphemeralBytes int
	// MessageRate and MessageBurst are a connection's token bucket:
	// ephemerals beyond it are dropped, and a connection sending more
	// than twice the rate for long is closed. Defaults 100/s and 200.
	MessageRate  float64
	MessageBurst int

	// maxHold bounds how long presence waits for a client to pass back
	// what it was last sent (presence.go); default 1s. Set by tests.
	maxHold time.Duration
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
		c.SendQueue = 256
	}
	if c.SendQueueBytes <= 0 {
		c.SendQueueBytes = 4 * c.MaxMessageBytes
	}
	if c.ReadBudgetBytes <= 0 {
		c.ReadBudgetBytes = 8 * c.MaxMessageBytes
	} else if c.ReadBudgetBytes < 2*c.MaxMessageBytes {
		return fmt.Errorf("transport: Config.ReadBudgetBytes %d is less than twice MaxMessageBytes (%d)", c.ReadBudgetBytes, c.MaxMessageBytes)
	}
	if c.maxHold <= 0 {
		c.maxHold = time.Second
	}
	if c.MessageReadTimeout <= 0 {
		c.MessageReadTimeout = 60 * time.Second
	}
	if c.PingInterval <= 0 {
		c.PingInterval = 5 * time.Second
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 10 * time.Second
	}
	if c.MaxDocumentsPerConn <= 0 {
		c.MaxDocumentsPerConn = 256
	}
	if c.MaxPeersPerDocument <= 0 {
		c.MaxPeersPerDocument = 1000
	}
	if c.MaxConnsPerIP <= 0 {
		c.MaxConnsPerIP = 64
	}
	if c.MaxEphemeralBytes <= 0 {
		c.MaxEphemeralBytes = 64 << 10
	}
	if c.MessageRate <= 0 {
		c.MessageRate = 100
	}
	if c.MessageBurst <= 0 {
		c.MessageBurst = 200
	}
	return nil
}

// hostTrusted reports whether an open node takes a same-host Origin of
// this Host at its word: localhost, an IP address, or a listed host. Any
// other name may be an attacker's, rebound to this server's address.
func (c *Config) hostTrusted(host string) bool {
	name := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
	}
	name = strings.TrimSuffix(strings.Trim(name, "[]"), ".")
	if strings.EqualFold(name, "localhost") || net.ParseIP(name) != nil {
		return true
	}
	for _, h := range c.AllowedHosts {
		if strings.EqualFold(h, host) || strings.EqualFold(h, name) {
			return true
		}
	}
	return false
}

// AllowsBrowser applies the WebSocket's rule for browsers to a plain HTTP
// request (the REST API): an Origin it carries must be allowed
// (originAllowed); and on a node without auth, a browser's request without
// one (it sends Sec-Fetch-Site) must name a trusted host, or the host of
// an allowed origin. A browser sends no Origin with a same-origin
// GET, and a page of another site that points its own DNS name at this
// node makes its reads same-origin: its Host is then that name, which is
// not trusted. Other clients (curl, servers) send neither header.
func (c *Config) AllowsBrowser(r *http.Request) bool {
	if r.Header.Get("Origin") != "" {
		return c.originAllowed(r)
	}
	if c.Auth != nil || r.Header.Get("Sec-Fetch-Site") == "" || c.hostTrusted(r.Host) {
		return true
	}
	// A same-origin request without an Origin, from a page of an origin
	// allowed by name.
	for _, o := range c.AllowedOrigins {
		if u, err := url.Parse(o); o == "*" || (err == nil && strings.EqualFold(u.Host, r.Host)) {
			return true
		}
	}
	return false
}

// originAllowed implements the AllowedOrigins rule.
func (c *Config) originAllowed(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil {
		return false
	}
	if strings.EqualFold(u.Host, r.Host) && (c.Auth != nil || c.hostTrusted(r.Host)) {
		return true
	}
	for _, o := range c.AllowedOrigins {
		if o == "*" || strings.EqualFold(strings.TrimSuffix(o, "/"), origin) {
			return true
		}
	}
	return false
}
