package gctune

import (
	"context"
	"math"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mb = 1 << 20
	for _, c := range []struct {
		rate, cost float64
		want       int
	}{
		{0, 1e-9, 25},         // idle: the least headroom
		{1.5 * mb, 1e-9, 25},  // pings of 10,000 idle connections
		{10 * mb, 1e-9, 55},   // 2% of a core at 52: in steps of 5
		{9.5 * mb, 1e-9, 50},  //
		{10 * mb, 2e-9, 100},  // a costlier collector: more headroom
		{100 * mb, 1e-9, 100}, // busy: Go's own
		{1 * mb, math.NaN(), 100},
	} {
		if got := Percent(c.rate, c.cost, 0.02, 25, 100); got != c.want {
			t.Errorf("Percent(%.1f MB/s, %g s/B) = %d, want %d", c.rate/mb, c.cost, got, c.want)
		}
	}
}

// When a release is worth it: going quiet, staying quiet with much to
// give back, and busy only with free pages far beyond the heap's goal.
func TestShouldFree(t *testing.T) {
	const mb = 1 << 20
	live := stats{live: 40 * mb, goal: 44 * mb, retained: 46 * mb}
	with := func(spare, free, retained float64) stats {
		s := live
		s.spare, s.free, s.retained = spare, free, retained
		return s
	}
	const sec = time.Second
	for _, c := range []struct {
		name             string
		s                stats
		atMin, wentQuiet bool
		since            time.Duration
		want             bool
	}{
		{"went quiet with little, a release not long ago", with(2*mb, 2*mb, 46*mb), true, true, 10 * sec, false},
		{"went quiet with little, none for a Quiet", with(2*mb, 2*mb, 46*mb), true, true, 61 * sec, true},
		{"went quiet with much", with(6*mb, 1*mb, 46*mb), true, true, 0, true},
		{"quiet with much, past the gap", with(6*mb, 6*mb, 52*mb), true, false, 2 * sec, true},
		{"quiet with much, within the gap", with(6*mb, 6*mb, 52*mb), true, false, sec / 2, false},
		{"quiet with little", with(4*mb, 4*mb, 50*mb), true, false, time.Hour, false},
		{"quiet with much garbage, few free pages", with(8*mb, 1*mb, 47*mb), true, false, time.Hour, false},
		{"busy, free pages the goal will use", with(20*mb, 6*mb, 50*mb), false, false, time.Hour, false},
		{"busy, a burst's free pages far past the goal", with(30*mb, 20*mb, 66*mb), false, false, 2 * sec, true},
		{"busy, a burst's, within the gap", with(30*mb, 20*mb, 66*mb), false, false, sec / 2, false},
	} {
		if got := shouldFree(c.s, c.atMin, c.wentQuiet, c.since, sec, time.Minute); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

var sink [][]byte

// tuned runs a tuner that looks every 20 ms and settles in 300 ms, with
// cfg's Quiet and CPU, over a process that keeps 64 MB live; it returns the percents set and
// the releases, and stops the tuner (restoring GOGC) when the test ends.
func tuned(t *testing.T, cfg Config) (set <-chan int, released <-chan struct{}, stop func()) {
	before := debug.SetGCPercent(100)
	kept := make([][]byte, 64)
	for i := range kept {
		kept[i] = make([]byte, 1<<20)
	}
	sets := make(chan int, 1000)
	releases := make(chan struct{}, 1000)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		cfg.Every, cfg.Settle = 20*time.Millisecond, 300*time.Millisecond
		cfg.OnChange = func(p int) { sets <- p }
		cfg.Release = func() { releases <- struct{}{} }
		Run(ctx, cfg)
	}()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
			runtime.KeepAlive(kept)
		}
	}
	t.Cleanup(func() { stop(); debug.SetGCPercent(before) })
	return sets, releases, stop
}

