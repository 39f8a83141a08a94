package lifecycle

import (
	"context"
	"errors"
	"sync"
)

// ErrClosed is returned by Run after Close.
var ErrClosed = errors.New("lifecycle: closed")

// ErrRunning is returned by a second Run while the first runs.
var ErrRunning = errors.New("lifecycle: already running")

// Loop runs one component's work and stops it. The zero Loop is ready.
type Loop struct {
	mu      sync.Mutex
	running bool
	closed  bool
	cancel  context.CancelFunc // ends the running work's context
	done    chan struct{}      // closed when the running work returns
}

// Run calls work with a context that ends when ctx ends or Stop is
// called, and returns what work returns.
func (l *Loop) Run(ctx context.Context, work func(ctx context.Context) error) error {
	l.mu.Lock()
	switch {
	case l.closed:
		l.mu.Unlock()
		return ErrClosed
	case l.running:
		l.mu.Unlock()
		return ErrRunning
	}
	ctx, cancel := context.WithCancel(ctx)
	l.running, l.cancel, l.done = true, cancel, make(chan struct{})
	done := l.done
	l.mu.Unlock()
	defer func() {
		cancel()
		l.mu.Lock()
		l.running = false
		l.mu.Unlock()
		close(done)
	}()
	return work(ctx)
}

// Stop ends the running work's context and waits until work returns or
// ctx ends. After Stop, Run refuses to start. It reports true the first
// time it is called, so that the caller releases its resources once.
func (l *Loop) Stop(ctx context.Context) (first bool, err error) {
	l.mu.Lock()
	first = !l.closed
	l.closed = true
	cancel, done, running := l.cancel, l.done, l.running
	l.mu.Unlock()
	if !running {
		return first, nil
	}
	cancel()
	select {
	case <-done:
		return first, nil
	case <-ctx.Done():
		return first, ctx.Err()
	}
}

// Closed reports whether Stop was called.
func (l *Loop) Closed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}
