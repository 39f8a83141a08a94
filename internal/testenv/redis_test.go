package testenv

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// A cluster node whose bus port (port+10000) is taken exits at once; the
// harness says so at once, with what the server printed, and starts it
// again on another port.
func TestARedisWhosePortIsTakenIsStartedOnAnother(t *testing.T) {
	var taken []int
	extra := func(port int) []string {
		if len(taken) < 2 { // the first two tries find their bus port taken
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port+10000))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			taken = append(taken, port)
		}
		return []string{"--cluster-enabled", "yes", "--cluster-config-file", fmt.Sprintf("nodes-%d.conf", port), "--dir", t.TempDir()}
	}
	start := time.Now()
	port, cmd := startRedisServer(t, 0, extra)
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if len(taken) != 2 || port == taken[0] || port == taken[1] {
		t.Fatalf("started on %d after the tries on %v, want a third port", port, taken)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Fatalf("took %v: the tries that failed were waited out", d)
	}
	if free(port) || free(port+10000) {
		t.Fatalf("the node on %d does not listen on its port and its bus port", port)
	}
	_, err := launchRedis(taken[0], extra(taken[0]))
	if err == nil || !strings.Contains(err.Error(), "exited") {
		t.Fatalf("a node on a taken bus port: %v, want that it exited", err)
	}
	t.Log(err)
}
