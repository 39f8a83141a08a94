package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"time"
)

// server is a process the comparison starts and measures.
type server struct {
	name string
	cmd  *exec.Cmd
	url  string
}

// startServer runs argv with its port as the last argument, waits for the
// line that says it listens, and returns its WebSocket URL.
func startServer(name, ready, urlPath string, argv ...string) (*server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	for i, a := range argv {
		argv[i] = strings.ReplaceAll(a, "{port}", fmt.Sprint(port))
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	found := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		ok := false
		for sc.Scan() {
			if !ok && strings.Contains(sc.Text(), ready) {
				ok = true
				found <- true
			}
		}
		if !ok {
			found <- false
		}
	}()
	select {
	case ok := <-found:
		if !ok {
			cmd.Process.Kill()
			cmd.Wait()
			return nil, fmt.Errorf("%s exited before it listened", name)
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("%s did not listen within 30s", name)
	}
	return &server{name: name, cmd: cmd, url: fmt.Sprintf("ws://127.0.0.1:%d%s", port, urlPath)}, nil
}

func (s *server) stop() {
	s.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill()
		<-done
	}
}

// runCompare runs one scenario (presence, typing or idle) against Tandem
// and against the stock server, one after the other on the same machine,
// and prints the figures side by side with the ratios Tandem/stock.
func runCompare(ctx context.Context, o options, tandemBin string, tandemFlags []string, stockDir string) error {
	dataDir, err := os.MkdirTemp("", "tandem-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dataDir)
	targets := []struct {
		name, ready, path string
		argv              []string
	}{
		{"tandem", "tandem serving", "/ws", append([]string{tandemBin, "--addr", "127.0.0.1:{port}", "--data-dir", dataDir,
			"--log-level", "info", "--max-conns-per-ip", "1000000", "--message-rate", "1000", "--message-burst", "2000"}, tandemFlags...)},
		{"stock", "listening", "", []string{"node", stockDir + "/server.mjs", "{port}"}},
	}
	var (
		presence [2]presenceResult
		typing   [2]typingResult
		idle     [2]idleResult
	)
	for i, tg := range targets {
		srv, err := startServer(tg.name, tg.ready, tg.path, tg.argv...)
		if err != nil {
			return err
		}
		run := o
		run.urls = []string{srv.url}
		run.serverPIDs = []int{srv.cmd.Process.Pid}
		fmt.Printf("== %s\n", tg.name)
		switch o.scenario {
		case "presence":
			if presence[i], err = measurePresence(ctx, run); err == nil {
				printPresence(presence[i], run)
			}
		case "typing":
			if typing[i], err = measureTyping(ctx, run); err == nil {
				printTyping(typing[i], run)
			}
		case "idle":
			if idle[i], err = measureIdle(ctx, run); err == nil {
				printIdle(idle[i])
			}
		default:
			err = fmt.Errorf("unknown scenario %q", o.scenario)
		}
		srv.stop()
		if err != nil {
			return fmt.Errorf("%s: %w", tg.name, err)
		}
	}
	ratio := func(a, b float64) float64 { return a / max(b, 1e-9) }
	fmt.Printf("== tandem / stock\n")
	switch o.scenario {
	case "presence":
		t, s := presence[0], presence[1]
		perCPU := func(r presenceResult) float64 { return float64(r.delivered) / max(r.cpu, 0.01) }
		fmt.Printf("delivered            %.2f×\n", ratio(float64(t.delivered), float64(s.delivered)))
		fmt.Printf("deliveries per CPU-s %.2f×\n", ratio(perCPU(t), perCPU(s)))
		fmt.Printf("latency p99          %.2f× (lower is better)\n", ratio(float64(pct(t.latencies, 99)), float64(pct(s.latencies, 99))))
	case "typing":
		t, s := typing[0], typing[1]
		fmt.Printf("arrivals             %.2f×\n", ratio(float64(len(t.latencies)), float64(len(s.latencies))))
		fmt.Printf("latency p99          %.2f× (lower is better)\n", ratio(float64(pct(t.latencies, 99)), float64(pct(s.latencies, 99))))
		fmt.Printf("server CPU           %.2f× (lower is better)\n", ratio(t.cpu, s.cpu))
		fmt.Printf("frames to clients    %.2f× (lower is better)\n", ratio(float64(t.frames), float64(s.frames)))
		fmt.Printf("bytes to clients     %.2f× (lower is better)\n", ratio(float64(t.bytes), float64(s.bytes)))
		fmt.Printf("clients' CPU         %.2f× (lower is better)\n", ratio(t.clientCPU, s.clientCPU))
	case "idle":
		fmt.Printf("RSS per connection   %.2f× (lower is better)\n", ratio(idle[0].perConn(), idle[1].perConn()))
	}
	return nil
}
