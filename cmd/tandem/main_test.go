package main

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tandemhq/tandem/internal/testenv"
)

func TestParseConfig(t *testing.T) {
	env := map[string]string{"TANDEM_ADDR": ":9000", "TANDEM_LOG_LEVEL": "debug", "TANDEM_PING_INTERVAL": "2s"}
	c, err := parseConfig([]string{"--addr", ":9999"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Addr != ":9999" {
		t.Errorf("flag should win over env: addr = %q", c.Addr)
	}
	if c.LogLevel != slog.LevelDebug || c.PingInterval != 2*time.Second {
		t.Errorf("env not applied: %+v", c)
	}
	if c.DataDir != "./tandem-data" {
		t.Errorf("default data dir = %q", c.DataDir)
	}
	if !c.GCTune || c.GCMax != 100 {
		t.Errorf("the GC tuner should be on up to Go's default: %v %d", c.GCTune, c.GCMax)
	}
	for gogc, want := range map[string]int{"50": 50, "off": 0, "-1": 0} {
		c, err := parseConfig(nil, func(k string) string { return map[string]string{"GOGC": gogc}[k] }, io.Discard)
		if err != nil || c.GCMax != want {
			t.Errorf("GOGC=%s: the tuner's most is %d (%v), want %d", gogc, c.GCMax, err, want)
		}
	}

	if c.PresenceHistory != 30*24*time.Hour {
		t.Errorf("presence history is kept %v by default, want 30 days", c.PresenceHistory)
	}
	for arg, want := range map[string]time.Duration{"365d": 365 * 24 * time.Hour, "720h": 720 * time.Hour, "0": 0} {
		c, err := parseConfig([]string{"--presence-history", arg}, func(string) string { return "" }, io.Discard)
		if err != nil || c.PresenceHistory != want {
			t.Errorf("--presence-history %s: %v (%v), want %v", arg, c.PresenceHistory, err, want)
		}
	}

	bad := []struct {
		args []string
		env  map[string]string
	}{
		{[]string{"--ping-interval", "1ms"}, nil},
		{nil, map[string]string{"TANDEM_PING_INTERVAL": "soon"}},
		{[]string{"--log-level", "loud"}, nil},
		{[]string{"stray"}, nil},
		{[]string{"--max-presence-depth", "3"}, nil},
		{[]string{"--api-rate-per-ip", "0"}, nil},
		{[]string{"--max-watched-per-ip", "0"}, nil},
		{[]string{"--max-presence-depth", "65"}, nil},
		{[]string{"--max-presence-depth", "0"}, nil},
		{[]string{"--mention-text-field", "page..body"}, nil},
		{[]string{"--mention-title-field", ""}, nil},
		{nil, map[string]string{"GOGC": "lots"}},
		{[]string{"--max-document-changes", "2147483648"}, nil},
		{[]string{"--presence-history", "30m"}, nil},
		{[]string{"--presence-history", "1.5d"}, nil},
		{[]string{"--presence-history", "-1h"}, nil},
	}
	for _, b := range bad {
		if _, err := parseConfig(b.args, func(k string) string { return b.env[k] }, io.Discard); err == nil {
			t.Errorf("args %v env %v: want an error", b.args, b.env)
		}
	}
}

// TestRunServesAndStops starts the node, checks its HTTP surface and stops
// it as SIGTERM would.
// startRun runs the node in this process with these flags beside a data
// directory of its own; stop stops it as SIGTERM would and returns what
// run returned.
func startRun(t *testing.T, args ...string) (addr net.Addr, stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"--addr", "127.0.0.1:0", "--data-dir", t.TempDir()}, args...),
			func(string) string { return "" }, io.Discard, ready)
	}()
	select {
	case addr = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("run returned early: %v", err)
	}
	return addr, func() error { cancel(); return <-done }
}

func TestRunServesAndStops(t *testing.T) {
	addr, stop := startRun(t)
	base := "http://" + addr.String()
	for path, wants := range map[string][]string{
		"/healthz": {`"status":"ok"`},
		"/":        {"automerge-repo"},
		"/metrics": {"tandem_documents", "tandem_gc_percent", `tandem_c_heap_bytes{state="in_use"}`, `tandem_c_heap_bytes{state="free"}`},
	} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, want := range wants {
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
				t.Errorf("GET %s: %d, body lacks %q", path, resp.StatusCode, want)
			}
		}
	}
	if err := stop(); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}

