package main

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fxamacker/cbor/v2"

	"github.com/tandemhq/tandem/transport/wire"
)

// Churn: users who come and go beside the presence load, as the users of
// a busy deployment do. Each comes as a client does (a connection, a find
// of its document, its presence saying who it is), stays --churn-stay and
// closes its connection. They come at --churn-rate a second, and their
// user ids cycle through --churn-users, so each user comes back now and
// then. They go to documents of their own, so the rooms the presence load
// measures stay as they are: what churn costs those rooms is the server's
// time, not more members to tell.

// churnDocs is how many documents the churning users share.
const churnDocs = 50

type churnResult struct {
	joined, failed int64
}

// churn runs until ctx ends, then waits for the users still there to
// leave.
func churn(ctx context.Context, o options) (churnResult, error) {
	if o.churnRate <= 0 {
		return churnResult{}, nil
	}
	url := o.urls[0]
	creator, err := dialPeer(url)
	if err != nil {
		return churnResult{}, fmt.Errorf("churn: connect: %w", err)
	}
	docs := make([]string, churnDocs)
	for i := range docs {
		docs[i] = newDocID()
		if err := creator.create(docs[i]); err != nil {
			creator.ws.Close()
			return churnResult{}, fmt.Errorf("churn: create a document: %w", err)
		}
	}
	creator.ws.Close()

	var joined, failed atomic.Int64
	var users sync.WaitGroup
	every := time.Duration(float64(time.Second) / o.churnRate)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			users.Wait()
			return churnResult{joined: joined.Load(), failed: failed.Load()}, nil
		case <-tick.C:
		}
		users.Add(1)
		go func() {
			defer users.Done()
			if err := visit(url, docs[n%len(docs)], fmt.Sprintf("churn-%d", n%o.churnUsers), o.churnStay); err != nil {
				failed.Add(1)
				return
			}
			joined.Add(1)
		}()
	}
}

// visit is one user's stay: connect, find the document, say who it is,
// read what comes (answering sync, as automerge-repo does) for stay, and
// close.
func visit(url, doc, user string, stay time.Duration) error {
	p, err := dialPeer(url)
	if err != nil {
		return err
	}
	defer p.ws.Close()
	if err := p.open(doc); err != nil {
		return err
	}
	hello, _ := cbor.Marshal(map[string]any{"__presence": map[string]any{
		"type": "snapshot", "state": map[string]any{"user": map[string]any{"id": user, "name": user}},
	}})
	if err := p.ephemeral(doc, hello); err != nil {
		return err
	}
	p.ws.SetReadDeadline(time.Now().Add(stay))
	var f scannedFrame
	for {
		_, b, err := p.ws.ReadMessage()
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			return nil // the stay is over
		}
		if err != nil {
			return err
		}
		if scanFrame(b, &f) == nil && string(f.typ) == wire.TypeSync {
			p.answer(f.data)
		}
	}
}
