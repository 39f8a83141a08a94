package web

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
)

// Charges of every size, taken and given back by many requests at once,
// some of which give up waiting: what is held never passes the budget
// nor, for large ones, three quarters of it, and all of it comes back.
func TestTheReadBudgetHoldsItsBoundsUnderContention(t *testing.T) {
	b := newReadBudget(64<<20, nil)
	check := func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.used > b.total || b.usedBig > b.largeCap || b.used < 0 || b.usedBig < 0 {
			t.Errorf("held %d (large %d) of %d (large at most %d)", b.used, b.usedBig, b.total, b.largeCap)
		}
	}
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for range 300 {
				cost := rng.Int64N(b.maxCost()) + 1
				if rng.IntN(2) == 0 {
					cost = rng.Int64N(b.large) + 1
				}
				ctx, cancel := context.WithCancel(context.Background())
				if rng.IntN(4) == 0 {
					cancel() // gives up at once if it has to wait
				}
				done, ok := b.acquire(ctx, cost, rng.IntN(8) == 0, nil)
				cancel()
				check()
				if ok {
					done()
					done() // twice gives back once
				}
			}
		}()
	}
	wg.Wait()
	if b.used != 0 || b.usedBig != 0 || len(b.waiters) != 0 {
		t.Fatalf("after every request: held %d (large %d), %d waiting", b.used, b.usedBig, len(b.waiters))
	}
}

// A priority charge (a batch of PATCHes' document, which PATCHes holding
// large charges wait on) is not kept waiting by large charges: they hold
// at most three quarters, and it may take the last.
func TestAPriorityChargeIsNotKeptWaitingByLargeOnes(t *testing.T) {
	b := newReadBudget(64<<20, nil)
	for range 3 {
		if _, ok := b.acquire(context.Background(), b.maxCost(), false, nil); !ok {
			t.Fatal("a large charge within three quarters waited")
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // it may not wait
	if _, ok := b.acquire(ctx, b.maxCost(), false, nil); ok {
		t.Fatal("a fourth large charge went past three quarters")
	}
	release, ok := b.acquire(ctx, b.maxCost(), true, nil)
	if !ok {
		t.Fatal("a priority charge waited on the large ones")
	}
	release()
}
