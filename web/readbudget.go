package web

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// readBudget charges what the document API's requests hold while they
// work on a whole document (a copy of its changes, its content or a
// change made on it), node-wide, before they hold it. A request waits
// until its cost fits. Large requests (over a 64th of the budget) draw
// on at most three quarters of it together, so a few requests on the
// largest documents never keep the rest waiting: the last quarter is
// for small ones. No request may cost over a quarter (maxCost).
//
// A request that fits goes in even if an earlier one, too large for
// what is free, waits: a large one may wait for the small ones, never
// they for it.
type readBudget struct {
	total, largeCap, large int64
	charged                prometheus.Gauge // what is held, if set

	mu      sync.Mutex
	used    int64 // by every request holding a charge
	usedBig int64 // by the large ones among them
	waiters []*readWaiter
}

type readWaiter struct {
	cost     int64
	priority bool
	ready    chan struct{} // closed once the charge is held
}

func newReadBudget(total int64, charged prometheus.Gauge) *readBudget {
	return &readBudget{total: total, largeCap: total / 4 * 3, large: total / 64, charged: charged}
}

// waiting returns how many requests wait for their charge.
func (b *readBudget) waiting() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.waiters)
}

// maxCost is the most one request may cost.
func (b *readBudget) maxCost() int64 { return b.total / 4 }

// fitsNow reports whether a charge of cost fits what is free; under b.mu.
// A priority charge is held to the whole budget alone (see acquire).
func (b *readBudget) fitsNow(cost int64, priority bool) bool {
	if b.used+cost > b.total {
		return false
	}
	return priority || cost <= b.large || b.usedBig+cost <= b.largeCap
}

// big reports whether a charge counts against the large ones' cap.
func (b *readBudget) big(cost int64, priority bool) bool { return !priority && cost > b.large }

func (b *readBudget) take(cost int64, priority bool) {
	if b.charged != nil {
		b.charged.Add(float64(cost))
	}
	b.used += cost
	if b.big(cost, priority) {
		b.usedBig += cost
	}
}

// acquire waits until cost is charged and returns what gives it back;
// false if ctx ended first. A cost over maxCost is charged maxCost: no
// request waits for more. waited is called once if it has to wait.
//
// A priority charge is for work that requests holding large charges
// wait on (a batch of PATCHes, charged for their bodies, waits for its
// document's charge): it may take the last quarter too, so that it
// never waits on those who wait on it: large charges hold at most three
// quarters, and a charge at most one.
func (b *readBudget) acquire(ctx context.Context, cost int64, priority bool, waited func()) (func(), bool) {
	cost = min(max(cost, 1), b.maxCost())
	b.mu.Lock()
	if b.fitsNow(cost, priority) {
		b.take(cost, priority)
		b.mu.Unlock()
		return b.releaser(cost, priority), true
	}
	w := &readWaiter{cost: cost, priority: priority, ready: make(chan struct{})}
	b.waiters = append(b.waiters, w)
	b.mu.Unlock()
	if waited != nil {
		waited()
	}
	select {
	case <-w.ready:
		return b.releaser(cost, priority), true
	case <-ctx.Done():
		b.mu.Lock()
		select {
		case <-w.ready: // charged as ctx ended: give it back
			b.mu.Unlock()
			b.release(cost, priority)
		default:
			for i, x := range b.waiters {
				if x == w {
					b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
					break
				}
			}
			b.mu.Unlock()
		}
		return nil, false
	}
}

func (b *readBudget) releaser(cost int64, priority bool) func() {
	var once sync.Once
	return func() { once.Do(func() { b.release(cost, priority) }) }
}

// release gives back cost and lets in, in the order they came, the
// waiters that now fit.
func (b *readBudget) release(cost int64, priority bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.charged != nil {
		b.charged.Sub(float64(cost))
	}
	b.used -= cost
	if b.big(cost, priority) {
		b.usedBig -= cost
	}
	kept := b.waiters[:0]
	for _, w := range b.waiters {
		if b.fitsNow(w.cost, w.priority) {
			b.take(w.cost, w.priority)
			close(w.ready)
		} else {
			kept = append(kept, w)
		}
	}
	clear(b.waiters[len(kept):])
	b.waiters = kept
}
