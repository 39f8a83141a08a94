package testenv

import (
	"context"
	"fmt"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisCluster is a Redis Cluster of one test's own: masters with a
// replica each, on free ports, keeping nothing on disk but their cluster
// configuration in a directory of the test's. Kill a master to see its
// replica take over (KillMaster, WaitForMasters), move a slot to see its
// channels move (MoveSlot).
type RedisCluster struct {
	Nodes []*ClusterNode
	dir   string // the nodes' cluster configurations
}

// ClusterNode is one redis-server of a RedisCluster.
type ClusterNode struct {
	Port int
	cmd  *exec.Cmd
}

// Addr is the node's host:port.
func (n *ClusterNode) Addr() string { return fmt.Sprintf("127.0.0.1:%d", n.Port) }

// Kill ends the node with SIGKILL; safe to call twice.
func (n *ClusterNode) Kill() {
	if n.cmd.ProcessState == nil {
		n.cmd.Process.Kill()
		n.cmd.Wait()
	}
}

// clusterNodeTimeout is how long the cluster takes a silent node for
// failed: a replica is promoted a little later.
const clusterNodeTimeout = 2 * time.Second

// StartRedisCluster starts masters × 2 redis-servers in cluster mode,
// makes them one cluster, each master with one replica, and waits until
// every node says the cluster is ok. They are killed when the test ends.
func StartRedisCluster(t testing.TB, masters int) *RedisCluster {
	t.Helper()
	dir := t.TempDir()
	c := &RedisCluster{dir: dir}
	t.Cleanup(func() {
		for _, n := range c.Nodes {
			n.Kill()
		}
	})
	var addrs []string
	for range 2 * masters {
		n := startClusterNode(t, dir, 0)
		c.Nodes = append(c.Nodes, n)
		addrs = append(addrs, n.Addr())
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	// Ok comes before every node knows the replicas: a master killed
	// then would have no one to take over.
	WaitWithin(t, "the Redis Cluster to be ok, with its replicas, on every node", 30*time.Second, func() bool {
		for _, n := range c.Nodes {
			if !clusterOK(n.Addr()) || replicasKnown(n.Addr()) != masters || !replicaSynced(n.Addr()) {
				return false
			}
		}
		return true
	})
	return c
}

// replicaSynced reports whether the node at addr is a master or a
// replica whose link to its master is up.
func replicaSynced(addr string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	info, err := rc.Info(ctx, "replication").Result()
	return err == nil && (strings.Contains(info, "role:master") || strings.Contains(info, "master_link_status:up"))
}

// replicasKnown counts the replicas the node at addr knows of.
func replicasKnown(addr string) int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	nodes, err := rc.ClusterNodes(ctx).Result()
	if err != nil {
		return -1
	}
	n := 0
	for _, line := range strings.Split(nodes, "\n") {
		if f := strings.Fields(line); len(f) > 3 && strings.Contains(f[2], "slave") && f[3] != "-" {
			n++
		}
	}
	return n
}

// startClusterNode starts a cluster node on port (a free one for 0), with
// its cluster configuration in dir.
func startClusterNode(t testing.TB, dir string, port int) *ClusterNode {
	t.Helper()
	port, cmd := startRedisServer(t, port, func(port int) []string {
		return []string{
			"--cluster-enabled", "yes", "--cluster-config-file", fmt.Sprintf("nodes-%d.conf", port),
			"--cluster-node-timeout", fmt.Sprint(clusterNodeTimeout.Milliseconds()),
			// A replica syncs at once (not 5 s later), and may take over
			// however long ago it last heard its master.
			"--repl-diskless-sync-delay", "0", "--cluster-replica-validity-factor", "0",
			"--dir", dir}
	})
	return &ClusterNode{Port: port, cmd: cmd}
}

// Restart kills every node and starts each again on its port with its
// cluster configuration, as after a power cut: the cluster comes back
// with its shards but without its keys (nothing else is kept on disk). It
// returns once every node says the cluster is ok.
func (c *RedisCluster) Restart(t testing.TB) {
	t.Helper()
	for _, n := range c.Nodes {
		n.Kill()
	}
	for i, n := range c.Nodes {
		c.Nodes[i] = startClusterNode(t, c.dir, n.Port)
	}
	WaitWithin(t, "the restarted Redis Cluster to be ok on every node", 30*time.Second, func() bool {
		for _, n := range c.Nodes {
			if !clusterOK(n.Addr()) {
				return false
			}
		}
		return true
	})
}

// clusterOK reports whether the node at addr says the cluster is ok.
func clusterOK(addr string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	info, err := rc.ClusterInfo(ctx).Result()
	return err == nil && strings.Contains(info, "cluster_state:ok")
}

// URL is the cluster's address as go-redis's ParseClusterURL reads it:
// the first node, the others as addr parameters.
func (c *RedisCluster) URL() string {
	q := url.Values{}
	for _, n := range c.Nodes[1:] {
		q.Add("addr", n.Addr())
	}
	return "redis://" + c.Nodes[0].Addr() + "?" + q.Encode()
}

// Client is a go-redis cluster client of the cluster, closed when the
// test ends.
func (c *RedisCluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	opts, err := redis.ParseClusterURL(c.URL())
	if err != nil {
		t.Fatal(err)
	}
	cc := redis.NewClusterClient(opts)
	t.Cleanup(func() { cc.Close() })
	return cc
}

// MasterOf is the node that serves slot now, as every live node says;
// nil while they disagree (a failover or a move on its way).
func (c *RedisCluster) MasterOf(t testing.TB, slot int) *ClusterNode {
	t.Helper()
	var master *ClusterNode
	for _, n := range c.Nodes {
		if n.cmd.ProcessState != nil {
			continue
		}
		m := c.node(servedBy(n.Addr(), slot))
		if m == nil || (master != nil && m != master) {
			return nil
		}
		master = m
	}
	return master
}

// servedBy is the address of the master that serves slot, as the node at
// addr says; "" if it cannot say.
func servedBy(addr string, slot int) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	shards, err := rc.ClusterShards(ctx).Result()
	if err != nil {
		return ""
	}
	for _, sh := range shards {
		for _, r := range sh.Slots {
			if int64(slot) < r.Start || int64(slot) > r.End {
				continue
			}
			for _, n := range sh.Nodes {
				if n.Role == "master" && n.Health != "fail" {
					return fmt.Sprintf("%s:%d", n.IP, n.Port)
				}
			}
		}
	}
	return ""
}

