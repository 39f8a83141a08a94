package testenv

import (
	"bufio"
	"fmt"
	"math/rand/v2"
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
	port, cmd := startRedisServer(t, port, func(int) []string { return nil })
	r := &Redis{Port: port, cmd: cmd}
	t.Cleanup(r.Stop)
	return r
}

// startRedisServer runs redis-server on port (a free one for 0) that keeps
// nothing on disk, with the arguments extra gives for the port, and
// returns once it accepts connections. The caller stops it.
//
// A port found free can be taken before the server binds it (by another
// test's server, or by the kernel for a connection's local end), and a
// cluster node also binds its bus port, port+10000. So ports are picked
// outside the kernel's range for local ends, and a server that exits
// without listening is started again on another port.
func startRedisServer(t testing.TB, port int, extra func(port int) []string) (int, *exec.Cmd) {
	t.Helper()
	const tries = 5
	for try := 1; ; try++ {
		p := port
		if port == 0 {
			p = redisPort(t)
		}
		cmd, err := launchRedis(p, extra(p))
		if err == nil {
			return p, cmd
		}
		if port != 0 || try == tries {
			t.Fatalf("redis-server on port %d did not start: %v", p, err)
		}
	}
}

// launchRedis starts redis-server on port and waits until it says it
// accepts connections. If it exits first, or says nothing for 20 s, the
// error holds what it printed.
func launchRedis(port int, extra []string) (*exec.Cmd, error) {
	args := append([]string{"--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"}, extra...)
	cmd := exec.Command("redis-server", args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("redis-server is required for this test: %w", err)
	}
	ready := make(chan struct{})
	ended := make(chan string, 1) // what it printed before ready, once its output ends
	go func() {
		sc := bufio.NewScanner(out)
		said := false
		var printed []string
		for sc.Scan() { // read to the end: a full pipe would stall the server
			if said {
				continue
			}
			if strings.Contains(sc.Text(), "Ready to accept connections") {
				said = true
				close(ready)
				continue
			}
			if len(printed) < 40 {
				printed = append(printed, sc.Text())
			}
		}
		ended <- strings.Join(printed, "\n")
	}()
	fail := func(why, printed string) (*exec.Cmd, error) {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("%s (args %v); it printed:\n%s", why, args, printed)
	}
	select {
	case <-ready:
		return cmd, nil
	case printed := <-ended:
		return fail("it exited", printed)
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		return fail("it was not ready in 20 s", <-ended)
	}
}

// redisPort is a port p that nothing listens on now, with p+10000 (a
// cluster node's bus port) free too, both outside the kernel's range for
// the local ends of connections, so that no connection takes them before
// redis-server binds them. If that range leaves no room, any free port.
func redisPort(t testing.TB) int {
	t.Helper()
	lo, hi := 32768, 60999
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		fmt.Sscan(string(b), &lo, &hi)
	}
	outside := func(p int) bool { return p < lo || p > hi }
	var ports []int
	for p := 10000; p+10000 <= 65535; p++ {
		if outside(p) && outside(p+10000) {
			ports = append(ports, p)
		}
	}
	for range 100 {
		if len(ports) == 0 {
			break
		}
		p := ports[rand.IntN(len(ports))]
		if free(p) && free(p+10000) {
			return p
		}
	}
	return freePort(t)
}

// free reports whether nothing listens on 127.0.0.1:port.
func free(port int) bool {
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return false
	}
	ln.Close()
	return true
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
