package web

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemhq/tandem/awareness"
	"github.com/tandemhq/tandem/internal/testenv"
)

// refusedCount reads tandem_http_refused_total for one reason.
func refusedCount(t *testing.T, reg *prometheus.Registry, reason string) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "tandem_http_refused_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return int(m.GetCounter().GetValue())
				}
			}
		}
	}
	return 0
}

// One address over its API rate is answered 429, with when to retry, and
// counted; another address, and the health checks, go on.
func TestAPIRateIsLimitedPerAddress(t *testing.T) {
	fp := &fakePresence{watch: make(chan func(awareness.UserStatus), 1)}
	reg := prometheus.NewRegistry()
	srv := httptest.NewServer(NewRouter(Config{WebSocket: http.NotFoundHandler(), Presence: fp, Registerer: reg,
		Requests: RequestLimits{PerIP: 0.5, Burst: 3}}))
	t.Cleanup(srv.Close)
	get := func(c *http.Client, path string) (*http.Response, string) {
		t.Helper()
		resp, err := c.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	a, b := clientFrom(t, "127.0.0.1"), clientFrom(t, "127.0.0.2")
	const path = "/api/docs/2gzyVEWRbEhwBcRvStKvD3gBE5pp/presence"
	for i := range 3 {
		if resp, body := get(a, path); resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d within the burst: %d %s", i+1, resp.StatusCode, body)
		}
	}
	resp, body := get(a, path)
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, "too many API requests from this address") {
		t.Fatalf("a fourth request at once: %d %s, want 429", resp.StatusCode, body)
	}
	if ra := resp.Header.Get("Retry-After"); ra != "2" {
		t.Errorf("Retry-After %q, want 2", ra)
	}
	if n := refusedCount(t, reg, refusedRate); n != 1 {
		t.Errorf("rate-limited requests counted: %d, want 1", n)
	}
	if resp, body := get(b, path); resp.StatusCode != http.StatusOK {
		t.Fatalf("another address: %d %s", resp.StatusCode, body)
	}
	for range 5 {
		if resp, _ := get(a, "/healthz"); resp.StatusCode != http.StatusOK {
			t.Fatalf("healthz from the limited address: %d", resp.StatusCode)
		}
	}
}

// A request body sent too slowly is cut at its deadline: 408, counted,
// and the connection closed, where it held a handler and a connection
// for as long as the client liked. A stream, open since before, is not
// cut by it.
func TestSlowRequestBodyIsTimedOut(t *testing.T) {
	fp := &fakePresence{watch: make(chan func(awareness.UserStatus), 1)}
	reg := prometheus.NewRegistry()
	srv := httptest.NewServer(NewRouter(Config{WebSocket: http.NotFoundHandler(), Presence: fp,
		Notifications: failingNotifications{}, Logger: testenv.QuietLogger(), Registerer: reg,
		Requests: RequestLimits{BodyTimeout: 300 * time.Millisecond}}))
	t.Cleanup(srv.Close)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/presence/watch?users=ana", nil)
	watch, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Body.Close()
	push := <-fp.watch
	events := bufio.NewScanner(watch.Body)
	nextEvent := func() string {
		t.Helper()
		for events.Scan() {
			if line, ok := strings.CutPrefix(events.Text(), "data: "); ok {
				return line
			}
		}
		t.Fatalf("the watch ended: %v", events.Err())
		return ""
	}
	nextEvent() // the initial status

	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	fmt.Fprint(conn, "POST /api/notifications HTTP/1.1\r\nHost: tandem\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"recipient\":")
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer to a body that stalls: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), "did not arrive in time") {
		t.Fatalf("a stalled body: %d %s, want 408", resp.StatusCode, body)
	}
	if waited := time.Since(start); waited < 300*time.Millisecond {
		t.Errorf("answered after %v, before the body's deadline", waited)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("the connection after a stalled body: %v, want it closed", err)
	}
	if n := refusedCount(t, reg, refusedSlowBody); n != 1 {
		t.Errorf("slow bodies counted: %d, want 1", n)
	}

	// The watch, older than the body's deadline, still streams.
	push(awareness.UserStatus{UserID: "ana", Status: awareness.StatusOnline})
	if got := nextEvent(); !strings.Contains(got, `"online"`) {
		t.Fatalf("the watch sent %s", got)
	}
	cancel()
}
