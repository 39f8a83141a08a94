package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/tandemhq/tandem/transport/wire"
)

// idleResult is the server's RSS before and after the connections.
type idleResult struct {
	conns         int
	before, after int64
	// What the kernel holds for TCP sockets, before and after: buffers
	// and socket objects, the bench's ends included.
	kernelBefore, kernelAfter int64
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
	if r.kernelAfter > 0 {
		fmt.Printf("kernel TCP sockets %.1f MiB → %.1f MiB: %.1f KiB per connection, both ends of the loopback\n",
			float64(r.kernelBefore)/(1<<20), float64(r.kernelAfter)/(1<<20), float64(r.kernelAfter-r.kernelBefore)/1024/float64(r.conns))
	}
}

// measureIdle opens connections that join and open one document each,
// --peers of them to a document (the first creates it), answer what the
// server sends as a client does, and then stay idle; it measures the
// server's memory per connection.
func measureIdle(ctx context.Context, o options) (idleResult, error) {
	if len(o.serverPIDs) == 0 {
		return idleResult{}, fmt.Errorf("idle needs --server-pid to read the server's memory")
	}
	before, err := rssBytes(o.serverPIDs)
	if err != nil {
		return idleResult{}, err
	}
	kb, ko := kernelSockets()
	perDoc := max(o.peers, 1)
	fmt.Printf("idle: %d connections, each joined with one document open, %d to a document\n", o.conns, perDoc)
	peers := make([]*peer, 0, o.conns)
	defer func() {
		for _, p := range peers {
			p.ws.Close()
		}
	}()
	var refused atomic.Int64
	var doc string
	for i := 0; i < o.conns; i++ {
		if ctx.Err() != nil {
			return idleResult{}, ctx.Err()
		}
		p, err := dialPeer(o.urls[i%len(o.urls)])
		if err != nil {
			return idleResult{}, fmt.Errorf("connection %d: %w", i, err)
		}
		peers = append(peers, p)
		if i%perDoc == 0 {
			doc = newDocID()
			if err := p.create(doc); err != nil {
				return idleResult{}, err
			}
			continue // its sync loop is done: it stays idle, unread
		}
		if err := p.open(doc); err != nil {
			return idleResult{}, err
		}
		go func() { // read what the server sends and answer it, as a client would
			for {
				m, err := p.recv()
				if err != nil {
					return
				}
				switch m.Type {
				case wire.TypeSync:
					p.answer(m.Data)
				case wire.TypeError, wire.TypeDocUnavailable:
					refused.Add(1)
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
	if n := refused.Load(); n > 0 {
		return idleResult{}, fmt.Errorf("%d connections were refused or told of an error: raise the server's limits", n)
	}
	ka, koa := kernelSockets()
	return idleResult{conns: o.conns, before: before, after: after, kernelBefore: kb + ko, kernelAfter: ka + koa}, nil
}
