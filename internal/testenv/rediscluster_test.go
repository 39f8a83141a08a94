package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The cluster harness does what the tests of a bus on Redis Cluster need:
// keys and sharded Pub/Sub across shards, a slot moved away from its
// subscribers (who are told), and a master killed (its replica serves).
func TestRedisClusterHarness(t *testing.T) {
	c := StartRedisCluster(t, 3)
	if len(c.Nodes) != 6 {
		t.Fatalf("%d nodes, want 3 masters and 3 replicas", len(c.Nodes))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cc := c.Client(t)
	for _, k := range []string{"a", "b", "c", "{x}1", "{x}2"} {
		if err := cc.Set(ctx, k, k, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
	}

	// A sharded subscription on the master of the channel's slot hears
	// what is published to it, and is told when the slot moves away.
	const channel = "tandem-test-channel"
	slot := int(cc.ClusterKeySlot(ctx, channel).Val())
	master := c.MasterOf(t, slot)
	sub := redis.NewClient(&redis.Options{Addr: master.Addr()})
	defer sub.Close()
	ps := sub.SSubscribe(ctx, channel)
	defer ps.Close()
	if _, err := ps.ReceiveTimeout(ctx, 5*time.Second); err != nil { // the ssubscribe reply
		t.Fatalf("SSUBSCRIBE: %v", err)
	}
	if err := cc.SPublish(ctx, channel, "hello").Err(); err != nil {
		t.Fatalf("SPUBLISH: %v", err)
	}
	if m, err := ps.ReceiveTimeout(ctx, 5*time.Second); err != nil {
		t.Fatalf("the subscriber heard nothing: %v", err)
	} else if msg, ok := m.(*redis.Message); !ok || msg.Payload != "hello" {
		t.Fatalf("the subscriber got %#v, want hello", m)
	}
	var other *ClusterNode
	for _, n := range c.Nodes {
		if n != master && servedBy(n.Addr(), slot) != "" && c.isMaster(n) {
			other = n
			break
		}
	}
	c.MoveSlot(t, slot, other)
	m, err := ps.ReceiveTimeout(ctx, 5*time.Second)
	if s, ok := m.(*redis.Subscription); err != nil || !ok || s.Kind != "sunsubscribe" || s.Channel != channel {
		t.Fatalf("after the slot moved the subscriber got %#v, %v; want sunsubscribe %s", m, err, channel)
	}

	// A killed master's replica serves its slots, keys and all. (A
	// go-redis cluster client learns of it only when its state reloads:
	// by default once a minute, or on a MOVED; dialling the dead master
	// does not reload it.)
	keySlot := int(cc.ClusterKeySlot(ctx, "a").Val())
	now := c.KillMaster(t, keySlot)
	if !c.isMaster(now) {
		t.Fatalf("slot %d is served by %s, not a master", keySlot, now.Addr())
	}
	direct := redis.NewClient(&redis.Options{Addr: now.Addr()})
	defer direct.Close()
	if v, err := direct.Get(ctx, "a").Result(); err != nil || v != "a" {
		t.Fatalf("the new master has a = %q, %v; want a", v, err)
	}
}