func (c *RedisCluster) node(addr string) *ClusterNode {
	for _, n := range c.Nodes {
		if n.Addr() == addr {
			return n
		}
	}
	return nil
}

// KillMaster kills the master of slot with SIGKILL and waits until a
// replica serves the slot and every live node says the cluster is ok. It
// returns the node that serves the slot now.
func (c *RedisCluster) KillMaster(t testing.TB, slot int) *ClusterNode {
	t.Helper()
	old := c.MasterOf(t, slot)
	if old == nil {
		t.Fatalf("the nodes do not agree on who serves slot %d", slot)
	}
	old.Kill()
	var now *ClusterNode
	WaitWithin(t, "a replica to take over the killed master's slots", 30*time.Second, func() bool {
		for _, n := range c.Nodes {
			if n.cmd.ProcessState == nil && !clusterOK(n.Addr()) {
				return false
			}
		}
		now = c.MasterOf(t, slot)
		return now != nil && now != old
	})
	return now
}

// MoveSlot moves an empty slot to the master to, as a reshard does: the
// destination takes it, then every master is told. Subscribers of the
// slot's sharded channels on the old master are told to leave them.
func (c *RedisCluster) MoveSlot(t testing.TB, slot int, to *ClusterNode) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	id := func(n *ClusterNode) string {
		rc := redis.NewClient(&redis.Options{Addr: n.Addr()})
		defer rc.Close()
		v, err := rc.Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			t.Fatalf("CLUSTER MYID on %s: %v", n.Addr(), err)
		}
		return v
	}
	from := c.MasterOf(t, slot)
	if from == nil {
		t.Fatalf("the nodes do not agree on who serves slot %d", slot)
	}
	if from == to {
		return
	}
	target := id(to)
	// The destination first, then the source, then everyone else.
	order := []*ClusterNode{to, from}
	for _, n := range c.Nodes {
		if n != to && n != from && n.cmd.ProcessState == nil {
			order = append(order, n)
		}
	}
	for _, n := range order {
		rc := redis.NewClient(&redis.Options{Addr: n.Addr()})
		err := rc.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", target).Err()
		rc.Close()
		if err != nil && n != to && n != from {
			continue // a replica: it learns from its master
		}
		if err != nil {
			t.Fatalf("CLUSTER SETSLOT %d NODE on %s: %v", slot, n.Addr(), err)
		}
	}
	WaitWithin(t, "every live node to see the slot moved", 10*time.Second, func() bool {
		return c.MasterOf(t, slot) == to
	})
}

// isMaster reports whether the node says it is a master.
func (c *RedisCluster) isMaster(n *ClusterNode) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	rc := redis.NewClient(&redis.Options{Addr: n.Addr()})
	defer rc.Close()
	info, err := rc.Info(ctx, "replication").Result()
	return err == nil && strings.Contains(info, "role:master")
}
