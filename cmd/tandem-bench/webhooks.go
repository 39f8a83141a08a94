package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/automerge/automerge-go"
)

// The webhooks scenario: document.changed for --hook-docs documents
// edited at once, each by a client of its own that goes on editing,
// delivered to an endpoint in this process that answers after
// --hook-answer; beside it the presence and typing workloads at a steady
// load. It runs the node with webhooks and without, alternating, and
// prints the presence and typing p99 of each with the ratio of their
// medians, and what the endpoint got.
var (
	hookDocs      = flag.Int("hook-docs", 1000, "webhooks: documents edited at once, one client each")
	hookEditEvery = flag.Duration("hook-edit-every", time.Second, "webhooks: each document's client edits it about this often after the first edit (0.5 to 1.5 times, at random)")
	hookEditFor   = flag.Duration("hook-edit-for", -1, "webhooks: how long each client goes on editing after its first edit; negative: until the presence and typing load ends; 0: one edit each")
	hookAnswer    = flag.Duration("hook-answer", 2*time.Second, "webhooks: how long the endpoint takes to answer each delivery")
	hookRuns      = flag.Int("hook-runs", 3, "webhooks: runs with webhooks and as many without, alternating")
	hookDrain     = flag.Duration("hook-drain", 0, "webhooks: how long a run with webhooks waits, after the load, for the deliveries still queued (stops early once all arrived)")
	hookEvents    = flag.String("hook-events", "document.changed", "webhooks: --webhook-events of the node")
	hookPostgres  = flag.Bool("hook-postgres", false, "webhooks: the node keeps its documents and queue in --postgres-url (a schema of the run's own) instead of SQLite")
	hookPDocs     = flag.Int("hook-presence-docs", 5, "webhooks: presence documents beside the edits")
	hookPPeers    = flag.Int("hook-presence-peers", 10, "webhooks: presence peers per document")
	hookPRate     = flag.Float64("hook-presence-rate", 5, "webhooks: cursor moves per second per presence peer")
	hookTRate     = flag.Float64("hook-typing-rate", 5, "webhooks: characters per second per typist (--typists, --readers)")
)

// hookRun is what one run measured.
type hookRun struct {
	hooks    bool
	presence presenceResult
	typing   typingResult
	cpu      float64 // the node's CPU seconds over the load
	load     time.Duration
	rss      int64
	edits    int64
	load1    float64 // the machine's load average when the load ended

	// With webhooks:
	samples  []hookSample
	metrics  map[string]float64 // the node's last /metrics
	events   []hookEvent
	arrivals []time.Time
	bad      int
	maxIn    int
	windows  windowStats
	drained  bool // every event decided arrived, none queued
	sinceT0  time.Duration
}

// hookSample is the node seen once a second.
type hookSample struct {
	at                      time.Duration // since the first edits
	depth, pending, dropped float64
	decided, delivered, rss float64
	received                int
	cpu                     float64
}

func runWebhooks(ctx context.Context, o options, tandemBin string, tandemFlags []string, postgresURL string) error {
	var runs []hookRun
	for i := range *hookRuns {
		for _, on := range []bool{false, true} {
			fmt.Printf("== run %d, webhooks %v\n", i+1, on)
			r, err := measureWebhooks(ctx, o, tandemBin, tandemFlags, postgresURL, on)
			if err != nil {
				return err
			}
			printHookRun(r)
			runs = append(runs, r)
		}
	}
	printHookSummary(runs)
	return nil
}

