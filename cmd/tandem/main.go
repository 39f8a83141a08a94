package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"

	"github.com/tandemhq/tandem/internal/auth"
	"github.com/tandemhq/tandem/internal/cmalloc"
)

func main() {
	if os.Getenv("MALLOC_ARENA_MAX") == "" && !strings.Contains(os.Getenv("GLIBC_TUNABLES"), "arena_max") {
		// One malloc arena per core, not eight: automerge's C heap
		// otherwise scatters its free space over many (internal/cmalloc).
		cmalloc.LimitArenas(runtime.GOMAXPROCS(0))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Getenv, os.Stderr, nil)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tandem:", err)
		os.Exit(1)
	}
}

// run serves until ctx ends, then shuts down gracefully. If ready is not
// nil it receives the listening address once the node serves.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer, ready chan<- net.Addr) error {
	cfg, err := parseConfig(args, getenv, stderr)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	if cfg.NodeID == "" {
		cfg.NodeID = defaultNodeID()
	}
	verifier, err := newVerifier(cfg)
	if err != nil {
		return err
	}
	if verifier == nil {
		log.Warn("AUTH DISABLED: anyone who can reach this server can read and write every document " +
			"and appear as anyone. Fine for local use; set --auth-secret or --auth-public-key otherwise.")
	}
	n, err := assemble(ctx, cfg, log, verifier)
	if err != nil {
		return err
	}
	defer n.dismantle()
	if cfg.DebugAddr != "" {
		stopDebug, err := serveDebug(cfg.DebugAddr, log)
		if err != nil {
			return err
		}
		defer stopDebug()
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	log.Info("tandem serving", "addr", ln.Addr().String(), "node_id", cfg.NodeID, "storage_id", n.stores.storageID)
	if ready != nil {
		ready <- ln.Addr()
	}
	if err := n.serve(ctx, ln); err != nil {
		return err
	}
	log.Info("stopped cleanly")
	return nil
}

// newVerifier builds the token verifier; nil means the node runs open.
func newVerifier(cfg config) (*auth.Verifier, error) {
	ac := auth.Config{Secret: []byte(cfg.AuthSecret), Audience: cfg.AuthAudience, Issuer: cfg.AuthIssuer, AllowNoExpiry: cfg.AuthAllowNoExp}
	if cfg.AuthPublicKey != "" {
		key, err := auth.LoadPublicKey(cfg.AuthPublicKey)
		if err != nil {
			return nil, fmt.Errorf("--auth-public-key: %w", err)
		}
		ac.PublicKey = key
	}
	if len(ac.Secret) == 0 && ac.PublicKey == nil {
		return nil, nil
	}
	return auth.NewVerifier(ac)
}

func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

// defaultNodeID is the host name plus a random suffix, so that two nodes
// on one host (or a restarted node) never share an id.
func defaultNodeID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "node"
	}
	var b [3]byte
	rand.Read(b[:])
	return host + "-" + hex.EncodeToString(b[:])
}
