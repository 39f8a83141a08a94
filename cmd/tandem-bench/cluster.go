package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

const clusterHelp = `start a cluster of this many Tandem nodes (--tandem-bin) on a
private redis-server and a schema of the run's own in --postgres-url, spread
the --scenario's peers over them and report their CPU and RSS summed (typing:
and the rows and bytes the nodes inserted into the store per change)`

const redisShardsHelp = `with --cluster: run the nodes on a private Redis Cluster of this many
masters (at least 3, no replicas) instead of one redis-server, and report
each master's CPU and messages`

// redisProc is one redis-server of a run, with what it is counted by.
type redisProc struct {
	srv  *server
	addr string
}

// runCluster runs one scenario against n Tandem nodes that share a
// redis-server and a PostgreSQL schema of their own: peers are dealt to
// the nodes in turn, so most of what a peer sees crosses Redis.
func runCluster(ctx context.Context, o options, tandemBin string, n int, postgresURL string) error {
	_, err := measureCluster(ctx, o, tandemBin, n, postgresURL)
	return err
}

// measureCluster is runCluster that also returns a presence scenario's
// result.
func measureCluster(ctx context.Context, o options, tandemBin string, n int, postgresURL string) (presenceResult, error) {
	dataDir, err := os.MkdirTemp("", "tandem-bench-cluster-")
	if err != nil {
		return presenceResult{}, err
	}
	defer os.RemoveAll(dataDir)
	redises, redisURL, err := startRedises(ctx, o.redisShards, 0, dataDir)
	for _, r := range redises {
		defer r.srv.stop()
	}
	if err != nil {
		return presenceResult{}, err
	}
	store, err := newStoreWrites(ctx, postgresURL)
	if err != nil {
		return presenceResult{}, err
	}
	defer func() {
		if err := store.drop(); err != nil {
			fmt.Fprintln(os.Stderr, "tandem-bench:", err)
		}
	}()
	var redisFlags []string
	if o.redisShards > 0 {
		redisFlags = []string{"--redis-cluster"}
	}
	run := o
	run.urls, run.serverPIDs = nil, nil
	for i := range n {
		args := append([]string{tandemBin,
			"--addr", "127.0.0.1:{port}", "--node-id", fmt.Sprintf("bench-%d", i+1),
			"--redis-url", redisURL, "--postgres-url", store.url,
			"--data-dir", filepath.Join(dataDir, fmt.Sprint(i+1)), "--log-level", "info",
			"--max-conns-per-ip", "1000000", "--message-rate", "1000", "--message-burst", "2000"}, redisFlags...)
		node, err := startServer(fmt.Sprintf("node %d", i+1), "tandem serving", "/ws", args...)
		if err != nil {
			return presenceResult{}, err
		}
		defer node.stop()
		run.urls = append(run.urls, node.url)
		run.serverPIDs = append(run.serverPIDs, node.cmd.Process.Pid)
	}
	if err := store.count(ctx); err != nil { // the nodes have made the tables
		return presenceResult{}, err
	}
	run.store = store
	// Redis's CPU at rest first (cron, the cluster's own gossip, the
	// nodes' heartbeats and probes), to tell what the scenario adds.
	rest := redisCounts(ctx, redises)
	time.Sleep(redisRest)
	before := redisCounts(ctx, redises)
	started := time.Now()
	fmt.Printf("== cluster of %d nodes (CPU and RSS below are their sums)\n", n)
	var presence presenceResult
	switch o.scenario {
	case "presence":
		if presence, err = measurePresence(ctx, run); err == nil {
			printPresence(presence, run)
		}
	case "typing":
		var r typingResult
		if r, err = measureTyping(ctx, run); err == nil {
			printTyping(r, run)
		}
	case "idle":
		var r idleResult
		if r, err = measureIdle(ctx, run); err == nil {
			printIdle(r)
		}
	default:
		err = fmt.Errorf("unknown scenario %q", o.scenario)
	}
	if err != nil {
		return presenceResult{}, err
	}
	printRedis(redises, rest, before, redisCounts(ctx, redises), time.Since(started))
	return presence, nil
}