func measureWebhooks(ctx context.Context, o options, tandemBin string, tandemFlags []string, postgresURL string, on bool) (hookRun, error) {
	r := hookRun{hooks: on}
	dataDir, err := os.MkdirTemp("", "tandem-bench-hooks-")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dataDir)
	args := []string{tandemBin, "--addr", "127.0.0.1:{port}", "--data-dir", dataDir,
		"--log-level", "info", "--max-conns-per-ip", "1000000", "--message-rate", "1000", "--message-burst", "2000"}
	if *hookPostgres {
		store, err := newStoreWrites(ctx, postgresURL)
		if err != nil {
			return r, err
		}
		defer store.drop()
		args = append(args, "--postgres-url", store.url)
	}
	var recv *hookReceiver
	if on {
		secret := newHookSecret()
		if recv, err = newHookReceiver(secret, *hookAnswer); err != nil {
			return r, err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return r, err
		}
		hs := &http.Server{Handler: recv}
		go hs.Serve(ln)
		defer hs.Close()
		args = append(args, "--webhook-url", "http://"+ln.Addr().String()+"/hook", "--webhook-secret", secret,
			"--webhook-events", *hookEvents)
	}
	args = append(args, tandemFlags...)
	node, err := startServer("tandem", "tandem serving", "/ws", args...)
	if err != nil {
		return r, err
	}
	defer node.stop()
	pid := node.cmd.Process.Pid
	metricsURL := fmt.Sprintf("http://127.0.0.1:%d/metrics", node.port)

	editors, err := dialEditors(node.url, *hookDocs)
	defer func() {
		for _, e := range editors {
			e.ws.Close()
		}
	}()
	if err != nil {
		return r, err
	}

	// The samples run from the first edits to the end of the drain, in
	// runs without webhooks too: the node serves /metrics in both.
	sampleCtx, stopSamples := context.WithCancel(ctx)
	var sampled sync.WaitGroup
	t0 := time.Now()
	sampled.Add(1)
	go func() {
		defer sampled.Done()
		r.samples = sampleNode(sampleCtx, metricsURL, pid, recv, t0)
	}()

	editCtx, stopEdits := context.WithCancel(ctx)
	var edited sync.WaitGroup
	start := make(chan struct{})
	for _, e := range editors {
		edited.Add(1)
		go func() {
			defer edited.Done()
			e.edit(editCtx, start, *hookEditEvery, *hookEditFor)
		}()
	}
	close(start) // every document edited at once

	pres, typ := o, o
	pres.urls, typ.urls = []string{node.url}, []string{node.url}
	pres.serverPIDs, typ.serverPIDs = []int{pid}, []int{pid}
	pres.docs, pres.peers, pres.rate = *hookPDocs, *hookPPeers, *hookPRate
	typ.rate = *hookTRate
	cpu0, _ := cpuSeconds([]int{pid})
	loadStart := time.Now()
	var perr, terr error
	var both sync.WaitGroup
	both.Add(2)
	go func() {
		defer both.Done()
		r.presence, perr = measurePresence(ctx, pres)
	}()
	go func() {
		defer both.Done()
		r.typing, terr = measureTyping(ctx, typ)
	}()
	both.Wait()
	stopEdits()
	edited.Wait()
	r.load = time.Since(loadStart)
	cpu1, _ := cpuSeconds([]int{pid})
	r.cpu = cpu1 - cpu0
	r.rss, _ = rssBytes([]int{pid})
	r.load1 = loadAverages()[0]
	if err := errors.Join(perr, terr); err != nil {
		stopSamples()
		sampled.Wait()
		return r, err
	}
	edits := map[string][]int64{}
	for _, e := range editors {
		edits[e.doc] = e.sent
		r.edits += int64(len(e.sent))
	}
	lastEdit := time.Now().UnixMilli()
	if on {
		// The last windows close a debounce after the last edits; then
		// wait for what is queued, up to --hook-drain.
		deadline := time.Now().Add(*hookDrain)
		settle := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) && ctx.Err() == nil {
			m, err := scrapeMetrics(ctx, metricsURL)
			if err == nil && time.Now().After(settle) && m["tandem_webhook_pending_documents"] == 0 &&
				recv.count() >= int(m["tandem_webhook_events_total"]) {
				break
			}
			time.Sleep(time.Second)
		}
		r.sinceT0 = time.Since(t0)
		r.metrics, _ = scrapeMetrics(ctx, metricsURL)
		r.events, r.arrivals, r.bad, r.maxIn = recv.snapshot()
		r.drained = len(r.events) >= int(r.metrics["tandem_webhook_events_total"]) && *hookDrain > 0
		checkBefore := int64(0)
		if r.drained {
			checkBefore = lastEdit
		}
		r.windows = analyseWindows(r.events, edits, checkBefore, 2000)
	}
	stopSamples()
	sampled.Wait()
	return r, nil
}

// hookEditor is a client that made a document and edits it, as a stock
// client does: it syncs each change and answers what the server sends.
type hookEditor struct {
	*syncPeer
	sent []int64 // when each edit was sent, Unix ms; the editor's own
}

// dialEditors connects n editors, each with a document of its own not
// yet sent.
func dialEditors(url string, n int) ([]*hookEditor, error) {
	var out []*hookEditor
	for range n {
		p, err := dialPeer(url)
		if err != nil {
			return out, fmt.Errorf("editor %d: %w", len(out), err)
		}
		d := automerge.New()
		e := &hookEditor{syncPeer: &syncPeer{peer: p, doc: newDocID(), d: d, state: automerge.NewSyncState(d)}}
		go e.serve(func(*automerge.Doc) {})
		out = append(out, e)
	}
	return out, nil
}

// edit makes the document's first change once start closes, then one
// every 0.5 to 1.5 × every until ctx ends or, if until is not negative,
// until has passed.
func (e *hookEditor) edit(ctx context.Context, start <-chan struct{}, every, until time.Duration) {
	<-start
	e.mu.Lock()
	e.d.RootMap().Set("text", automerge.NewText(""))
	e.change()
	e.mu.Unlock()
	if until >= 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, until)
		defer cancel()
	}
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		t.Reset(time.Duration((0.5 + rand.Float64()) * float64(every)))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		e.mu.Lock()
		e.change()
		e.mu.Unlock()
	}
}

// change types a character and syncs it. The caller holds e.mu.
func (e *hookEditor) change() {
	e.d.Path("text").Text().Append("x")
	e.d.Commit("edit")
	e.sent = append(e.sent, time.Now().UnixMilli())
	e.push()
}

