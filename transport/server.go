package transport

import (
	"context"
	"log/slog"
	"net/http"
	"sync"

	"github.com/gorilla/websocket"
)

// Server accepts automerge-repo WebSocket connections. It implements
// http.Handler for the WebSocket endpoint.
type Server struct {
	cfg      Config
	log      *slog.Logger
	metrics  *metrics
	upgrader websocket.Upgrader

	mu      sync.Mutex       // guards peers, conns and closing
	peers   map[string]*conn // joined connections by peer id
	conns   map[*conn]struct{}
	closing bool

	wg sync.WaitGroup // one per connection handler
}

// NewServer validates cfg and returns a Server.
func NewServer(cfg Config) (*Server, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	return &Server{
		cfg:     cfg,
		log:     cfg.Logger,
		metrics: newMetrics(cfg.Registerer),
		upgrader: websocket.Upgrader{
			ReadBufferSize:  4096,
			WriteBufferSize: 4096,
			CheckOrigin:     cfg.CheckOrigin,
		},
		peers: make(map[string]*conn),
		conns: make(map[*conn]struct{}),
	}, nil
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
		http.Error(w, "server shutting down", http.StatusServiceUnavailable)
		return
	}
	defer s.wg.Done()

	ws, err := s.upgrader.Upgrade(w, r, nil)
	if err != nil {
		// The upgrader has already answered with an HTTP error.
		s.log.Debug("websocket upgrade failed", "remote", r.RemoteAddr, "err", err)
		return
	}
	c := newConn(s, ws, r.RemoteAddr)
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		c.close(ReasonShutdown, false)
		c.serveWriter()
		return
	}
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	s.metrics.connections.Inc()
	defer s.metrics.connections.Dec()
	c.serve(r.Context())
}

// bind makes c the connection of its peer id, closing any older one.
func (s *Server) bind(c *conn) {
	s.mu.Lock()
	old := s.peers[c.peerID]
	s.peers[c.peerID] = c
	s.mu.Unlock()
	if old != nil && old != c {
		s.log.Info("peer reconnected; closing its older connection", "peer", c.peerID)
		old.close(ReasonReplaced, false)
	}
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

// Shutdown stops accepting connections, closes the open ones with "going
// away" and waits for their handlers to finish or ctx to end. Safe to call
// twice.
func (s *Server) Shutdown(ctx context.Context) error {
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
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Connections returns the number of open connections.
func (s *Server) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}
