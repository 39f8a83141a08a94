package transport

import "time"

// bucket is a token bucket kept by the connection's reader, the only one
// to use it: no lock and no allocation of its own, as idle connections
// are many. It starts full.
type bucket struct {
	last    int64   // when it was last filled, since clockBase
	tokens  float32 // a burst is some hundreds: float32 holds it to a hundred-thousandth
	started bool
}

// allow takes a token if there is one, filling the bucket at rate per
// second up to burst first. now is measured from clockBase, on the
// monotonic clock when now has one (time.Now's does).
func (b *bucket) allow(rate float64, burst int, now time.Time) bool {
	t := int64(now.Sub(clockBase))
	switch {
	case !b.started:
		b.tokens, b.last, b.started = float32(burst), t, true
	case t > b.last:
		b.tokens = float32(min(float64(burst), float64(b.tokens)+rate*float64(t-b.last)/1e9))
		b.last = t
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}