// TestTheTunerFollowsTheLoad: a process that keeps a large heap and
// allocates nothing gets the least headroom; one that allocates fast gets
// the most; at the end the percent is the most again.
func TestTheTunerFollowsTheLoad(t *testing.T) {
	set, released, stop := tuned(t, Config{Quiet: 100 * time.Millisecond})
	deadline := time.Now().Add(20 * time.Second)
	// Quiet: no allocation to speak of.
	for p := 0; p != 10; {
		select {
		case p = <-set:
		case <-released:
			t.Fatal("memory outside the heap was released before the process went quiet")
		case <-time.After(time.Until(deadline)):
			t.Fatal("a quiet process never got the least headroom")
		}
	}
	// Quiet, it gives back what is outside the heap: a look after the
	// heap's free pages, then every Quiet.
	for range 3 {
		select {
		case <-released:
		case <-time.After(time.Until(deadline)):
			t.Fatal("a quiet process never released memory outside the heap")
		}
	}
	// Busy: 64 MB a round against 64 MB live.
	for p := 10; p != 100; {
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
	stop()
	if p := debug.SetGCPercent(100); p != 100 {
		t.Fatalf("the percent after the tuner stopped is %d, want 100", p)
	}
}

// TestAProcessQuietAgainGivesBackMuchFreeMemory: a process that goes
// quiet again soon after it last gave memory back gives back the heap's
// free pages once more if they are many, without waiting for Quiet.
func TestAProcessQuietAgainGivesBackMuchFreeMemory(t *testing.T) {
	set, released, _ := tuned(t, Config{Quiet: time.Hour})
	deadline := time.Now().Add(20 * time.Second)
	waitFor := func(want int) {
		t.Helper()
		for p := 0; p != want; {
			if time.Now().After(deadline) {
				t.Fatalf("the percent never reached %d", want)
			}
			if want == 100 { // busy: 64 MB a round against 64 MB live
				for range 64 {
					sink = append(sink[:0], make([]byte, 1<<20))
				}
				select {
				case p = <-set:
				default:
				}
				continue
			}
			select {
			case p = <-set:
			case <-time.After(time.Until(deadline)):
			}
		}
	}
	waitFor(10)
	select { // the first time it goes quiet
	case <-released:
	case <-time.After(time.Until(deadline)):
		t.Fatal("quiet the first time, it gave nothing back")
	}
	waitFor(100)
	// The garbage collected: a collection during the busy spell counts
	// what was allocated while it marked as live, which would hide it.
	runtime.GC()
	waitFor(10)
	// Given back: by a release, or by the runtime's scavenger as the
	// percent came down (then there is nothing much left to release).
	for {
		select {
		case <-released:
			return
		default:
		}
		if s := readStats(); s.spare < max(muchFree, s.live/8) {
			return
		}
		if time.Now().After(deadline) {
			s := readStats()
			t.Fatalf("quiet again with the garbage of a busy spell freed, it holds %.0f MB of it", s.spare/1e6)
		}
		time.Sleep(20 * time.Millisecond) // the tuner's look
	}
}

// TestAQuietProcessGivesBackWhatItFrees: a process that stays quiet and
// frees much of its heap gives the pages back without waiting for Quiet.
func TestAQuietProcessGivesBackWhatItFrees(t *testing.T) {
	extra = make([][]byte, 32)
	for i := range extra {
		extra[i] = make([]byte, 1<<20)
	}
	// CPU 0.5: releases of a 96 MB heap may then come every half second
	// or so, not every ten.
	set, released, _ := tuned(t, Config{Quiet: time.Hour, CPU: 0.5})
	deadline := time.After(20 * time.Second)
	for p := 0; p != 10; {
		select {
		case p = <-set:
		case <-deadline:
			t.Fatal("a quiet process never got the least headroom")
		}
	}
	select { // the release of going quiet
	case <-released:
	case <-deadline:
		t.Fatal("quiet, it gave nothing back")
	}
	extra = nil
	runtime.GC() // 32 MB of free pages, which the scavenger keeps a while
	select {
	case <-released:
	case <-deadline:
		t.Fatal("quiet, with a third of its heap freed, it gave nothing back")
	}
}

// extra is memory a test keeps live until it frees it.
var extra [][]byte
