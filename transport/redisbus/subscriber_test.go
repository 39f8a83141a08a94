package redisbus

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/tandemhq/tandem/internal/testenv"
)

// freezer dials connections that it can make go silent: a frozen
// subscription connection stays open and writable but brings nothing
// more, as one behind a stuck proxy or a half-dead NAT entry would.
type freezer struct {
	mu    sync.Mutex
	conns []*freezable
}

func (f *freezer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	fc := &freezable{Conn: c}
	fc.cond = sync.NewCond(&fc.mu)
	f.mu.Lock()
	f.conns = append(f.conns, fc)
	f.mu.Unlock()
	return fc, nil
}

// freeze silences the subscription connections open now.
func (f *freezer) freeze() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns {
		c.mu.Lock()
		c.frozen = c.subscriber
		c.mu.Unlock()
	}
}

type freezable struct {
	net.Conn
	mu         sync.Mutex
	cond       *sync.Cond
	subscriber bool // it asked to subscribe
	frozen     bool
	closed     bool
}

func (c *freezable) Write(p []byte) (int, error) {
	if bytes.Contains(bytes.ToLower(p), []byte("subscribe")) {
		c.mu.Lock()
		c.subscriber = true
		c.mu.Unlock()
	}
	return c.Conn.Write(p)
}

func (c *freezable) Read(p []byte) (int, error) {
	c.mu.Lock()
	for c.frozen && !c.closed {
		c.cond.Wait()
	}
	c.mu.Unlock()
	return c.Conn.Read(p)
}

func (c *freezable) Close() error {
	c.mu.Lock()
	c.closed = true
	c.cond.Broadcast()
	c.mu.Unlock()
	return c.Conn.Close()
}

// A subscription connection that stops delivering while it looks healthy
// (no error, no close) is noticed by its probe and replaced; the channel
// is told resumed, and what is published next arrives.
func TestASilentSubscriptionIsReplaced(t *testing.T) {
	f := &freezer{}
	client := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(), Dialer: f.dial})
	t.Cleanup(func() { client.Close() })
	channel := fmt.Sprint("silent-test-", time.Now().UnixNano())
	ready := make(chan bool, 10)
	got := make(chan string, 10)
	redone := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "redone"}, []string{"reason"})
	s, err := newSubscriber(subscriberConfig{
		client: client, log: testenv.QuietLogger(), probeEvery: 100 * time.Millisecond, redone: redone,
		deliver: func(ch, payload string) {
			if ch == channel {
				got <- payload
			}
		},
		ready: func(ch string, resumed bool) {
			if ch == channel {
				ready <- resumed
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	s.add(channel)
	if resumed := <-ready; resumed {
		t.Fatal("the first subscription told resumed")
	}
	f.freeze()
	select {
	case resumed := <-ready:
		if !resumed {
			t.Fatal("the subscription came back not told resumed")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the silent connection was not replaced")
	}
	if n := testutil.ToFloat64(redone.WithLabelValues("silent")); n != 1 {
		t.Fatalf("redone{silent} = %v, want 1", n)
	}
	other := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr()})
	t.Cleanup(func() { other.Close() })
	if err := other.Publish(context.Background(), channel, "after").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-got:
		if p != "after" {
			t.Fatalf("delivered %q", p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("nothing delivered on the new connection")
	}
}

// Slots and hash tags as Redis Cluster computes them (CLUSTER KEYSLOT).
func TestSlotOf(t *testing.T) {
	for name, want := range map[string]int{
		"foo": 12182, "123456789": 12739, "{user1000}.following": 3443, "{user1000}.followers": 3443,
		"foo{}{bar}": 8363, "foo{{bar}}zap": 4015, "foo{bar}{zap}": 5061,
	} {
		if got := slotOf(name); got != want {
			t.Errorf("slotOf(%q) = %d, want %d", name, got, want)
		}
	}
	for slot := range slotCount {
		if got := slotOf("{" + tagFor(slot) + "}x"); got != slot {
			t.Fatalf("tagFor(%d) falls on slot %d", slot, got)
		}
	}
}

// syncBuffer is a log destination tests read while loggers write.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A cluster client pointed at a Redis that is not a cluster (a mistaken
// --redis-cluster): the subscriber says so, once, at warning level.
func TestASubscriberOnARedisThatIsNoClusterSaysSo(t *testing.T) {
	var logs syncBuffer
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{testenv.RedisAddr()}})
	t.Cleanup(func() { client.Close() })
	s, err := newSubscriber(subscriberConfig{
		client: client, log: slog.New(slog.NewTextHandler(&logs, nil)),
		deliver: func(string, string) {}, ready: func(string, bool) {},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	s.add("some-channel")
	testenv.WaitFor(t, "the warning", func() bool {
		return strings.Contains(logs.String(), "is --redis-url a Redis Cluster's?")
	})
	readAt := func() time.Time { s.mu.Lock(); defer s.mu.Unlock(); return s.readAt }
	for range 2 { // the second attempt has ended once a third begins
		last := readAt()
		testenv.WaitFor(t, "another attempt to read the shards", func() bool { return readAt().After(last) })
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 {
		t.Fatalf("%d warnings, want one:\n%s", n, logs.String())
	}
}
