package testenv

import (
	"log/slog"
	"os"
)

// QuietLogger discards everything: for components whose logs a test does
// not read. With TANDEM_TEST_LOG=debug in the environment it writes
// everything to stderr instead, to see what a failing test's parts did.
func QuietLogger() *slog.Logger {
	if os.Getenv("TANDEM_TEST_LOG") == "debug" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}