// An idle keep-alive HTTP connection is closed after --http-idle-timeout,
// not kept for ever.
func TestIdleHTTPConnectionsAreClosed(t *testing.T) {
	addr, stop := startRun(t, "--http-idle-timeout", "200ms")
	c, err := net.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: tandem\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := r.ReadByte(); err != io.EOF {
		t.Fatalf("the idle connection was not closed by the server: %v", err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// The node limits the API's requests per address (--api-rate-per-ip): past
// the burst a request gets 429, counted in its metrics.
func TestAPIRateFlag(t *testing.T) {
	addr, stop := startRun(t, "--api-rate-per-ip", "0.5")
	base := "http://" + addr.String()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	const path = "/api/docs/2gzyVEWRbEhwBcRvStKvD3gBE5pp/presence"
	if code, body := get(path); code != http.StatusOK { // a burst of one: twice 0.5
		t.Fatalf("within the burst: %d %s", code, body)
	}
	if code, body := get(path); code != http.StatusTooManyRequests {
		t.Fatalf("past the burst: %d %s, want 429", code, body)
	}
	if _, body := get("/metrics"); !strings.Contains(body, `tandem_http_refused_total{reason="rate_limited"} 1`) {
		t.Errorf("the refusal is not in the metrics")
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// An open node's API serves a browser only on a host it trusts, as its
// WebSocket does: a page of another site that points its own name at the
// node (DNS rebinding) reads the API same-origin, and a cross-site form
// can post to it. Clients that are not browsers are served on any name.
func TestAnOpenNodesAPIRefusesPagesOfOtherSites(t *testing.T) {
	addr, stop := startRun(t, "--allowed-hosts", "docs.example.com", "--allowed-origins", "https://app.example.com")
	defer stop()
	const path = "/api/docs/2gzyVEWRbEhwBcRvStKvD3gBE5pp/presence"
	for _, c := range []struct {
		name, host string
		header     http.Header
		want       int
	}{
		{"a rebound name, same-origin GET", "evil.example:8080", http.Header{"Sec-Fetch-Site": {"same-origin"}}, http.StatusForbidden},
		{"a cross-site form", "127.0.0.1", http.Header{"Origin": {"http://evil.example"}}, http.StatusForbidden},
		{"the node's own page", "localhost:8080", http.Header{"Sec-Fetch-Site": {"same-origin"}, "Origin": {"http://localhost:8080"}}, http.StatusOK},
		{"an allowed host", "docs.example.com", http.Header{"Sec-Fetch-Site": {"same-origin"}}, http.StatusOK},
		{"an allowed origin, same-origin", "app.example.com", http.Header{"Sec-Fetch-Site": {"same-origin"}}, http.StatusOK},
		{"an allowed origin, cross-site", "127.0.0.1", http.Header{"Sec-Fetch-Site": {"cross-site"}, "Origin": {"https://app.example.com"}}, http.StatusOK},
		{"not a browser, any name", "tandem.internal:8080", nil, http.StatusOK},
	} {
		req, err := http.NewRequest(http.MethodGet, "http://"+addr.String()+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = c.host
		for k, v := range c.header {
			req.Header[k] = v
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s: %d, want %d", c.name, resp.StatusCode, c.want)
		}
	}
	resp, err := http.Get("http://" + addr.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `tandem_http_refused_total{reason="origin"} 2`) {
		t.Error("the refusals are not in the metrics")
	}
}

// A history store that cannot be opened is an error at start, with the
// other stores closed, not a crash.
func TestHistoryStoreThatCannotOpenIsAnError(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "presence-history.sqlite"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg, err := parseConfig([]string{"--data-dir", dir}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if s, err := openStores(context.Background(), cfg, testenv.QuietLogger()); err == nil {
		s.close()
		t.Fatal("the stores opened beside a directory where the history file goes")
	}
}

// A node that cannot be built (its data directory is a file) says why,
// rather than crash undoing what it built.
func TestANodeThatCannotBeBuiltSaysWhy(t *testing.T) {
	file := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	err := run(context.Background(), []string{"--addr", "127.0.0.1:0", "--data-dir", file}, func(string) string { return "" }, io.Discard, nil)
	if err == nil {
		t.Fatal("a node on a data directory that is a file started")
	}
}