// startRedises starts one redis-server, or with shards ≥ 3 a Redis Cluster
// of that many masters with replicas replicas each (the masters first),
// keeping nothing on disk but the cluster's configuration in dir; it
// returns the URL the nodes are given. A cluster's nodes take a silent
// master for failed after 2 s.
func startRedises(ctx context.Context, shards, replicas int, dir string) ([]redisProc, string, error) {
	base := []string{"redis-server", "--port", "{port}", "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"}
	if shards == 0 {
		srv, err := startServer("redis-server", "Ready to accept connections", "", base...)
		if err != nil {
			return nil, "", fmt.Errorf("redis-server: %w", err)
		}
		addr := strings.TrimPrefix(srv.url, "ws://")
		return []redisProc{{srv, addr}}, "redis://" + addr, nil
	}
	if shards < 3 {
		return nil, "", fmt.Errorf("--redis-shards %d: a Redis Cluster needs at least 3 masters", shards)
	}
	var procs []redisProc
	var addrs []string
	for i := range shards * (1 + replicas) {
		srv, err := startServer(fmt.Sprintf("redis-shard-%d", i+1), "Ready to accept connections", "",
			append(base, "--cluster-enabled", "yes", "--cluster-config-file", "nodes-{port}.conf", "--dir", dir,
				"--cluster-node-timeout", "2000", "--cluster-replica-validity-factor", "0", "--repl-diskless-sync-delay", "0")...)
		if err != nil {
			return procs, "", fmt.Errorf("redis-server: %w", err)
		}
		addr := strings.TrimPrefix(srv.url, "ws://")
		procs = append(procs, redisProc{srv, addr})
		addrs = append(addrs, addr)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	if out, err := exec.CommandContext(ctx, "redis-cli", append(args, "--cluster-replicas", fmt.Sprint(replicas), "--cluster-yes")...).CombinedOutput(); err != nil {
		return procs, "", fmt.Errorf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, a := range addrs {
		if err := clusterOK(ctx, a, 30*time.Second); err != nil {
			return procs, "", err
		}
	}
	q := url.Values{}
	for _, a := range addrs[1:] {
		q.Add("addr", a)
	}
	return procs, "redis://" + addrs[0] + "?" + q.Encode(), nil
}

// clusterOK waits until the Redis Cluster node at addr says the cluster is
// ok, or within.
func clusterOK(ctx context.Context, addr string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		c := redis.NewClient(&redis.Options{Addr: addr})
		info, err := c.ClusterInfo(ctx).Result()
		c.Close()
		if err == nil && strings.Contains(info, "cluster_state:ok") {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("the Redis Cluster at %s is not ok after %v", addr, within)
		}
		time.Sleep(100 * time.Millisecond) // polling the cluster's state
	}
}

// redisCount is what one redis-server did so far.
type redisCount struct {
	cpu       float64 // seconds
	published int64   // PUBLISH and SPUBLISH calls
}

func redisCounts(ctx context.Context, procs []redisProc) []redisCount {
	out := make([]redisCount, len(procs))
	for i, p := range procs {
		out[i].cpu, _ = cpuSeconds([]int{p.srv.cmd.Process.Pid})
		c := redis.NewClient(&redis.Options{Addr: p.addr})
		stats, err := c.Info(ctx, "commandstats").Result()
		c.Close()
		if err != nil {
			continue
		}
		for _, line := range strings.Split(stats, "\n") {
			for _, cmd := range []string{"cmdstat_publish:calls=", "cmdstat_spublish:calls="} {
				if rest, ok := strings.CutPrefix(strings.TrimSpace(line), cmd); ok {
					n, _ := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
					out[i].published += n
				}
			}
		}
	}
	return out
}

// redisRest is how long Redis's CPU at rest is measured before a run.
const redisRest = 3 * time.Second

// printRedis reports each redis-server's CPU and messages over the run,
// and its CPU per message published to it beyond its CPU at rest (the
// rate measured over redisRest before the run); from that, the messages
// a second it could take on one core.
func printRedis(procs []redisProc, rest, before, after []redisCount, took time.Duration) {
	for i := range procs {
		cpu := after[i].cpu - before[i].cpu
		msgs := after[i].published - before[i].published
		idle := (before[i].cpu - rest[i].cpu) / redisRest.Seconds() * took.Seconds()
		per := 0.0
		if msgs > 0 {
			per = max(cpu-idle, 0) / float64(msgs)
		}
		name := "redis-server"
		if len(procs) > 1 {
			name = fmt.Sprintf("redis shard %d", i+1)
		}
		fmt.Printf("%-20s CPU %.2f s (%.2f s at rest), %d messages published, %.1f µs CPU per message beyond rest",
			name, cpu, idle, msgs, per*1e6)
		if per > 0 {
			fmt.Printf(", ~%.0fk messages/s on one core", 1/per/1000)
		}
		fmt.Println()
	}
}
