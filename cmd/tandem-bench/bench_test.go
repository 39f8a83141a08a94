package main

import (
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tandemhq/tandem/awareness"
	"github.com/tandemhq/tandem/doc"
	"github.com/tandemhq/tandem/doc/store"
	"github.com/tandemhq/tandem/internal/testenv"
	"github.com/tandemhq/tandem/transport"
)

// TestPresenceScenario runs a small presence load against an in-process
// node and checks what the tool reports: every update counted, and every
// peer's final cursor seen by every other peer (the tick coalesces, so
// delivered may be below offered, never above).
func TestPresenceScenario(t *testing.T) {
	url := startTestNode(t)
	for _, batches := range []bool{false, true} { // as stock clients, as Tandem's
		r, err := measurePresence(context.Background(), options{
			urls: []string{url}, batches: batches,
			docs: 2, peers: 3, rate: 20, duration: 500 * time.Millisecond, drain: 500 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		if r.offered == 0 || r.delivered == 0 || r.delivered > r.offered {
			t.Fatalf("batches %v: offered %d, delivered %d", batches, r.offered, r.delivered)
		}
		if r.pairs != 2*3*2 || r.missingFinal != 0 {
			t.Fatalf("batches %v: final cursors missing for %d of %d pairs", batches, r.missingFinal, r.pairs)
		}
		if len(r.latencies) != int(r.delivered) {
			t.Fatalf("batches %v: %d latencies for %d deliveries", batches, len(r.latencies), r.delivered)
		}
		if r.frames == 0 || r.bytes == 0 || !batches && r.frames < r.delivered {
			t.Fatalf("batches %v: %d frames, %d bytes for %d deliveries", batches, r.frames, r.bytes, r.delivered)
		}
	}
}

// TestPresenceChurn runs the presence load with users coming and going
// beside it: every one of them came, stayed and went without a failure.
func TestPresenceChurn(t *testing.T) {
	url := startTestNode(t)
	r, err := measurePresence(context.Background(), options{
		urls: []string{url}, docs: 1, peers: 2, rate: 10, duration: time.Second, drain: 100 * time.Millisecond,
		churnRate: 40, churnUsers: 10, churnStay: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.churn.failed != 0 || r.churn.joined < 20 {
		t.Fatalf("churn: %d came and went, %d failed; want about 40, none failed", r.churn.joined, r.churn.failed)
	}
}

// TestTypingScenario runs a small typing load: it must finish cleanly
// (typists got the document, readers answered the sync loop).
func TestTypingScenario(t *testing.T) {
	url := startTestNode(t)
	err := runTyping(context.Background(), options{
		urls: []string{url}, typists: 2, readers: 3, rate: 10,
		duration: 500 * time.Millisecond, drain: 300 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
}

// startTestNode serves an in-process node and returns its WebSocket URL.
func startTestNode(t *testing.T) string {
	t.Helper()
	logger := testenv.QuietLogger()
	st, err := store.OpenBolt(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() }) // after the hub's Close: registered before it
	hub, err := doc.NewHub(doc.Config{Store: st, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	go hub.Run(context.Background()) // until hub.Close
	presence, err := awareness.New(awareness.Config{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); presence.Run(ctx) }()
	srv, err := transport.NewServer(transport.Config{Documents: hub, Presence: presence, PeerID: "bench-server", Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		srv.Close(context.Background())
		hs.Close()
		cancel()
		<-done
		hub.Close(context.Background())
	})

	return "ws" + strings.TrimPrefix(hs.URL, "http") + "/"
}

// TestClusterScenario builds the server and runs a small presence load on
// a cluster of two nodes (a private redis-server, the test PostgreSQL):
// peers of one document sit on both nodes, so their cursors cross Redis,
// and every final cursor must arrive.
func TestClusterScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds the server and runs two nodes with a Redis of their own; the full suite runs it")
	}
	r, err := measureCluster(context.Background(), options{
		scenario: "presence", docs: 2, peers: 4, rate: 10,
		duration: time.Second, drain: time.Second,
	}, buildTandem(t), 2, testenv.PostgresSchema(t))
	if err != nil {
		t.Fatal(err)
	}
	if r.delivered == 0 || r.pairs != 2*4*3 || r.missingFinal != 0 {
		t.Fatalf("delivered %d; final cursors missing for %d of %d pairs", r.delivered, r.missingFinal, r.pairs)
	}
	if r.cpu <= 0 || r.rss <= 0 {
		t.Fatalf("CPU %v s, RSS %d: the nodes' /proc figures are missing", r.cpu, r.rss)
	}
}

// buildTandem builds the server binary for the tests that run it.
func buildTandem(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "tandem")
	build := exec.Command("go", "build", "-o", bin, "github.com/tandemhq/tandem/cmd/tandem")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestSoakScenario runs a short fault soak on two nodes: node 1 killed
// with -9 and restarted, Redis restarted, peers dropping their connections
// and bad input throughout. Nothing acknowledged may be lost, no document
// damaged or left different between the nodes, no ghost outlive the
// bound, and every kind of bad input must have met its answer.
func TestSoakScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a 12 s fault soak on two server nodes; the full suite runs it")
	}
	if dir := os.Getenv("TANDEM_SOAK_LOGS"); dir != "" {
		// Keeps the servers' output, to see what a failing run did.
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		serverLogDir = dir
		t.Cleanup(func() { serverLogDir = "" })
	}
	r, err := measureSoak(context.Background(), options{docs: 2, peers: 3, rate: 2, duration: 12 * time.Second},
		buildTandem(t), 2, testenv.PostgresSchema(t), 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("edits %d made, %d acknowledged; errors by reason: %v", r.edits, r.acked, r.errors)
	if r.faulty() {
		t.Fatalf("lost %d (in PostgreSQL %d), damaged %d, diverged %d, crashed %v, ghosts %v during the run and %d after; errors %v",
			r.lost, r.lostInStore, r.damaged, r.diverged, r.crashed, r.ghosts, r.finalGhosts, r.errors)
	}
	if r.acked == 0 {
		t.Fatal("no edit was acknowledged")
	}
	for reason, n := range r.errors {
		if strings.HasPrefix(reason, "soak: ") {
			t.Errorf("%d × %s", n, reason)
		}
	}
	for _, c := range []string{"garbage bytes → close 1007", "text frame → close 1003", "oversized frame → close 1009",
		"sync before join → close 1002", "forged sender → close 1008", "invalid document id → error, connection kept"} {
		if r.errors["bad input: "+c] == 0 {
			t.Errorf("no bad input met %q", c)
		}
	}
}

// TestDocumentScenario builds the server and runs the document scenario
// small against it, restart included: every reader must reach the
// writer's heads (measureDocument fails otherwise), a 64 KiB paste must
// be accepted, and every figure must be there.
func TestDocumentScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds the server and writes 500 changes one message each; the full suite runs it")
	}
	srv, err := startServer("tandem", "tandem serving", "/ws", buildTandem(t), "--addr", "127.0.0.1:{port}",
		"--data-dir", t.TempDir(), "--log-level", "info", "--message-rate", "1000", "--message-burst", "2000")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.stop()
	restart := func() (int, error) {
		srv.stop()
		if err := srv.restart(); err != nil {
			return 0, err
		}
		return srv.cmd.Process.Pid, nil
	}
	r, err := measureDocument(context.Background(), options{
		urls: []string{srv.url}, serverPIDs: []int{srv.cmd.Process.Pid}, changes: 500, batch: 1, pasteBytes: 64 << 10,
	}, restart, "")
	if err != nil {
		t.Fatal(err)
	}
	printDocument(r)
	if r.messages < r.changes {
		t.Errorf("%d changes in %d messages: batch 1 sends one change a message", r.changes, r.messages)
	}
	if r.savedBytes <= 0 || r.write <= 0 || r.firstSync <= 0 || r.cold <= 0 || r.coldNote != "" {
		t.Errorf("saved %d B, write %v, first sync %v, cold find %v (%q)", r.savedBytes, r.write, r.firstSync, r.cold, r.coldNote)
	}
	if r.rssBefore <= 0 || r.rssAfter <= 0 || r.rssCold1 <= 0 || r.rssPaste1 <= 0 {
		t.Errorf("RSS %d → %d, cold %d, paste %d: the /proc figures are missing", r.rssBefore, r.rssAfter, r.rssCold1, r.rssPaste1)
	}
	if r.pasteRefusal != "" || r.paste <= 0 {
		t.Errorf("64 KiB paste: %v, refused %q", r.paste, r.pasteRefusal)
	}
}
