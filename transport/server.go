package transport

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tandemhq/tandem/internal/auth"
)

// Server accepts automerge-repo WebSocket connections. It implements
// http.Handler for the WebSocket endpoint.
type Server struct {
	cfg      Config
	log      *slog.Logger
	metrics  *metrics
	upgrader websocket.Upgrader

	ctx     context.Context // the connections' work; ends at Close
	cancel  context.CancelFunc
	members *members // who is in which document
	poller  *poller  // watches parked connections; nil where they cannot park
	turns   *turns   // the goroutines that run connections' turns (turns.go)
	budget  *readBudget

	relay string // the sessions presence is sent under start so (Presence.RelaySession)

	// holdHook, set by tests, runs as a connection is about to hold
	// presence (PresenceReady), under its wmu.
	holdHook atomic.Pointer[func(*conn)]

	mu      sync.Mutex       // guards peers, conns, closing and perIP
	peers   map[string]*conn // joined connections by peer id
	conns   map[*conn]struct{}
	closing bool
	perIP   map[string]int // open connections by remote IP

	wg          sync.WaitGroup // one per connection, until it is finished
	closePoller sync.Once
}

// noteSendWait records how long one write's oldest frame waited.
func (s *Server) noteSendWait(d time.Duration) {
	s.metrics.sendWait.Observe(d.Seconds())
}

