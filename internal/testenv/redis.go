package testenv

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// RedisAddr is the shared Redis the tests use: $TANDEM_TEST_REDIS, by
// default the machine's own. A test that cannot reach it fails.
func RedisAddr() string {
	if a := os.Getenv("TANDEM_TEST_REDIS"); a != "" {
		return a
	}
	return "127.0.0.1:6379"
}

// Redis is a redis-server of one test's own, on a port of its own, that
// keeps nothing on disk: stop it and start it again to simulate an outage
// (it then comes back empty).
type Redis struct {
	Port int
	cmd  *exec.Cmd
}

// StartRedis starts redis-server on port, or on a free port if port is 0,
// and waits until it accepts connections. It is stopped when the test
// ends.
func StartRedis(t testing.TB, port int) *Redis {
	t.Helper()
	port, cmd := startRedisServer(t, port)
	r := &Redis{Port: port, cmd: cmd}
	t.Cleanup(r.Stop)
	return r
}

// startRedisServer runs redis-server on port (a free one for 0) that keeps
// nothing on disk, with the extra arguments, and returns once it accepts
// connections. The caller stops it.
func startRedisServer(t testing.TB, port int, extra ...string) (int, *exec.Cmd) {
	t.Helper()
	if port == 0 {
		port = freePort(t)
	}
	args := append([]string{"--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"}, extra...)
	cmd := exec.Command("redis-server", args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("redis-server is required for this test: %v", err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		said := false
		for sc.Scan() { // read to the end: a full pipe would stall the server
			if !said && strings.Contains(sc.Text(), "Ready to accept connections") {
				said = true
				close(ready)
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("redis-server %v did not start", extra)
	}
	return port, cmd
}

// freePort is a port nothing listens on now.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Addr is the server's host:port.
func (r *Redis) Addr() string { return fmt.Sprintf("127.0.0.1:%d", r.Port) }

// Stop kills the server; safe to call twice.
func (r *Redis) Stop() {
	if r.cmd.ProcessState == nil {
		r.cmd.Process.Kill()
		r.cmd.Wait()
	}
}
