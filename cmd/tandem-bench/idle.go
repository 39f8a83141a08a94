package main

import (
	"context"
	"fmt"
	"time"
)

// idleResult is the server's RSS before and after the connections.
type idleResult struct {
	conns         int
	before, after int64
}

func (r idleResult) perConn() float64 { return float64(r.after-r.before) / 1024 / float64(r.conns) }

func runIdle(ctx context.Context, o options) error {
	r, err := measureIdle(ctx, o)
	if err != nil {
		return err
	}
	printIdle(r)
	return nil
}

func printIdle(r idleResult) {
	fmt.Printf("server RSS %.1f MiB → %.1f MiB: %.1f KiB per connection\n",
		float64(r.before)/(1<<20), float64(r.after)/(1<<20), r.perConn())
}

// measureIdle opens connections that join and open one document each, and
// measures the server's memory per connection.
func measureIdle(ctx context.Context, o options) (idleResult, error) {
	if len(o.serverPIDs) == 0 {
		return idleResult{}, fmt.Errorf("idle needs --server-pid to read the server's memory")
	}
	creator, err := dialPeer(o.urls[0])
	if err != nil {
		return idleResult{}, err
	}
	defer creator.ws.Close()
	doc := newDocID()
	if err := creator.create(doc); err != nil {
		return idleResult{}, err
	}
	before, err := rssBytes(o.serverPIDs)
	if err != nil {
		return idleResult{}, err
	}
	fmt.Printf("idle: %d connections, each joined with one document open\n", o.conns)
	peers := make([]*peer, 0, o.conns)
	defer func() {
		for _, p := range peers {
			p.ws.Close()
		}
	}()
	for i := 0; i < o.conns; i++ {
		if ctx.Err() != nil {
			return idleResult{}, ctx.Err()
		}
		p, err := dialPeer(o.urls[i%len(o.urls)])
		if err != nil {
			return idleResult{}, fmt.Errorf("connection %d: %w", i, err)
		}
		peers = append(peers, p)
		if err := p.open(doc); err != nil {
			return idleResult{}, err
		}
		go func() { // read what the server sends, as a client would
			for {
				if _, err := p.recv(); err != nil {
					return
				}
			}
		}()
	}
	select { // let the server settle: buffers, rooms, pings
	case <-time.After(o.duration):
	case <-ctx.Done():
	}
	after, err := rssBytes(o.serverPIDs)
	if err != nil {
		return idleResult{}, err
	}
	return idleResult{conns: o.conns, before: before, after: after}, nil
}