// sampleNode reads the node's webhook metrics, CPU and RSS once a second
// until ctx ends.
func sampleNode(ctx context.Context, metricsURL string, pid int, recv *hookReceiver, t0 time.Time) []hookSample {
	var out []hookSample
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return out
		case <-t.C:
		}
		m, err := scrapeMetrics(ctx, metricsURL)
		if err != nil {
			continue
		}
		cpu, _ := cpuSeconds([]int{pid})
		rss, _ := rssBytes([]int{pid})
		received := 0
		if recv != nil {
			received = recv.count()
		}
		out = append(out, hookSample{
			at: time.Since(t0), depth: m["tandem_webhook_queue_depth"], pending: m["tandem_webhook_pending_documents"],
			dropped: m["tandem_webhook_dropped_total"], decided: m["tandem_webhook_events_total"],
			delivered: m[`tandem_webhook_deliveries_total`], rss: float64(rss), received: received, cpu: cpu,
		})
	}
}

func printHookRun(r hookRun) {
	fmt.Printf("presence steady p99  %v (p50 %v), delivered %d of %d offered\n",
		pct(r.presence.steady, 99), pct(r.presence.steady, 50), r.presence.delivered, r.presence.offered)
	fmt.Printf("typing p99           %v (p50 %v), %d arrivals\n", pct(r.typing.latencies, 99), pct(r.typing.latencies, 50), len(r.typing.latencies))
	fmt.Printf("node                 %.1f s CPU over %v (%.0f%% of a core), RSS %.1f MiB; %d edits of %d documents; load average %.1f\n",
		r.cpu, r.load.Round(time.Second), 100*r.cpu/r.load.Seconds(), float64(r.rss)/(1<<20), r.edits, *hookDocs, r.load1)
	if !r.hooks {
		return
	}
	m := r.metrics
	var dropped []string
	for k, v := range m {
		if strings.HasPrefix(k, "tandem_webhook_dropped_total{") {
			dropped = append(dropped, fmt.Sprintf("%s %.0f", k, v))
		}
	}
	slices.Sort(dropped)
	fmt.Printf("webhooks             %.0f events decided, %d arrived (%d attempts, %d twice or more, %d refused), %.0f queued at the end, %.0f dropped %v, %v after the first edits\n",
		m["tandem_webhook_events_total"], len(r.events), len(r.arrivals), r.windows.duplicates, r.bad,
		m["tandem_webhook_queue_depth"], m["tandem_webhook_dropped_total"], dropped, r.sinceT0.Round(time.Second))
	rates := ratePerSecond(r.arrivals)
	if len(rates) > 0 {
		sorted := slices.Clone(rates)
		slices.Sort(sorted)
		fmt.Printf("  arrivals a second  %.2f over %d s (median second %d, most %d); most in flight at once %d\n",
			float64(len(r.arrivals))/float64(len(rates)), len(rates), sorted[len(sorted)/2], sorted[len(sorted)-1], r.maxIn)
	}
	w := r.windows
	if len(w.perDoc) > 0 {
		fmt.Printf("  windows            %d documents named; events per document min %d, median %d, max %d; longest window %v; %d overlapping\n",
			w.docs, w.perDoc[0], w.perDoc[len(w.perDoc)/2], w.perDoc[len(w.perDoc)-1], w.longest, w.overlaps)
	}
	if w.checked > 0 {
		fmt.Printf("  edits in no window %d of %d\n", w.uncovered, w.checked)
	}
	var maxDepth, maxPending, maxRSS float64
	for _, s := range r.samples {
		maxDepth, maxPending, maxRSS = max(maxDepth, s.depth), max(maxPending, s.pending), max(maxRSS, s.rss)
	}
	fmt.Printf("  queue depth max %.0f, pending documents max %.0f, RSS max %.1f MiB\n", maxDepth, maxPending, maxRSS/(1<<20))
	fmt.Printf("  %6s %8s %8s %8s %8s %8s %8s\n", "t", "decided", "queued", "arrived", "pending", "CPU s", "RSS MiB")
	every := 10
	if len(r.samples) > 120 {
		every = 60
	}
	for i, s := range r.samples {
		if i%every == every-1 || i == len(r.samples)-1 {
			fmt.Printf("  %6s %8.0f %8.0f %8d %8.0f %8.1f %8.1f\n", s.at.Round(time.Second), s.decided, s.depth, s.received, s.pending, s.cpu, s.rss/(1<<20))
		}
	}
}

func printHookSummary(runs []hookRun) {
	var pOn, pOff, tOn, tOff []time.Duration
	for _, r := range runs {
		p, t := pct(r.presence.steady, 99), pct(r.typing.latencies, 99)
		if r.hooks {
			pOn, tOn = append(pOn, p), append(tOn, t)
		} else {
			pOff, tOff = append(pOff, p), append(tOff, t)
		}
	}
	line := func(name string, on, off []time.Duration) {
		mOn, mOff := medianDuration(on), medianDuration(off)
		fmt.Printf("%-18s with %v (%v), without %v (%v): %.2f×\n", name, mOn, on, mOff, off, float64(mOn)/float64(max(mOff, 1)))
	}
	fmt.Println("== webhooks / none, medians (runs)")
	line("presence steady p99", pOn, pOff)
	line("typing p99", tOn, tOff)
}

// medianDuration is the median of ds (the lower middle of an even count).
func medianDuration(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}
