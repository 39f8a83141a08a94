package lifecycle

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Stop ends Run's work and waits for it; a second Stop and a Run after it
// do nothing; Stop without Run is fine.
func TestStopEndsRunOnceAndForAll(t *testing.T) {
	var l Loop
	started := make(chan struct{})
	ran := make(chan error, 1)
	cleaned := false
	go func() {
		ran <- l.Run(context.Background(), func(ctx context.Context) error {
			close(started)
			<-ctx.Done()
			cleaned = true
			return nil
		})
	}()
	<-started
	if first, err := l.Stop(context.Background()); !first || err != nil {
		t.Fatalf("first Stop: %v %v", first, err)
	}
	if !cleaned {
		t.Fatal("Stop returned before the work did")
	}
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	if first, err := l.Stop(context.Background()); first || err != nil {
		t.Fatalf("second Stop: %v %v", first, err)
	}
	if err := l.Run(context.Background(), func(context.Context) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run after Stop: %v", err)
	}
	var never Loop
	if first, err := never.Stop(context.Background()); !first || err != nil {
		t.Fatalf("Stop without Run: %v %v", first, err)
	}
}

// The context given to Run ends the work too; a second Run meanwhile is
// refused; Stop's own context bounds its wait.
func TestRunEndsWithItsContext(t *testing.T) {
	var l Loop
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	release := make(chan struct{})
	ran := make(chan error, 1)
	go func() {
		ran <- l.Run(ctx, func(ctx context.Context) error {
			close(started)
			<-ctx.Done()
			<-release
			return errors.New("stopped")
		})
	}()
	<-started
	if err := l.Run(context.Background(), func(context.Context) error { return nil }); !errors.Is(err, ErrRunning) {
		t.Fatalf("a second Run: %v", err)
	}
	cancel()
	sctx, scancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer scancel()
	if _, err := l.Stop(sctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop past its context: %v", err)
	}
	close(release)
	if err := <-ran; err == nil || err.Error() != "stopped" {
		t.Fatalf("Run returned %v", err)
	}
}

// Background work started before Close is waited for; none starts after.
func TestBackgroundWorkIsWaitedForAndRefusedOnceClosed(t *testing.T) {
	var b Background
	started, release := make(chan struct{}), make(chan struct{})
	finished := make(chan struct{})
	go b.Do(func() { close(started); <-release; close(finished) })
	<-started
	closed := make(chan struct{})
	go func() { b.Close(); close(closed) }()
	select {
	case <-closed:
		t.Fatal("Close returned while work was under way")
	case <-time.After(50 * time.Millisecond): // a bound on a wrong answer, not synchronisation
	}
	close(release)
	<-closed
	select {
	case <-finished:
	default:
		t.Fatal("Close returned before the work finished")
	}
	ran := false
	b.Do(func() { ran = true })
	if ran {
		t.Fatal("work ran after Close")
	}
	b.Close() // twice is fine
}
