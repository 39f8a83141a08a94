package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// server is a process the comparison starts and measures.
type server struct {
	name string
	cmd  *exec.Cmd
	url  string
	port int
	// How it was started, for restart.
	ready, urlPath string
	argv           []string
	exited         chan struct{} // closed once the process has been waited for
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
	return startServerOn(port, name, ready, urlPath, argv...)
}

// serverLogDir, when set (--server-logs), receives each started server's
// output in a file named after it.
var serverLogDir string

// startServerOn is startServer on a given port.
func startServerOn(port int, name, ready, urlPath string, template ...string) (*server, error) {
	argv := make([]string, len(template))
	for i, a := range template {
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
	var logf *os.File
	if serverLogDir != "" {
		logf, err = os.OpenFile(filepath.Join(serverLogDir, strings.ReplaceAll(name, " ", "-")+".log"),
			os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return nil, err
		}
	}
	found := make(chan bool, 1)
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		if logf != nil {
			defer logf.Close()
		}
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		ok := false
		for sc.Scan() {
			if logf != nil {
				fmt.Fprintln(logf, sc.Text())
			}
			if !ok && strings.Contains(sc.Text(), ready) {
				ok = true
				found <- true
			}
		}
		if !ok {
			found <- false
		}
		cmd.Wait()
	}()
	select {
	case ok := <-found:
		if !ok {
			cmd.Process.Kill()
			<-exited
			return nil, fmt.Errorf("%s exited before it listened", name)
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-exited
		return nil, fmt.Errorf("%s did not listen within 30s", name)
	}
	return &server{name: name, cmd: cmd, url: fmt.Sprintf("ws://127.0.0.1:%d%s", port, urlPath), port: port,
		ready: ready, urlPath: urlPath, argv: template, exited: exited}, nil
}

// stop interrupts the process and waits for it, killing it after 10 s.
func (s *server) stop() {
	s.cmd.Process.Signal(os.Interrupt)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		s.kill()
	}
}

// kill ends the process with SIGKILL and waits for it.
func (s *server) kill() {
	s.cmd.Process.Kill()
	<-s.exited
}

// restart starts the process again, the same way on the same port.
func (s *server) restart() error {
	n, err := startServerOn(s.port, s.name, s.ready, s.urlPath, s.argv...)
	if err != nil {
		return err
	}
	*s = *n
	return nil
}

// runCompare runs one scenario (presence, typing, idle or document) against Tandem
// and against the stock server, one after the other on the same machine,
// and prints the figures side by side with the ratios Tandem/stock. The
// presence scenario may run Centrifugo too, or instead (--compare-with).
var compareWith = flag.String("compare-with", "stock", "compare: the servers run after Tandem, comma-separated: stock, centrifugo (presence only, with --centrifugo-bin)")

