package store

import (
	"context"
	"errors"
	"sync/atomic"
)

// Down wraps a Store whose writes fail while it is set down, as when its
// database is away; everything else goes to the Store it wraps. It is for
// the tests of the packages above this one: what a hub and its peers do
// while nothing can be stored.
type Down struct {
	Store
	down atomic.Bool
}

var _ Store = (*Down)(nil)

// errDown is what a Down's writes return while it is down.
var errDown = errors.New("store down")

// SetDown makes writes fail (true) or reach the wrapped Store (false).
func (s *Down) SetDown(down bool) { s.down.Store(down) }

// Write fails while s is down and writes to the wrapped Store otherwise.
func (s *Down) Write(ctx context.Context, batch []Write) error {
	if s.down.Load() {
		return errDown
	}
	return s.Store.Write(ctx, batch)
}
