package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

const clusterHelp = `start a cluster of this many Tandem nodes (--tandem-bin) on a
private redis-server and --postgres-url, spread the --scenario's peers over
them and report their CPU and RSS summed`

// runCluster runs one scenario against n Tandem nodes that share a
// redis-server of their own and PostgreSQL: peers are dealt to the nodes in
// turn, so most of what a peer sees crosses Redis.
func runCluster(ctx context.Context, o options, tandemBin string, n int, postgresURL string) error {
	_, err := measureCluster(ctx, o, tandemBin, n, postgresURL)
	return err
}

// measureCluster is runCluster that also returns a presence scenario's
// result.
func measureCluster(ctx context.Context, o options, tandemBin string, n int, postgresURL string) (presenceResult, error) {
	redis, err := startServer("redis-server", "Ready to accept connections", "",
		"redis-server", "--port", "{port}", "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err != nil {
		return presenceResult{}, fmt.Errorf("redis-server: %w", err)
	}
	defer redis.stop()
	redisURL := "redis://" + strings.TrimPrefix(redis.url, "ws://")
	dataDir, err := os.MkdirTemp("", "tandem-bench-cluster-")
	if err != nil {
		return presenceResult{}, err
	}
	defer os.RemoveAll(dataDir)
	run := o
	run.urls, run.serverPIDs = nil, nil
	for i := range n {
		node, err := startServer(fmt.Sprintf("node %d", i+1), "tandem serving", "/ws", tandemBin,
			"--addr", "127.0.0.1:{port}", "--node-id", fmt.Sprintf("bench-%d", i+1),
			"--redis-url", redisURL, "--postgres-url", postgresURL,
			"--data-dir", filepath.Join(dataDir, fmt.Sprint(i+1)), "--log-level", "info",
			"--max-conns-per-ip", "1000000", "--message-rate", "1000", "--message-burst", "2000")
		if err != nil {
			return presenceResult{}, err
		}
		defer node.stop()
		run.urls = append(run.urls, node.url)
		run.serverPIDs = append(run.serverPIDs, node.cmd.Process.Pid)
	}
	redisPID := []int{redis.cmd.Process.Pid}
	redisCPU0, _ := cpuSeconds(redisPID)
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
	redisCPU1, _ := cpuSeconds(redisPID)
	fmt.Printf("redis-server CPU     %.2f s\n", redisCPU1-redisCPU0)
	return presence, nil
}
