// Package gctune lets the garbage collector's headroom follow the load.
//
// Go collects when the heap has grown by GOGC percent (100) over what was
// live after the last collection, so a process holds up to twice its live
// heap. For a node holding many idle connections, nearly all of its heap is
// live and allocates almost nothing: the headroom is memory held for
// garbage that does not come. A busy node makes garbage fast, and each
// collection costs in proportion to what is live, so there the headroom
// buys CPU. The tuner looks at the allocation rate every second and sets
// the percent so that collections come no oftener than once per
// Config.Period at that rate, between Config.Min and Config.Max: a busy
// node keeps Max, a quiet one gives the memory back. The rate it goes by
// rises with the load's at once and falls over a few seconds; when it
// reaches Min the heap's free pages go back to the system at once (at
// most once a minute), which the runtime would do over minutes.
//
// Files: gctune.go, the choice of percent and the loop that applies it.
package gctune
