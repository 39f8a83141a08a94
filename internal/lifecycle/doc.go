// Package lifecycle is the one way Tandem's long-lived components run and
// stop. Each is built by New(cfg) (*X, error), which validates and starts
// nothing; Run(ctx) does its work until ctx ends or Close is called, and
// returns nil on such a stop; Close(ctx) stops Run, waits for it (or for
// ctx), then releases what the component holds. Close is safe to call
// twice, and without Run. A component embeds a Loop to keep that promise,
// and a Background for work off its loop (timers, retries) that Close
// waits for.
package lifecycle
