package doc

import (
	"context"
	"errors"
	"sync/atomic"
)

// DownStore wraps a Store whose writes fail while it is set down, as when
// its database is away; everything else goes to the Store it wraps. It is
// for tests, of this package and those above it, of what a hub and its
// peers do while nothing can be stored.
type DownStore struct {
	Store
	down atomic.Bool
}

var _ Store = (*DownStore)(nil)

// errStoreDown is what a DownStore's writes return while it is down.
var errStoreDown = errors.New("store down")

// SetDown makes writes fail (true) or reach the wrapped Store (false).
func (s *DownStore) SetDown(down bool) { s.down.Store(down) }

// Write fails while s is down and writes to the wrapped Store otherwise.
func (s *DownStore) Write(ctx context.Context, batch []Write) error {
	if s.down.Load() {
		return errStoreDown
	}
	return s.Store.Write(ctx, batch)
}
