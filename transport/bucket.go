package transport

import "time"

// bucket is a token bucket kept by the connection's reader, the only one
// to use it: no lock and no allocation of its own, as idle connections
// are many. It starts full.
type bucket struct {
	tokens float64
	last   int64 // when it was last filled, Unix nanoseconds; 0 before the first take
}

// allow takes a token if there is one, filling the bucket at rate per
// second up to burst first.
func (b *bucket) allow(rate float64, burst int, now time.Time) bool {
	t := now.UnixNano()
	if b.last == 0 {
		b.tokens = float64(burst)
	} else if t > b.last {
		b.tokens = min(float64(burst), b.tokens+rate*float64(t-b.last)/1e9)
	}
	b.last = max(b.last, t)
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}
