package main

import (
	"context"
	"fmt"
	"time"
)

// runIdle opens connections that join and open one document each, and
// reports the server's memory per connection.
func runIdle(ctx context.Context, o options) error {
	if o.serverPID <= 0 {
		return fmt.Errorf("idle needs --server-pid to read the server's memory")
	}
	creator, err := dialPeer(o.urls[0])
	if err != nil {
		return err
	}
	defer creator.ws.Close()
	doc := newDocID()
	if err := creator.create(doc); err != nil {
		return err
	}
	before, err := rssBytes(o.serverPID)
	if err != nil {
		return err
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
			return ctx.Err()
		}
		p, err := dialPeer(o.urls[i%len(o.urls)])
		if err != nil {
			return fmt.Errorf("connection %d: %w", i, err)
		}
		peers = append(peers, p)
		if err := p.open(doc); err != nil {
			return err
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
	after, err := rssBytes(o.serverPID)
	if err != nil {
		return err
	}
	fmt.Printf("server RSS %.1f MiB → %.1f MiB: %.1f KiB per connection\n",
		float64(before)/(1<<20), float64(after)/(1<<20), float64(after-before)/1024/float64(o.conns))
	return nil
}
