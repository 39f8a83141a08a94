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
	// Min is the least percent; default 10. The CPU bound, not Min,
	// keeps a quiet process with a large heap from collecting too often.
	Min int
	// CPU is the share of one core the collector may take at the
	// allocation rate of the moment; default 0.02.
	CPU float64
	// Every is how often it looks; default 1s.
	Every time.Duration
	// OnChange, when set, receives each percent set.
	OnChange func(percent int)
	// Release, when set, gives back memory held outside Go's heap (C):
	// called at the look after the heap's free pages went back at Min,
	// when the finalizers of that collection have freed what they hold,
	// and then every Quiet while the process stays at Min; never while
	// it is busier.
	Release func()
	// Quiet is how often a quiet process gives memory back; default 1
	// minute.
	Quiet time.Duration
	// Settle is how fast the rate the tuner goes by falls with the
	// load's: by a factor e each Settle; default 3s.
	Settle time.Duration
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Max <= 0 {
		c.Max = 100
	}
	if c.Min <= 0 {
		c.Min = min(10, c.Max)
	}
	if c.CPU <= 0 {
		c.CPU = 0.02
	}
	if c.Every <= 0 {
		c.Every = time.Second
	}
	if c.Quiet <= 0 {
		c.Quiet = time.Minute
	}
	if c.Settle <= 0 {
		c.Settle = 3 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Percent is the least GOGC percent, in steps of 5 within [lo, hi], at
// which a collector that spends cost seconds of CPU per live byte keeps
// within cpu of a core while the process allocates allocRate bytes a
// second. At percent p a collection comes every p/100 × live / allocRate
// seconds and costs cost × live, so it takes 100 × cost × allocRate / p
// of a core whatever the live heap.
func Percent(allocRate, cost, cpu float64, lo, hi int) int {
	p := 100 * cost * allocRate / cpu
	if math.IsNaN(p) || p > float64(hi) {
		return hi
	}
	// In steps of 5, so that small swings of the rate change nothing.
	return min(hi, max(lo, 5*int(math.Ceil(p/5))))
}

// defaultCost is the collector's cost per live byte until one is measured:
// a mark rate of 500 MB a second, on the slow side.
const defaultCost = 2e-9

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
	last := readStats()
	cost := defaultCost
	// forcedCost is what a collection costs per live byte with its idle
	// marking counted: a forced one, in a quiet process, is mostly that.
	forcedCost := defaultCost
	var rate float64 // up at once, down over a few seconds
	var freed, released time.Time
	releaseDue := false // the look after a collection that gave memory back
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := readStats()
		inst := (now.allocs - last.allocs) / now.at.Sub(last.at).Seconds()
		if cycles := now.cycles - last.cycles; cycles > 0 && now.live > 0 {
			// What the collections of the last look cost per live byte;
			// the idle-priority mark workers use CPU nothing else wanted.
			measured := (now.gcCPU - last.gcCPU) / (cycles * now.live)
			cost = (cost + measured) / 2
			forcedCost = (forcedCost + (now.gcCPUAll-last.gcCPUAll)/(cycles*now.live)) / 2
		}
		last = now
		if inst >= rate {
			rate = inst
		} else {
			keep := math.Exp(-cfg.Every.Seconds() / cfg.Settle.Seconds())
			rate = keep*rate + (1-keep)*inst
		}
		p := Percent(rate, cost, cfg.CPU, cfg.Min, cfg.Max)
		if cfg.Release != nil && (releaseDue || p == cfg.Min && current == cfg.Min && now.at.Sub(released) > cfg.Quiet) {
			releaseDue = false
			released = now.at
			cfg.Release()
		}
		wentQuiet := false
		if p != current {
			cfg.Logger.Debug("gc: percent set", "percent", p, "alloc_rate", int64(rate), "live", int64(now.live), "ns_per_live_kb", int64(cost*1e12))
			wentQuiet = p == cfg.Min
			current = p
			set(p)
		}
		// A release costs a collection: forcedCost × live seconds of CPU;
		// those not owed to going quiet come no more often than keeps
		// them within half the collector's share of a core.
		gap := time.Duration(forcedCost * now.live / (cfg.CPU / 2) * float64(time.Second))
		if shouldFree(now, current == cfg.Min, wentQuiet, now.at.Sub(freed), gap, cfg.Quiet) {
			// The runtime's own scavenger would take minutes over it, and
			// keeps a tenth above the heap's goal besides.
			freed = now.at
			debug.FreeOSMemory()
			// What is outside the heap goes back only from a quiet
			// process: Release may stall what allocates there.
			releaseDue = current == cfg.Min
		}
	}
}

// shouldFree says whether the heap's spare memory goes back to the system
// now: s is the look's reading, atMin whether the percent is Min (and
// wentQuiet whether it just became so), since the time since the last
// release, gap the least time between releases, quiet Config.Quiet.
func shouldFree(s stats, atMin, wentQuiet bool, since, gap, quiet time.Duration) bool {
	much := max(muchFree, s.live/8)
	switch {
	case atMin && wentQuiet:
		// What the busy spell left: once per Quiet, or whenever it is much.
		return s.spare >= much || since > quiet
	case atMin:
		// Free pages, not garbage: at Min, garbage up to a tenth of the
		// live heap is what the next collection is for.
		return s.free >= much && since >= gap
	}
	// Busy: the free pages are what the next collections' cycles reuse, up
	// to the heap's goal; far beyond it (a burst's, a first sync's) they
	// are not.
	return s.free >= much && s.retained > s.goal+s.goal/4 && since >= gap
}

// muchFree: memory worth a release (shouldFree) is at least this, and an
// eighth of the live heap.
const muchFree = 1 << 20

// stats is what the tuner reads of the runtime at each look.
type stats struct {
	at       time.Time
	allocs   float64 // bytes allocated since the start
	live     float64 // the heap live after the last collection
	spare    float64 // what a release would give back: free pages and garbage
	free     float64 // the heap's free pages not yet given back
	retained float64 // the heap's memory not given back: objects, unused and free
	goal     float64 // the heap's goal for the collection under way or next
	cycles   float64 // collections since the start
	gcCPU    float64 // CPU seconds of collection since the start, idle marking left out
	gcCPUAll float64 // the same with idle marking
}

var statNames = []string{
	"/gc/heap/allocs:bytes",
	"/gc/heap/live:bytes",
	"/gc/cycles/total:gc-cycles",
	"/cpu/classes/gc/total:cpu-seconds",
	"/cpu/classes/gc/mark/idle:cpu-seconds",
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/free:bytes",
	"/memory/classes/heap/unused:bytes",
	"/gc/heap/goal:bytes",
}

func readStats() stats {
	samples := make([]metrics.Sample, len(statNames))
	for i, n := range statNames {
		samples[i].Name = n
	}
	metrics.Read(samples)
	u := func(i int) float64 { return float64(samples[i].Value.Uint64()) }
	f := func(i int) float64 { return samples[i].Value.Float64() }
	return stats{at: time.Now(), allocs: u(0), live: u(1), cycles: u(2), gcCPU: f(3) - f(4), gcCPUAll: f(3),
		spare: u(5) + u(6) - u(1), free: u(6), retained: u(5) + u(6) + u(7), goal: u(8)}
}
