package main

import (
	"context"
	"iter"

	"github.com/tandemhq/tandem/doc"
	"github.com/tandemhq/tandem/doc/amcheck"
)

// observers tells one room's changes to two observers: the mention
// tracker's (first: the journals are its alone) and the webhooks', which
// journals nothing and never keeps a room (webhook.Hooks.Observe). Each
// call goes to both, in that order, under the locks the room holds.
type observers struct {
	first, second doc.Observer
}

var _ doc.Observer = observers{}

func (o observers) Applying(p doc.Peer) {
	o.first.Applying(p)
	o.second.Applying(p)
}

func (o observers) Applied(by doc.Peer, changes iter.Seq[*amcheck.Change], elsewhere bool) {
	o.first.Applied(by, changes, elsewhere)
	o.second.Applied(by, changes, elsewhere)
}

func (o observers) Left(p doc.Peer) {
	o.first.Left(p)
	o.second.Left(p)
}

func (o observers) Loaded(ctx context.Context, journals map[string][]byte) {
	o.first.Loaded(ctx, journals)
	o.second.Loaded(ctx, journals)
}

// Journal and Wrote are the first's: the second journals nothing.
func (o observers) Journal() map[string][]byte             { return o.first.Journal() }
func (o observers) Wrote(j map[string][]byte, stored bool) { o.first.Wrote(j, stored) }

// Busy asks both: on false the room, and both observers, leave memory.
func (o observers) Busy() bool {
	a, b := o.first.Busy(), o.second.Busy()
	return a || b
}
