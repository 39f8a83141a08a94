package testenv

import "log/slog"

// QuietLogger discards everything: for components whose logs a test does
// not read.
func QuietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