func runCompare(ctx context.Context, o options, tandemBin string, tandemFlags []string, stockDir string) error {
	dataDir, err := os.MkdirTemp("", "tandem-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dataDir)
	stock := []string{"node", stockDir + "/server.mjs", "{port}"}
	if o.scenario == "document" {
		// Stored, so that a restart finds the document again (cold find).
		stock = append(stock, filepath.Join(dataDir, "stock"))
	}
	type target struct {
		name, ready, path string
		argv              []string
	}
	targets := []target{
		{"tandem", "tandem serving", "/ws", append([]string{tandemBin, "--addr", "127.0.0.1:{port}", "--data-dir", dataDir,
			"--log-level", "info", "--max-conns-per-ip", "1000000", "--message-rate", "1000", "--message-burst", "2000"}, tandemFlags...)},
	}
	for _, name := range strings.Split(*compareWith, ",") {
		switch name = strings.TrimSpace(name); name {
		case "stock":
			targets = append(targets, target{"stock", "listening", "", stock})
		case "centrifugo":
			if o.scenario != "presence" {
				return fmt.Errorf("--compare-with centrifugo runs the presence scenario only")
			}
			if *centrifugoBin == "" {
				return errNoCentrifugo
			}
			targets = append(targets, target{name: "centrifugo"})
		case "":
		default:
			return fmt.Errorf("--compare-with: unknown server %q", name)
		}
	}
	var (
		presence = map[string]presenceResult{}
		typing   [2]typingResult
		idle     [2]idleResult
		document [2]documentResult
	)
	for i, tg := range targets {
		var srv *server
		var err error
		if tg.name == "centrifugo" {
			srv, err = startCentrifugo(*centrifugoBin, dataDir)
		} else {
			srv, err = startServer(tg.name, tg.ready, tg.path, tg.argv...)
		}
		if err != nil {
			return err
		}
		i = min(i, 1)
		run := o
		run.urls = []string{srv.url}
		run.serverPIDs = []int{srv.cmd.Process.Pid}
		fmt.Printf("== %s\n", tg.name)
		switch o.scenario {
		case "presence":
			var r presenceResult
			if tg.name == "centrifugo" {
				r, err = measurePresenceOn(ctx, run, dialCentrifugo, newChannel)
			} else {
				r, err = measurePresence(ctx, run)
			}
			if err == nil {
				presence[tg.name] = r
				printPresence(r, run)
			}
		case "typing":
			if typing[i], err = measureTyping(ctx, run); err == nil {
				printTyping(typing[i], run)
			}
		case "idle":
			if idle[i], err = measureIdle(ctx, run); err == nil {
				printIdle(idle[i])
			}
		case "document":
			restart := func() (int, error) { // same argv, so the same data dir
				srv.stop()
				if err := srv.restart(); err != nil {
					return 0, err
				}
				return srv.cmd.Process.Pid, nil
			}
			if document[i], err = measureDocument(ctx, run, restart, ""); err == nil {
				printDocument(document[i])
			}
		default:
			err = fmt.Errorf("unknown scenario %q", o.scenario)
		}
		srv.stop()
		if err != nil {
			return fmt.Errorf("%s: %w", tg.name, err)
		}
	}
	if len(targets) < 2 {
		return nil
	}
	ratio := func(a, b float64) float64 { return a / max(b, 1e-9) }
	if o.scenario != "presence" {
		fmt.Printf("== tandem / stock\n")
	}
	switch o.scenario {
	case "presence":
		t := presence["tandem"]
		for _, tg := range targets[1:] {
			s := presence[tg.name]
			perCPU := func(r presenceResult) float64 { return float64(r.delivered) / max(r.cpu, 0.01) }
			fmt.Printf("== tandem / %s\n", tg.name)
			fmt.Printf("delivered            %.2f×\n", ratio(float64(t.delivered), float64(s.delivered)))
			fmt.Printf("deliveries per CPU-s %.2f×\n", ratio(perCPU(t), perCPU(s)))
			fmt.Printf("latency p99          %.2f× (lower is better)\n", ratio(float64(pct(t.latencies, 99)), float64(pct(s.latencies, 99))))
			fmt.Printf("  steady p99         %.2f× (lower is better)\n", ratio(float64(pct(t.steady, 99)), float64(pct(s.steady, 99))))
			fmt.Printf("clients' CPU         %.2f× (lower is better)\n", ratio(t.clientCPU, s.clientCPU))
			fmt.Printf("frames to clients    %.2f× (lower is better)\n", ratio(float64(t.frames), float64(s.frames)))
		}
		return nil
	case "typing":
		t, s := typing[0], typing[1]
		fmt.Printf("arrivals             %.2f×\n", ratio(float64(len(t.latencies)), float64(len(s.latencies))))
		fmt.Printf("latency p99          %.2f× (lower is better)\n", ratio(float64(pct(t.latencies, 99)), float64(pct(s.latencies, 99))))
		fmt.Printf("server CPU           %.2f× (lower is better)\n", ratio(t.cpu, s.cpu))
		fmt.Printf("frames to clients    %.2f× (lower is better)\n", ratio(float64(t.frames), float64(s.frames)))
		fmt.Printf("bytes to clients     %.2f× (lower is better)\n", ratio(float64(t.bytes), float64(s.bytes)))
		fmt.Printf("clients' CPU         %.2f× (lower is better)\n", ratio(t.clientCPU, s.clientCPU))
		fmt.Printf("a delivered keystroke %.2f× the frames, %.2f× the clients' CPU (lower is better)\n",
			ratio(t.framesPerArrival(), s.framesPerArrival()), ratio(t.cpuPerArrival(), s.cpuPerArrival()))
	case "idle":
		fmt.Printf("RSS per connection   %.2f× (lower is better)\n", ratio(idle[0].perConn(), idle[1].perConn()))
	case "document":
		t, s := document[0], document[1]
		fmt.Printf("bytes per change     %.2f× (lower is better)\n", ratio(t.perChange(), s.perChange()))
		if t.rssSteady > 0 && s.rssSteady > 0 {
			fmt.Printf("steady, per change   %.2f× (lower is better)\n", ratio(t.perChangeSteady(), s.perChangeSteady()))
		}
		fmt.Printf("write                %.2f× (lower is better)\n", ratio(t.write.Seconds(), s.write.Seconds()))
		fmt.Printf("first sync           %.2f× (lower is better)\n", ratio(t.firstSync.Seconds(), s.firstSync.Seconds()))
		fmt.Printf("first sync, less the reader's own %.2f× (lower is better)\n", ratio((t.firstSync-t.firstSyncOwn).Seconds(), (s.firstSync-s.firstSyncOwn).Seconds()))
		if t.cold > 0 && s.cold > 0 {
			fmt.Printf("cold find            %.2f× (lower is better)\n", ratio(t.cold.Seconds(), s.cold.Seconds()))
			fmt.Printf("cold find, less the reader's own %.2f× (lower is better)\n", ratio((t.cold-t.coldOwn).Seconds(), (s.cold-s.coldOwn).Seconds()))
		}
		if t.pasteRefusal == "" && s.pasteRefusal == "" {
			fmt.Printf("paste                %.2f× (lower is better)\n", ratio(t.paste.Seconds(), s.paste.Seconds()))
			fmt.Printf("paste, less the clients' own %.2f× (lower is better)\n", ratio((t.paste-t.pasteOwn).Seconds(), (s.paste-s.pasteOwn).Seconds()))
			fmt.Printf("bytes per pasted char %.2f× (lower is better)\n", ratio(t.perPastedChar(), s.perPastedChar()))
			if t.rssPaste2 > 0 && s.rssPaste2 > 0 {
				fmt.Printf("steady, per char     %.2f× (lower is better)\n", ratio(t.perPastedCharSteady(), s.perPastedCharSteady()))
			}
		}
	}
	return nil
}
