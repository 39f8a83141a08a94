package gctune

import (
	"context"
	"log/slog"
	"math"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"
)

// Config bounds the tuner. Zero fields take the defaults.
type Config struct {
	// Max is the percent of a busy process; default 100, Go's own.
	Max int
	// Min is the least percent; default 25.
	Min int
	// Period is the least time between collections the tuner aims for
	// at the current allocation rate; default 10s.
	Period time.Duration
	// Every is how often it looks; default 1s.
	Every time.Duration
	// OnChange, when set, receives each percent set.
	OnChange func(percent int)
	Logger   *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Max <= 0 {
		c.Max = 100
	}
	if c.Min <= 0 {
		c.Min = min(25, c.Max)
	}
	if c.Period <= 0 {
		c.Period = 10 * time.Second
	}
	if c.Every <= 0 {
		c.Every = time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Percent is the GOGC percent for allocRate bytes a second over a live heap
// of live bytes: the headroom the allocations of one period fill, within
// [min, max].
func Percent(allocRate, live float64, period time.Duration, lo, hi int) int {
	if live <= 0 {
		return hi
	}
	p := 100 * allocRate * period.Seconds() / live
	if math.IsNaN(p) || p > float64(hi) {
		return hi
	}
	// In steps of 5, so that small swings of the rate change nothing.
	return min(hi, max(lo, 5*int(math.Ceil(p/5))))
}

// settle is how fast the rate the tuner goes by falls with the load's.
const settle = 3 * time.Second

// running keeps one tuner per process: the percent is the process's.
var running sync.Mutex

// Run tunes until ctx ends, then sets cfg.Max back. If another tuner runs
// in the process, it returns at once.
func Run(ctx context.Context, cfg Config) {
	cfg.setDefaults()
	if !running.TryLock() {
		return
	}
	defer running.Unlock()
	samples := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/gc/heap/live:bytes"}}
	read := func() (allocs, live float64) {
		metrics.Read(samples)
		return float64(samples[0].Value.Uint64()), float64(samples[1].Value.Uint64())
	}
	set := func(p int) {
		debug.SetGCPercent(p)
		if cfg.OnChange != nil {
			cfg.OnChange(p)
		}
	}
	current := cfg.Max
	set(current)
	defer set(cfg.Max)
	t := time.NewTicker(cfg.Every)
	defer t.Stop()
	last, _ := read()
	lastAt := time.Now()
	var rate float64 // up at once, down over a few seconds
	var freed time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		allocs, live := read()
		now := time.Now()
		inst := (allocs - last) / now.Sub(lastAt).Seconds()
		last, lastAt = allocs, now
		if inst >= rate {
			rate = inst
		} else {
			keep := math.Exp(-cfg.Every.Seconds() / settle.Seconds())
			rate = keep*rate + (1-keep)*inst
		}
		p := Percent(rate, live, cfg.Period, cfg.Min, cfg.Max)
		if p == current {
			continue
		}
		cfg.Logger.Debug("gc: percent set", "percent", p, "alloc_rate", int64(rate), "live", int64(live))
		current = p
		set(p)
		if p == cfg.Min && now.Sub(freed) > time.Minute {
			// The node went quiet: what its busy spell left the heap
			// goes back to the system now. The runtime's own scavenger
			// would take minutes over it.
			freed = now
			debug.FreeOSMemory()
		}
	}
}
