package redisbus

// Which Redis serves which channel. One Redis serves every channel; in a
// Redis Cluster a sharded channel lives on the master of its hash slot, as
// a key does, and the nodes say which master serves which slots (CLUSTER
// SHARDS).

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// slotCount is the number of hash slots of a Redis Cluster.
const slotCount = 16384

// slotOf is the hash slot of a key or sharded channel: CRC16 (XMODEM) of
// its hash tag (the part between the first "{" and the next "}", when not
// empty) or of the whole name, modulo the slot count.
func slotOf(name string) int {
	if i := strings.IndexByte(name, '{'); i >= 0 {
		if j := strings.IndexByte(name[i+1:], '}'); j > 0 {
			name = name[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(name); k++ {
		crc ^= uint16(name[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % slotCount
}

var (
	tagsOnce sync.Once
	tags     []string // tags[slot]: a short hash tag that falls in slot
)

// tagFor is a hash tag of slot: a name "{tag}…" lives on that slot.
func tagFor(slot int) string {
	tagsOnce.Do(func() {
		tags = make([]string, slotCount)
		for left, i := slotCount, 0; left > 0; i++ {
			s := strconv.Itoa(i)
			if k := slotOf(s); tags[k] == "" {
				tags[k] = s
				left--
			}
		}
	})
	return tags[slot]
}

// shardInfo is one master of a Redis Cluster and the slots it serves.
type shardInfo struct {
	addr  string
	slots [][2]int // inclusive ranges
}

// topology maps slots to the address of the master that serves them.
type topology struct {
	owner  [slotCount]string // "" while no live master serves the slot
	shards []shardInfo
	nodes  []string // every node the cluster named, masters first
}

// complete reports whether a live master serves every slot.
func (t *topology) complete() bool {
	for _, a := range t.owner {
		if a == "" {
			return false
		}
	}
	return true
}

func (t *topology) same(o *topology) bool {
	return o != nil && t.owner == o.owner
}

// readTopology asks the nodes at addrs, in order, for the cluster's
// shards; the first to answer is believed. A slot whose master is failed
// has no owner until a replica takes over.
func readTopology(ctx context.Context, dial func(addr string) *redis.Client, addrs []string, tls bool) (*topology, error) {
	var errs []error
	for _, addr := range addrs {
		c := dial(addr)
		qctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		shards, err := c.ClusterShards(qctx).Result()
		cancel()
		c.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", addr, err))
			continue
		}
		return newTopology(shards, tls), nil
	}
	if len(errs) == 0 {
		return nil, errors.New("no Redis Cluster node to ask")
	}
	return nil, errors.Join(errs...)
}

func newTopology(shards []redis.ClusterShard, tls bool) *topology {
	t := &topology{}
	var replicas []string
	for _, sh := range shards {
		var master string
		for _, n := range sh.Nodes {
			addr := nodeAddr(n, tls)
			if addr == "" {
				continue
			}
			if n.Role == "master" && n.Health == "online" && master == "" {
				master = addr
			} else {
				replicas = append(replicas, addr)
			}
		}
		if master == "" || len(sh.Slots) == 0 {
			continue
		}
		info := shardInfo{addr: master}
		for _, r := range sh.Slots {
			info.slots = append(info.slots, [2]int{int(r.Start), int(r.End)})
			for s := max(int(r.Start), 0); s <= int(r.End) && s < slotCount; s++ {
				t.owner[s] = master
			}
		}
		t.shards = append(t.shards, info)
		t.nodes = append(t.nodes, master)
	}
	t.nodes = append(t.nodes, replicas...)
	return t
}

// nodeAddr is where a cluster node takes clients, as it announces itself.
func nodeAddr(n redis.Node, tls bool) string {
	host := n.Endpoint
	if host == "" || host == "?" {
		host = n.IP
	}
	port := n.Port
	if tls && n.TLSPort != 0 {
		port = n.TLSPort
	}
	if host == "" || port == 0 {
		return ""
	}
	if strings.Contains(host, ":") {
		return fmt.Sprintf("[%s]:%d", host, port)
	}
	return fmt.Sprintf("%s:%d", host, port)
}

// movedSlot reads the slot of a MOVED or ASK error reply ("MOVED 3999
// 127.0.0.1:6381"); -1 for any other reply.
func movedSlot(err error) int {
	msg := err.Error()
	if !strings.HasPrefix(msg, "MOVED ") && !strings.HasPrefix(msg, "ASK ") {
		return -1
	}
	f := strings.Fields(msg)
	if len(f) < 2 {
		return -1
	}
	s, perr := strconv.Atoi(f[1])
	if perr != nil || s < 0 || s >= slotCount {
		return -1
	}
	return s
}
