package gctune

import (
	"context"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mb = 1 << 20
	for _, c := range []struct {
		rate, live float64
		want       int
	}{
		{0, 40 * mb, 25},         // idle: the least headroom
		{0.6 * mb, 40 * mb, 25},  // pings of 10,000 idle connections
		{2 * mb, 40 * mb, 50},    // a period fills half the live heap
		{2.1 * mb, 40 * mb, 55},  // in steps of 5
		{100 * mb, 40 * mb, 100}, // busy: Go's own
		{1 * mb, 0, 100},         // nothing live yet
	} {
		if got := Percent(c.rate, c.live, 10*time.Second, 25, 100); got != c.want {
			t.Errorf("Percent(%.1f MB/s, %.0f MB live) = %d, want %d", c.rate/mb, c.live/mb, got, c.want)
		}
	}
}

var sink [][]byte

// TestTheTunerFollowsTheLoad: a process that keeps a large heap and
// allocates nothing gets the least headroom; one that allocates fast gets
// the most; at the end the percent is the most again.
func TestTheTunerFollowsTheLoad(t *testing.T) {
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)
	kept := make([][]byte, 64)
	for i := range kept {
		kept[i] = make([]byte, 1<<20)
	}
	set := make(chan int, 1000)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(ctx, Config{Every: 20 * time.Millisecond, Period: 200 * time.Millisecond, OnChange: func(p int) { set <- p }})
	}()
	deadline := time.Now().Add(20 * time.Second)
	// Quiet: no allocation to speak of.
	for p := 0; p != 25; {
		select {
		case p = <-set:
		case <-time.After(time.Until(deadline)):
			t.Fatal("a quiet process never got the least headroom")
		}
	}
	// Busy: 64 MB a round against 64 MB live.
	for p := 25; p != 100; {
		for range 64 {
			sink = append(sink[:0], make([]byte, 1<<20))
		}
		select {
		case p = <-set:
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("a busy process never got Go's own headroom")
		}
	}
	cancel()
	<-done
	if p := debug.SetGCPercent(100); p != 100 {
		t.Fatalf("the percent after the tuner stopped is %d, want 100", p)
	}
	runtime.KeepAlive(kept)
}
