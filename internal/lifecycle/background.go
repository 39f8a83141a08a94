package lifecycle

import (
	"sync"
	"time"
)

// Background is a component's work off its Run loop (timers, retries):
// work started while the component is open, which its Close waits for,
// and none once it is closing. The zero value is open.
type Background struct {
	mu     sync.Mutex // guards closed; wg is added to under it while open
	closed bool
	wg     sync.WaitGroup
}

// Do runs f now, as background work: not once Close was called.
func (b *Background) Do(f func()) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.wg.Add(1)
	b.mu.Unlock()
	defer b.wg.Done()
	f()
}

// After runs f on a goroutine of its own once d has passed, as Do does.
func (b *Background) After(d time.Duration, f func()) {
	time.AfterFunc(d, func() { b.Do(f) })
}

// Refuse makes Do and After do nothing from now on; work under way goes
// on. A component refuses new work as it starts to close, and waits for
// the rest (Close) once what that work may need has stopped.
func (b *Background) Refuse() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
}

// Close refuses new work and waits for the work under way. Safe to call
// more than once.
func (b *Background) Close() {
	b.Refuse()
	b.wg.Wait()
}
