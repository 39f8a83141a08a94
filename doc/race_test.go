//go:build race

package doc

// raceEnabled: the test binary, and so the save worker it serves as, is
// built with the race detector, which keeps shadow memory of its own.
const raceEnabled = true
