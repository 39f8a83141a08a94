package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"
)

type options struct {
	urls     []string
	scenario string
	// redisShards > 0 runs a cluster on a Redis Cluster of that many masters.
	redisShards int
	docs        int
	peers       int
	rate        float64
	conns       int
	typists     int
	readers     int
	history     int // typing: changes the document holds before the typing
	duration    time.Duration
	drain       time.Duration
	serverPIDs  []int
	batches     bool
	changes     int
	pasteBytes  int
	batch       int
	steady      time.Duration
	// presence: users who come and go beside the load (churn.go)
	churnRate  float64
	churnUsers int
	churnStay  time.Duration
	// history-query: presence history in PostgreSQL (history.go)
	intervals   int
	historyDocs int
	queries     int
	keepSchema  bool
	reuseSchema string
	// typing under --cluster: counts what the nodes insert into
	// PostgreSQL (nil otherwise)
	store *storeWrites
}

const compareHelp = `run the --scenario against Tandem (--tandem-bin) and the stock
server (--stock-dir, after npm ci there) and print the ratios`

func main() {
	var o options
	var urls string
	flag.StringVar(&urls, "url", "ws://127.0.0.1:8080/ws", "server WebSocket URL; several, comma-separated, spread peers over a cluster")
	flag.StringVar(&o.scenario, "scenario", "presence", "presence, typing, idle, document, history-query or expiry")
	flag.IntVar(&o.docs, "docs", 10, "presence: documents")
	flag.IntVar(&o.peers, "peers", 20, "presence: peers per document")
	flag.Float64Var(&o.rate, "rate", 10, "presence: cursor moves per second per peer")
	flag.Float64Var(&o.churnRate, "churn-rate", 0, "presence: users who come (and, --churn-stay later, go) per second beside the load, in documents of their own; 0: none")
	flag.IntVar(&o.churnUsers, "churn-users", 10000, "presence: the user ids the churning users cycle through")
	flag.DurationVar(&o.churnStay, "churn-stay", 5*time.Second, "presence: how long each churning user stays")
	flag.BoolVar(&o.batches, "batches", true, "presence: peers ask for presence in batches, as Tandem's JS client does (stock servers ignore it); false: one message per update, as stock clients get")
	flag.IntVar(&o.conns, "conns", 1000, "idle: connections")
	flag.IntVar(&o.typists, "typists", 8, "typing: peers typing (at --rate chars/s each)")
	flag.IntVar(&o.readers, "readers", 40, "typing: peers reading")
	flag.IntVar(&o.history, "history", 0, "typing: changes the document holds before the typing starts, one character each")
	flag.IntVar(&o.changes, "changes", 20000, "document: one-character changes the writer makes")
	flag.IntVar(&o.batch, "batch", 1, "document: changes the writer may make ahead of what it sent (1: one change a message, a typist slower than a round trip)")
	flag.IntVar(&o.pasteBytes, "paste-bytes", 1<<20, "document: bytes of text pasted in one change")
	flag.DurationVar(&o.steady, "steady", 10*time.Second, "document: how long a typist edits on, a reader following; the steady RSS is the median of readings once a second over its second half (0: not read)")
	flag.IntVar(&o.intervals, "intervals", 50_000_000, "history-query: presence intervals generated over a year in --postgres-url")
	flag.IntVar(&o.historyDocs, "history-docs", 10000, "history-query: documents the intervals are spread over, the k-th busiest holding about 1/k of the busiest's")
	flag.IntVar(&o.queries, "queries", 1000, "history-query: queries of each kind")
	flag.BoolVar(&o.keepSchema, "keep-schema", false, "history-query: keep the generated schema, for --reuse-schema")
	flag.StringVar(&o.reuseSchema, "reuse-schema", "", "history-query: query this schema, kept by an earlier run, instead of generating one (it is kept)")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "how long to apply the load")
	flag.DurationVar(&o.drain, "drain", 2*time.Second, "presence: how long to wait for the last deliveries; expiry: for the events still due (give it minutes)")
	var pids string
	flag.StringVar(&pids, "server-pid", "", "server process(es), comma-separated, to read CPU and RSS of (/proc); a cluster's are summed")
	cluster := flag.Int("cluster", 0, clusterHelp)
	flag.IntVar(&o.redisShards, "redis-shards", 0, redisShardsHelp)
	ttlKeys := flag.Int("ttl-keys", 10000, ttlKeysHelp)
	postgresURL := flag.String("postgres-url", "postgres://postgres@127.0.0.1:5432/test", "cluster and soak: the nodes' shared PostgreSQL (a cluster's in a schema of its own); history-query: where it makes its schema")
	compare := flag.Bool("compare", false, compareHelp)
	tandemBin := flag.String("tandem-bin", "./bin/tandem", "compare: the tandem binary")
	tandemFlags := flag.String("tandem-flags", "", "compare: more flags for the tandem binary, space-separated (e.g. \"--presence-tick 100ms\")")
	stockDir := flag.String("stock-dir", "cmd/tandem-bench/stock", "compare: the stock server's folder")
	soak := flag.Bool("soak", false, soakHelp)
	ghostBound := flag.Duration("ghost-bound", 15*time.Second, "soak: how long after a peer left a node may still show it (node TTL plus three rosters, with a margin)")
	cpuProfile := flag.String("cpuprofile", "", "write the load generator's own CPU profile to this file")
	flag.StringVar(&serverLogDir, "server-logs", "", "append the output of every server the tool starts to <dir>/<name>.log")
	flag.Parse()
	if o.scenario == "idle" {
		raiseFileLimit(uint64(o.conns) + 512) // the server's side too, for --compare
	}
	if serverLogDir != "" {
		// Made here rather than failing at the first server, minutes in.
		if err := os.MkdirAll(serverLogDir, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "tandem-bench: --server-logs:", err)
			os.Exit(2)
		}
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "tandem-bench: --cpuprofile:", err)
			os.Exit(2)
		}
		defer pprof.StopCPUProfile()
	}
	o.urls = strings.Split(urls, ",")
	for _, f := range strings.FieldsFunc(pids, func(r rune) bool { return r == ',' }) {
		pid, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			fmt.Fprintln(os.Stderr, "tandem-bench: --server-pid:", err)
			os.Exit(2)
		}
		o.serverPIDs = append(o.serverPIDs, pid)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var err error
	switch {
	case *soak:
		err = runSoak(ctx, o, *tandemBin, max(*cluster, 2), *postgresURL, *ghostBound)
	case *cluster > 0:
		err = runCluster(ctx, o, *tandemBin, *cluster, *postgresURL)
	case *compare:
		err = runCompare(ctx, o, *tandemBin, strings.Fields(*tandemFlags), *stockDir)
	case o.scenario == "presence":
		err = runPresence(ctx, o)
	case o.scenario == "typing":
		err = runTyping(ctx, o)
	case o.scenario == "idle":
		err = runIdle(ctx, o)
	case o.scenario == "document":
		err = runDocument(ctx, o)
	case o.scenario == "history-query":
		err = runHistoryQuery(ctx, o, *postgresURL)
	case o.scenario == "webhooks":
		err = runWebhooks(ctx, o, *tandemBin, strings.Fields(*tandemFlags), *postgresURL)
	case o.scenario == "expiry":
		err = runExpiry(ctx, o, *ttlKeys, o.drain)
	default:
		err = fmt.Errorf("unknown scenario %q", o.scenario)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tandem-bench:", err)
		os.Exit(1)
	}
}
