//go:build !linux || !cgo

package cmalloc

// LimitArenas does nothing here and reports false.
func LimitArenas(int) bool { return false }

// Trim does nothing here and reports false.
func Trim() bool { return false }

// Stats cannot read the C heap here: ok is false.
func Stats() (inUse, free uint64, ok bool) { return 0, 0, false }
