package redisbus

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tandemhq/tandem/internal/testenv"

	"github.com/redis/go-redis/v9"
)

func TestNotifyPusherResyncsFollowedUsersAfterRedisReturns(t *testing.T) {
	r := testenv.StartRedis(t, 0)
	client := redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1})
	defer client.Close()
	p, err := NewNotifyPusher(client, testenv.QuietLogger())
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var delivered []string
	resynced := make(chan string, 10)
	p.Attach(func(user string, push []byte) {
		mu.Lock()
		delivered = append(delivered, user+":"+string(push))
		mu.Unlock()
	}, func(user string) { resynced <- user })
	done := make(chan struct{})
	go func() { defer close(done); p.Run(context.Background()) }()
	defer func() { p.Close(context.Background()); <-done }()
	p.Follow("ana", true)
	p.Follow("ana", true) // two tabs
	p.Follow("ana", false)

	// Published until it arrives: the subscription is made asynchronously.
	waitDelivered := func(want string) {
		t.Helper()
		got := "" // at the last look
		defer func() {
			if !strings.Contains(got, "ana:"+want) {
				t.Logf("delivered: %q", got)
			}
		}()
		testenv.WaitWithin(t, fmt.Sprintf("%q delivered", want), 20*time.Second, func() bool {
			p.Publish(context.Background(), "ana", []byte(want))
			mu.Lock()
			got = strings.Join(delivered, " ")
			mu.Unlock()
			return strings.Contains(got, "ana:"+want)
		})
	}
	waitDelivered("one")
	select {
	case u := <-resynced:
		t.Fatalf("resync of %s before any outage", u)
	default:
	}

	// Redis goes away and comes back on the same port.
	r.Stop()
	testenv.StartRedis(t, r.Port)
	select {
	case u := <-resynced:
		if u != "ana" {
			t.Fatalf("resynced %q", u)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no resync after Redis came back")
	}
	waitDelivered("two")
}

// On a Redis Cluster a push travels on the user's sharded channel.
func TestNotifyPusherOnARedisCluster(t *testing.T) {
	c := testenv.StartRedisCluster(t, 3)
	p, err := NewNotifyPusher(c.Client(t), testenv.QuietLogger())
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 100)
	p.Attach(func(user string, push []byte) { got <- user + ":" + string(push) }, func(string) {})
	done := make(chan struct{})
	go func() { defer close(done); p.Run(context.Background()) }()
	defer func() { p.Close(context.Background()); <-done }()
	p.Follow("ana", true)
	// Published until it arrives: the subscription is made asynchronously.
	testenv.WaitWithin(t, "a push delivered over the cluster", 20*time.Second, func() bool {
		if err := p.Publish(context.Background(), "ana", []byte("hi")); err != nil {
			t.Fatal(err)
		}
		select {
		case g := <-got:
			if g != "ana:hi" {
				t.Fatalf("delivered %q", g)
			}
			return true
		case <-time.After(50 * time.Millisecond):
			return false
		}
	})
}
