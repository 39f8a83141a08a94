package webhook

import (
	"encoding/json"
)

// On SQLite this node is the only writer of the windows, so it knows an
// open window as it last wrote it, and the next flush moves it on with
// one UPDATE: no INSERT that finds it there, no read of its state. On
// PostgreSQL other nodes write the same rows, and every flush reads them.
// A window a sweep closes is forgotten; one this node does not know, or
// that is gone when it writes, takes the path that reads.

// knownWindow is an open window as this node wrote it.
type knownWindow struct {
	opened, last int64
	window
}

// known returns the window of doc as this node last wrote it, or nil.
func (h *Hooks) known(doc string) *knownWindow {
	if h.store.postgres {
		return nil
	}
	h.wmu.Lock()
	defer h.wmu.Unlock()
	return h.windows[doc]
}

// moveKnown writes c to the open window kw of doc, and returns it as
// written; nil if the window is no longer there (a sweep closed it).
func (h *Hooks) moveKnown(st *txStmts, doc string, kw *knownWindow, c *docChange, users, heads []string) (*knownWindow, error) {
	headsAt := c.headsAt.UnixMilli()
	next := &knownWindow{opened: kw.opened, last: max(kw.last, c.last.UnixMilli())}
	next.Users = kw.Users
	if !containsAll(kw.Users, users) {
		next.Users = mergeUsers(kw.Users, users)
	}
	next.Heads, next.HeadsAt = heads, headsAt
	if kw.HeadsAt > headsAt {
		next.Heads, next.HeadsAt = kw.Heads, kw.HeadsAt
	}
	w, _ := json.Marshal(next.window)
	res, err := st.exec(`UPDATE tandem_webhook_windows SET last_at = ?, due_at = ?, state = ? WHERE document = ? AND opened_at = ?`,
		next.last, h.due(next.opened, next.last), string(w), doc, next.opened)
	if err != nil {
		return nil, err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return nil, nil
	}
	return next, nil
}

// containsAll reports whether the sorted users a hold every one of b.
func containsAll(a, b []string) bool {
	for _, u := range b {
		if !containsSorted(a, u) {
			return false
		}
	}
	return true
}

func containsSorted(a []string, u string) bool {
	lo, hi := 0, len(a)
	for lo < hi {
		m := (lo + hi) / 2
		switch {
		case a[m] == u:
			return true
		case a[m] < u:
			lo = m + 1
		default:
			hi = m
		}
	}
	return false
}

// startLearning begins a flush's record of the windows a sweep forgets
// while it writes: those it learned are not taken as known then.
func (h *Hooks) startLearning() {
	if h.store.postgres {
		return
	}
	h.wmu.Lock()
	h.forgotten = map[string]bool{}
	h.wmu.Unlock()
}

// learn takes in what a flush wrote, once its transaction committed (a
// nil window: one it no longer knows), unless a sweep closed the window
// meanwhile; at most MaxPendingDocuments windows are known.
func (h *Hooks) learn(wrote map[string]*knownWindow) {
	if h.store.postgres {
		return
	}
	h.wmu.Lock()
	defer h.wmu.Unlock()
	for doc, kw := range wrote {
		_, had := h.windows[doc]
		switch {
		case kw == nil || h.forgotten[doc]:
			delete(h.windows, doc)
		case had || len(h.windows) < h.cfg.MaxPendingDocuments:
			h.windows[doc] = kw
		}
	}
	h.forgotten = nil
}

// unlearn forgets what a flush that failed was writing.
func (h *Hooks) unlearn(batch map[string]*docChange) {
	if h.store.postgres {
		return
	}
	h.wmu.Lock()
	defer h.wmu.Unlock()
	for doc := range batch {
		delete(h.windows, doc)
	}
	h.forgotten = nil
}

// forget drops a window a sweep is closing.
func (h *Hooks) forget(doc string) {
	if h.store.postgres {
		return
	}
	h.wmu.Lock()
	defer h.wmu.Unlock()
	delete(h.windows, doc)
	if h.forgotten != nil {
		h.forgotten[doc] = true
	}
}
