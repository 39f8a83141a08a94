package awareness

import "errors"

// ErrUnstorable is wrapped by the error of a LastSeenStore or HistoryStore
// that refused a write for the data it was given (text holding a NUL, a
// key over the store's limit), not because it is out of reach: the same
// write fails again. The hub then writes the batch row by row and drops
// the rows refused so (counted in tandem_presence_store_refused_total and
// logged), so that one bad row never keeps the others from the store.
var ErrUnstorable = errors.New("the store cannot hold this data")
