package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The expiry scenario answers how late Redis tells of a key's expiry
// (keyspace notifications, `expired` events) when other keys with a TTL
// sit beside it: the question behind building presence on expiry events
// rather than on heartbeats and TTLs read by the nodes.
//
// A private redis-server (default settings, hz 10) holds --ttl-keys keys
// that expire in an hour or more. Every 100 ms a probe key is set to expire
// in 1 s; the run listens on __keyevent@0__:expired and measures, per
// probe, how long after its TTL the event came. Probes are made for
// --duration; then the run waits up to --drain for the last ones.

const ttlKeysHelp = "expiry: keys with a TTL beside the probes (how late are Redis's expired events among them)"

func runExpiry(ctx context.Context, o options, keys int, drain time.Duration) error {
	srv, err := startServer("redis-server", "Ready to accept connections", "",
		"redis-server", "--port", "{port}", "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--notify-keyspace-events", "Ex")
	if err != nil {
		return fmt.Errorf("redis-server: %w", err)
	}
	defer srv.stop()
	c := redis.NewClient(&redis.Options{Addr: strings.TrimPrefix(srv.url, "ws://")})
	defer c.Close()

	for i := 0; i < keys; i += 1000 {
		pipe := c.Pipeline()
		for j := i; j < min(i+1000, keys); j++ {
			pipe.Set(ctx, fmt.Sprint("other:", j), "x", time.Hour+time.Duration(rand.IntN(3600))*time.Second)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
	}
	ps := c.Subscribe(ctx, "__keyevent@0__:expired")
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil { // the confirmation
		return err
	}

	var mu sync.Mutex
	due := map[string]time.Time{}
	var late []time.Duration
	go func() { // until ps closes
		for m := range ps.Channel() {
			at := time.Now()
			mu.Lock()
			if d, ok := due[m.Payload]; ok {
				late = append(late, at.Sub(d))
				delete(due, m.Payload)
			}
			mu.Unlock()
		}
	}()

	fmt.Printf("== expiry: %d keys with a TTL of 1-2 h beside probes that expire after 1 s, one every 100 ms for %v\n", keys, o.duration)
	start := time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	for n := 0; time.Since(start) < o.duration; n++ {
		key := fmt.Sprint("probe:", n)
		mu.Lock()
		due[key] = time.Now().Add(time.Second)
		mu.Unlock()
		if err := c.Set(ctx, key, "x", time.Second).Err(); err != nil {
			tick.Stop()
			return err
		}
		select {
		case <-ctx.Done():
			tick.Stop()
			return ctx.Err()
		case <-tick.C:
		}
	}
	tick.Stop()
	made := 0
	wait := time.Now().Add(drain)
	for time.Now().Before(wait) {
		mu.Lock()
		left := len(due)
		made = left + len(late)
		mu.Unlock()
		if left == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond) // polling the count of events still due
	}
	mu.Lock()
	got := append([]time.Duration(nil), late...)
	missing := len(due)
	mu.Unlock()
	sort.Slice(got, func(i, j int) bool { return got[i] < got[j] })
	q := func(p float64) time.Duration {
		if len(got) == 0 {
			return 0
		}
		return got[min(len(got)-1, int(p*float64(len(got))))].Round(time.Millisecond)
	}
	fmt.Printf("probes               %d, reported %d, not reported within %v of the last %d\n", made, len(got), drain, missing)
	fmt.Printf("lateness             p50 %v  p90 %v  p99 %v  max %v\n", q(0.5), q(0.9), q(0.99), q(1))
	return nil
}
