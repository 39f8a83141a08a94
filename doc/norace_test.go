//go:build !race

package doc

// raceEnabled: see race_test.go.
const raceEnabled = false
