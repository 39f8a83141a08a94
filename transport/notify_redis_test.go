package transport

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// privateRedis runs redis-server on a port of its own; stop and start it
// again to simulate an outage.
type privateRedis struct {
	t    *testing.T
	port int
	cmd  *exec.Cmd
}

func startPrivateRedis(t *testing.T, port int) *privateRedis {
	t.Helper()
	if port == 0 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
	}
	cmd := exec.Command("redis-server", "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("redis-server is required for this test: %v", err)
	}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "Ready to accept connections") {
				ready <- true
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		t.Fatal("redis-server did not start")
	}
	r := &privateRedis{t: t, port: port, cmd: cmd}
	t.Cleanup(r.stop)
	return r
}

func (r *privateRedis) stop() {
	if r.cmd.ProcessState == nil {
		r.cmd.Process.Kill()
		r.cmd.Wait()
	}
}

func TestNotifyPusherResyncsFollowedUsersAfterRedisReturns(t *testing.T) {
	r := startPrivateRedis(t, 0)
	client := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", r.port), MaxRetries: -1})
	defer client.Close()
	p := NewNotifyPusher(client, slog.New(slog.NewTextHandler(io.Discard, nil)))
	var mu sync.Mutex
	var delivered []string
	resynced := make(chan string, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Run(ctx, func(user string, push []byte) {
			mu.Lock()
			delivered = append(delivered, user+":"+string(push))
			mu.Unlock()
		}, func(user string) { resynced <- user })
	}()
	defer func() { cancel(); <-done }()
	p.Follow("ana", true)
	p.Follow("ana", true) // two tabs
	p.Follow("ana", false)

	// Published until it arrives: the subscription is made asynchronously.
	waitDelivered := func(want string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			p.Publish(context.Background(), "ana", []byte(want))
			mu.Lock()
			got := strings.Join(delivered, " ")
			mu.Unlock()
			if strings.Contains(got, "ana:"+want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%q not delivered; got %q", want, got)
			}
			time.Sleep(20 * time.Millisecond) // polling a condition across a network round trip
		}
	}
	waitDelivered("one")
	select {
	case u := <-resynced:
		t.Fatalf("resync of %s before any outage", u)
	default:
	}

	// Redis goes away and comes back on the same port.
	r.stop()
	startPrivateRedis(t, r.port)
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