// NewServer validates cfg and returns a Server.
func NewServer(cfg Config) (*Server, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	s := &Server{
		cfg:     cfg,
		log:     cfg.Logger,
		metrics: newMetrics(cfg.Registerer),
		upgrader: websocket.Upgrader{
			// Each connection keeps this buffer for its life, as small
			// as gorilla allows: the socket is read in chunks of a
			// pooled buffer beneath it (frames.go), and a larger frame
			// passes it by.
			ReadBufferSize: 128,
			// Messages are framed and written by the connection's own
			// writer (writer.go); gorilla writes none, so it needs no
			// buffer for them.
			WriteBufferSize: 256,
			WriteBufferPool: &sync.Pool{},
			// Origins are checked before the upgrade, in ServeHTTP.
			CheckOrigin: func(*http.Request) bool { return true },
		},
		peers: make(map[string]*conn),
		conns: make(map[*conn]struct{}),
		perIP: make(map[string]int),
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.budget = &readBudget{limit: cfg.ReadBudgetBytes, held: &s.metrics.readBuffers}
	if cfg.Presence != nil {
		s.relay = cfg.Presence.RelaySession()
	}
	s.members = newMembers(&s.cfg)
	s.turns = newTurns()
	if !cfg.KeepReaders {
		if p, err := newPoller(s.log); err == nil {
			s.poller = p
		} else {
			s.log.Info("idle connections keep their reader goroutines", "err", err)
		}
	}
	return s, nil
}

// refuse answers a request that may not upgrade.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, status int, reason, msg string) {
	s.metrics.refused.WithLabelValues(reason).Inc()
	s.log.Info("connection refused", "remote", r.RemoteAddr, "reason", reason, "detail", msg)
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="tandem"`)
	}
	http.Error(w, msg, status)
}

// ServeHTTP upgrades the request and serves the connection until it closes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	closing := s.closing
	if !closing {
		s.wg.Add(1)
	}
	s.mu.Unlock()
	if closing {
		s.refuse(w, r, http.StatusServiceUnavailable, refuseShutdown, "server shutting down")
		return
	}
	handedOff := false // to the connection's own goroutine, which then calls wg.Done
	defer func() {
		if !handedOff {
			s.wg.Done()
		}
	}()

	if !s.cfg.originAllowed(r) {
		s.refuse(w, r, http.StatusForbidden, refuseOrigin, "origin not allowed")
		return
	}
	var grant *auth.Grant
	if s.cfg.Auth != nil {
		var err error
		if grant, err = s.cfg.Auth.Authenticate(r); err != nil {
			s.refuse(w, r, http.StatusUnauthorized, refuseUnauthorized, err.Error())
			return
		}
	}
	ip := remoteIP(r)
	s.mu.Lock()
	full := s.perIP[ip] >= s.cfg.MaxConnsPerIP
	if !full {
		s.perIP[ip]++
	}
	s.mu.Unlock()
	if full {
		s.refuse(w, r, http.StatusTooManyRequests, refusePerIP,
			fmt.Sprintf("too many connections from %s (limit %d)", ip, s.cfg.MaxConnsPerIP))
		return
	}

	hj := &hijacker{ResponseWriter: w, budget: s.budget}
	ws, err := s.upgrader.Upgrade(hj, r, nil)
	if err != nil {
		// The upgrader has already answered with an HTTP error.
		s.log.Debug("websocket upgrade failed", "remote", r.RemoteAddr, "err", err)
		s.uncountIP(ip)
		return
	}
	c := newConn(s, ws, hj.fc, ip, grant)
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		c.close(ReasonShutdown, false)
		c.awaitShut()
		s.uncountIP(ip)
		return
	}
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	s.metrics.connections.Inc()
	// The connection reads on a goroutine of its own and this handler
	// returns: the HTTP goroutine's stack, grown while parsing the
	// request, is not kept for the life of the socket.
	handedOff = true
	go c.serve()
}

// connDone is a finished connection's last step: it is counted no more,
// in all and for its IP, and leaves the wait group that ServeHTTP added it
// to and Close waits on.
func (s *Server) connDone(c *conn) {
	s.metrics.connections.Dec()
	s.uncountIP(c.ip)
	s.wg.Done()
}

// uncountIP counts one connection from ip less.
func (s *Server) uncountIP(ip string) {
	s.mu.Lock()
	if s.perIP[ip]--; s.perIP[ip] <= 0 {
		delete(s.perIP, ip)
	}
	s.mu.Unlock()
}

// hijacker hands gorilla the socket wrapped in a frameConn.
type hijacker struct {
	http.ResponseWriter
	budget *readBudget // the server's
	fc     *frameConn
}

func (h *hijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := h.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("the response cannot be hijacked")
	}
	nc, brw, err := hj.Hijack()
	if err != nil {
		return nil, nil, err
	}
	h.fc = newFrameConn(nc, h.budget)
	return h.fc, brw, nil
}

// bind makes c the connection of its peer id, closing any older one. A
// peer id held by another user's connection is refused: taking it over
// would cut that user off and speak in their peer's name.
func (s *Server) bind(c *conn) bool {
	s.mu.Lock()
	old := s.peers[c.peerID]
	if old != nil && old != c && old.grant != nil && (c.grant == nil || old.grant.UserID != c.grant.UserID) {
		s.mu.Unlock()
		return false
	}
	s.peers[c.peerID] = c
	s.mu.Unlock()
	if old != nil && old != c {
		s.log.Info("peer reconnected; closing its older connection", "peer", c.peerID)
		old.close(ReasonReplaced, false)
	}
	return true
}

// forget removes c once its handler is done.
func (s *Server) forget(c *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
	if c.peerID != "" && s.peers[c.peerID] == c {
		delete(s.peers, c.peerID)
	}
}

// Close stops accepting connections, closes the open ones with "going
// away" and waits for their handlers to finish or ctx to end. Safe to call
// twice.
func (s *Server) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.close(ReasonShutdown, true)
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		s.cancel()
		s.turns.close()
		if s.poller != nil {
			s.closePoller.Do(s.poller.close)
		}
		return nil
	case <-ctx.Done():
		s.cancel() // what the connections still do gives up
		s.turns.close()
		if s.poller != nil {
			// Every connection is closing, so none parks again.
			s.closePoller.Do(s.poller.close)
		}
		return ctx.Err()
	}
}

// Connections returns the number of open connections.
func (s *Server) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// remoteIP is the IP of the TCP peer. Tandem does not trust forwarding
// headers: behind a proxy, limit per IP at the proxy.
func remoteIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
