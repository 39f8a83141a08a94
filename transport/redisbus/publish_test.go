package redisbus

import (
	"bytes"
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/tandemhq/tandem/internal/testenv"
)

// slowRedis is a proxy to the test Redis that passes what clients send at
// rate bytes a second while slow is set: a Redis that answers, slowly.
type slowRedis struct {
	ln    net.Listener
	slow  atomic.Bool
	rate  int
	wg    sync.WaitGroup
	mu    sync.Mutex // guards conns
	conns []net.Conn
}

func startSlowRedis(t *testing.T, rate int) *slowRedis {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &slowRedis{ln: ln, rate: rate}
	p.slow.Store(true)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r, err := net.Dial("tcp", testenv.RedisAddr())
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, r)
			p.mu.Unlock()
			p.wg.Add(2)
			go func() { defer p.wg.Done(); p.pace(r, c); r.Close() }()
			go func() { defer p.wg.Done(); io.Copy(c, r); c.Close() }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// pace copies src to dst, a chunk at a time, each at most rate/10 bytes
// and followed by a tenth of a second while slow: the workload of a Redis
// slower than the node, not a wait for anything.
func (p *slowRedis) pace(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		chunk := buf
		if p.slow.Load() {
			chunk = buf[:min(len(buf), p.rate/10)]
		}
		n, err := src.Read(chunk)
		if n > 0 {
			if _, werr := dst.Write(chunk[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
		if p.slow.Load() {
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// waitingBytes is what the bus's queue and lanes hold, in the bytes of
// size-byte messages (the only kind the test sends): what the bound is to
// hold, whoever counts it.
func waitingBytes(b *Bus, size int) int64 {
	b.pmu.Lock()
	n := len(b.out)
	for _, l := range b.lanes {
		n += len(l.waiting)
	}
	b.pmu.Unlock()
	return int64(n * size)
}

// The publish queue and the shards' lanes were bounded in messages only:
// against a slow Redis, 64 KiB ephemerals could pile up to a gigabyte in
// them. Their bytes are bounded too, charged before a message is queued
// and given back when it is published or dropped; a leave is still never
// dropped for the bound.
func TestThePublishQueueIsBoundedInBytes(t *testing.T) {
	const bound = 2 << 20
	proxy := startSlowRedis(t, 256<<10)
	client := redis.NewClient(&redis.Options{Addr: proxy.ln.Addr().String()})
	t.Cleanup(func() { client.Close() })
	b, err := New(Config{Client: client, NodeID: "bytes", Queue: 128, QueueBytes: bound, Logger: testenv.QuietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(context.Background()) })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); b.publishLoop(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	payload := bytes.Repeat([]byte{0x40}, 64<<10)
	doc := "bytes-" + time.Now().Format("150405.000000000")
	size := len(payload) + len(docChannel(doc)) + 8 // what an encoded message weighs, at least
	var peak int64
	for range 512 {
		b.PublishPresence(doc, payload, false)
		peak = max(peak, waitingBytes(b, size))
	}
	if peak > bound+int64(size) {
		t.Errorf("the queue and lanes held %d bytes, over the bound of %d", peak, bound)
	}
	dropped := testutil.ToFloat64(b.dropped)
	if dropped == 0 {
		t.Fatal("nothing dropped: the test's Redis was not slow enough to fill the queue")
	}
	t.Logf("512 messages of 64 KiB against a slow Redis: peak %d bytes waiting, %v dropped", peak, dropped)

	// A leave is never dropped for the bound.
	b.PublishPresence(doc, []byte("a goodbye"), true)
	if n := testutil.ToFloat64(b.dropped); n != dropped {
		t.Fatalf("dropped %v, want still %v: a leave was dropped", n, dropped)
	}

	// Redis catches up: everything is published or dropped, and the
	// bytes are given back.
	proxy.slow.Store(false)
	testenv.WaitFor(t, "the queue published", func() bool {
		return waitingBytes(b, size) == 0 && b.queued.Load() == 0 &&
			testutil.ToFloat64(b.published)+testutil.ToFloat64(b.dropped) == 513
	})
}
