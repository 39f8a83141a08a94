package history

import "errors"

// ErrTooMany is returned by a read when more intervals than its limit
// match: the caller narrows the window rather than getting part of it.
var ErrTooMany = errors.New("history: more intervals than the limit")
