package store

import "errors"

// ErrNotFound is returned by a Store for a document it does not have.
var ErrNotFound = errors.New("document not found")
