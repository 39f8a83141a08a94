// Package gctune lets the garbage collector's headroom follow the load.
//
// Go collects when the heap has grown by GOGC percent (100) over what was
// live after the last collection, so a process holds up to twice its live
// heap. For a node holding many idle connections, nearly all of its heap is
// live and it allocates almost nothing: the headroom is memory held for
// garbage that does not come. A busy node makes garbage fast, and there the
// headroom buys CPU: a collection costs in proportion to what is live, and
// at percent p one comes every p/100 × live / rate seconds, so the
// collector takes 100 × cost × rate / p of a core whatever the heap's size.
//
// Every second the tuner measures the allocation rate and what a
// collection costs per live byte, and sets the least percent at which the
// collector keeps within Config.CPU of a core (2%), between Config.Min (10)
// and Config.Max (GOGC, 100): a busy node keeps Max, a quiet one gives the
// memory back. The rate it goes by rises with the load's at once and falls
// over a few seconds.
//
// When the percent reaches Min, the heap's free pages go back to the
// system at once (which the runtime would do over minutes), if the busy
// spell left much (1 MiB and an eighth of the live heap) or none went back
// for a minute; while it stays there, whenever its free pages are that
// much again. At any percent, that much free memory held beyond a quarter
// over the heap's goal (a burst's, such as a large document's first sync)
// goes back too. Each release is a collection: those not owed to going
// quiet come no more often than keeps them within half of Config.CPU.
// Config.Release gives back what is held outside Go's heap, only at Min:
// at the look after a release, once the finalizers of that collection
// have run, and then once a minute while the process stays quiet.
//
// Files: gctune.go, the choice of percent and the loop that applies it.
package gctune
