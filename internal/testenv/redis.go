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
		cmd.Wait()
		t.Fatal("redis-server did not start")
	}
	r := &Redis{Port: port, cmd: cmd}
	t.Cleanup(r.Stop)
	return r
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
