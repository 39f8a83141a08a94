package webhook

import (
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"runtime"
	"slices"
	"time"
	"unicode/utf8"
)

// document.changed across a cluster. Each node notes its own peers'
// changes in memory (noteChange, called by the room's observer), and
// every FlushEvery writes them to their documents' windows, one row per
// document shared by every node: the first write opens the window, each
// one moves its due time to the last change plus Debounce, never past
// its opening plus MaxWait. Every SweepEvery each node closes the windows
// due: the one whose transaction deletes a window queues its event, so a
// document edited on three nodes within one window is one event. A change
// written after its window closed opens the next one.

// docChange is what this node holds of a document's changes since its
// last flush.
type docChange struct {
	users          map[string]bool
	usersTruncated bool
	unnamed        []interface{ ID() string } // peers without a verified identity, for Config.Author
	heads          [][32]byte
	headsAt        time.Time // when the heads were noted
	// local says a local peer's changes are among these; first and last
	// are theirs. An entry without is heads alone: the document's as
	// other nodes' changes reached it, for a window it helps name.
	local       bool
	first, last time.Time
	created     bool
	cost        int // charged to Hooks.pendingBytes
}

// The bytes a pending entry is charged: what its map entry, strings and
// slices take, roughly, and never less.
const (
	docCost  = 256
	userCost = 64
	headCost = 32
	peerCost = 32
)

// noteChange notes that a local peer changed a document, which now has
// these heads. It is called under the room's apply lock: it only updates a
// map, or drops the change (counted) past MaxPendingDocuments or
// MaxPendingBytes.
func (h *Hooks) noteChange(docID string, user string, by interface{ ID() string }, heads [][32]byte, created bool) {
	if !h.sends[DocumentChanged] && !(created && h.sends[DocumentCreated]) {
		return
	}
	h.note(docID, clip(user, MaxUserID), by, heads, created, true)
}

// noteHeads notes a document's heads after changes from the store or
// another node, for the window its local changes opened: a window that
// several nodes write names the heads noted last, which may take in
// every node's changes. Called under the room's apply lock, as noteChange.
func (h *Hooks) noteHeads(docID string, heads [][32]byte) {
	if h.sends[DocumentChanged] {
		h.note(docID, "", nil, heads, false, false)
	}
}

func (h *Hooks) note(docID string, user string, by interface{ ID() string }, heads [][32]byte, created, local bool) {
	heads = heads[:min(len(heads), MaxHeads+1)]
	now := h.cfg.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	defer h.flushIfHalfFull()
	c := h.pending[docID]
	if c == nil {
		cost := docCost + len(docID) // the heads are charged below
		if len(h.pending) >= h.cfg.MaxPendingDocuments || h.pendingBytes+cost+headCost*len(heads) > h.cfg.MaxPendingBytes {
			h.m.dropped.WithLabelValues("pending").Inc()
			return
		}
		c = &docChange{users: map[string]bool{}, cost: cost}
		h.pending[docID] = c
		h.pendingBytes += cost
		h.m.pending.Set(float64(len(h.pending)))
	}
	if local {
		if !c.local {
			c.local, c.first = true, now
		}
		c.last = now
		c.created = c.created || created
	}
	if d := headCost * (len(heads) - len(c.heads)); d <= 0 || h.pendingBytes+d <= h.cfg.MaxPendingBytes {
		c.heads = append(c.heads[:0], heads...)
		c.headsAt = now
		c.cost += d
		h.pendingBytes += d
	} else {
		h.m.dropped.WithLabelValues("pending").Inc() // the heads stay those noted before
	}
	switch {
	case user != "":
		if c.users[user] {
			return
		}
		if len(c.users) >= MaxUsers {
			c.usersTruncated = true
			return
		}
		if h.pendingBytes+userCost+len(user) > h.cfg.MaxPendingBytes {
			c.usersTruncated = true
			h.m.dropped.WithLabelValues("pending").Inc()
			return
		}
		c.users[user] = true
		c.cost += userCost + len(user)
		h.pendingBytes += userCost + len(user)
	case by != nil && h.cfg.Author != nil && len(c.unnamed) < MaxUsers && h.pendingBytes+peerCost <= h.cfg.MaxPendingBytes:
		if !slices.Contains(c.unnamed, by) {
			c.unnamed = append(c.unnamed, by)
			c.cost += peerCost
			h.pendingBytes += peerCost
		}
	}
}

// flushIfHalfFull asks for a flush before its time once pending holds
// half of what its bounds allow, so that a node with many documents
// edited writes them before the bounds drop their changes. The caller
// holds h.mu.
func (h *Hooks) flushIfHalfFull() {
	if 2*len(h.pending) >= h.cfg.MaxPendingDocuments || 2*h.pendingBytes >= h.cfg.MaxPendingBytes {
		select {
		case h.flushSoon <- struct{}{}:
		default:
		}
	}
}

// addUser adds a user to an entry taken out of pending (flush).
func (c *docChange) addUser(u string) {
	if c.users[u] {
		return
	}
	if len(c.users) >= MaxUsers {
		c.usersTruncated = true
		return
	}
	c.users[u] = true
}

// clip cuts s to at most n bytes, at a character's start.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// flush writes what this node holds to the windows, in one transaction;
// what fails is kept for the next flush.
func (h *Hooks) flush(ctx context.Context) {
	h.mu.Lock()
	batch := h.pending
	if len(batch) == 0 {
		h.mu.Unlock()
		return
	}
	h.pending = map[string]*docChange{}
	h.pendingBytes = 0
	h.flushing = batch
	h.m.pending.Set(0)
	h.mu.Unlock()
	for id, c := range batch {
		for _, p := range c.unnamed {
			if u, _ := h.cfg.Author(id, p); u != "" {
				c.addUser(clip(u, MaxUserID))
			}
		}
		c.unnamed = nil
	}
	h.startLearning()
	var wrote map[string]*knownWindow
	err := h.decide(ctx, func(tx *sql.Tx) ([]message, error) {
		var msgs []message
		var err error
		msgs, wrote, err = h.writeWindows(ctx, tx, batch)
		return msgs, err
	})
	if err == nil {
		h.learn(wrote)
		h.mu.Lock()
		h.flushing = nil
		h.mu.Unlock()
		return
	}
	h.unlearn(batch)
	if ctx.Err() == nil {
		h.log.Warn("webhook: writing document changes", "documents", len(batch), "err", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.flushing = nil
	for id, c := range batch {
		c.cost = docCost + len(id) + headCost*len(c.heads)
		for u := range c.users {
			c.cost += userCost + len(u)
		}
		if n := h.pending[id]; n != nil { // newer changes came meanwhile
			if c.local {
				if !n.local {
					n.local, n.last = true, c.last
				}
				n.first = c.first
			}
			n.created = n.created || c.created
			for u := range c.users {
				if !n.users[u] && h.pendingBytes+userCost+len(u) <= h.cfg.MaxPendingBytes {
					n.addUser(u)
					h.pendingBytes += userCost + len(u)
					n.cost += userCost + len(u)
				}
			}
			n.usersTruncated = n.usersTruncated || c.usersTruncated
			continue
		}
		if len(h.pending) >= h.cfg.MaxPendingDocuments || h.pendingBytes+c.cost > h.cfg.MaxPendingBytes {
			h.m.dropped.WithLabelValues("pending").Inc()
			continue
		}
		h.pending[id] = c
		h.pendingBytes += c.cost
	}
	h.m.pending.Set(float64(len(h.pending)))
}

// heldLast returns when the last of the changes of doc that this node
// holds and has not yet written (pending, or in the flush under way) was
// made, Unix ms; false if it holds none.
func (h *Hooks) heldLast(doc string) (int64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var last int64
	held := false
	for _, m := range []map[string]*docChange{h.pending, h.flushing} {
		if c := m[doc]; c != nil && c.local {
			last, held = max(last, c.last.UnixMilli()), true
		}
	}
	return last, held
}

// window is a document's debounce window as stored.
type window struct {
	Users   []string `json:"u"`
	Heads   []string `json:"h"`
	HeadsAt int64    `json:"t"` // when they were noted (Unix ms)
}

// due is when a window opened at opened, whose last change was at last,
// closes: Debounce after the last change, at most MaxWait after it opened.
func (h *Hooks) due(opened, last int64) int64 {
	return min(opened+h.cfg.MaxWait.Milliseconds(), last+h.cfg.Debounce.Milliseconds())
}

// writeWindows writes a batch of documents' changes to their windows, in
// the documents' order (so that nodes lock rows in one order), and claims
// the documents created. On SQLite it also returns the windows as it
// wrote them, for learn (nil: one it no longer knows).
func (h *Hooks) writeWindows(ctx context.Context, tx *sql.Tx, batch map[string]*docChange) ([]message, map[string]*knownWindow, error) {
	s := h.store
	st := s.stmts(ctx, tx)
	defer st.close()
	ids := make([]string, 0, len(batch))
	for id := range batch {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var msgs []message
	wrote := map[string]*knownWindow{}
	for i, id := range ids {
		yieldEvery(i)
		c := batch[id]
		users := make([]string, 0, len(c.users))
		for u := range c.users {
			users = append(users, u)
		}
		slices.Sort(users)
		if c.usersTruncated {
			users = append(users, "") // one more than MaxUsers: the window says truncated
		}
		heads := make([]string, len(c.heads))
		for i, hd := range c.heads {
			heads[i] = hex.EncodeToString(hd[:])
		}
		slices.Sort(heads)
		if c.created && h.sends[DocumentCreated] {
			res, err := st.exec(`INSERT INTO tandem_webhook_documents (document, at) VALUES (?, ?) ON CONFLICT DO NOTHING`,
				id, c.first.UnixMilli())
			if err != nil {
				return nil, nil, err
			}
			if n, _ := res.RowsAffected(); n == 1 {
				m, err := newMessage(DocumentCreated, c.first, DocumentCreatedData{DocumentID: id, Users: trimUsers(users)})
				if err != nil {
					return nil, nil, err
				}
				msgs = append(msgs, m)
			}
		}
		if !h.sends[DocumentChanged] {
			continue
		}
		lock := `SELECT opened_at, last_at, state FROM tandem_webhook_windows WHERE document = ?`
		if s.postgres {
			lock += " FOR UPDATE"
		}
		headsAt := c.headsAt.UnixMilli()
		if !c.local {
			// Heads alone: newer ones name an open window's, which they
			// never open.
			wrote[id] = nil
			var opened, last int64
			var stored string
			err := st.queryRow(lock, id).Scan(&opened, &last, &stored)
			if errors.Is(err, sql.ErrNoRows) {
				continue
			}
			if err != nil {
				return nil, nil, err
			}
			var old window
			json.Unmarshal([]byte(stored), &old)
			if old.HeadsAt >= headsAt {
				continue
			}
			old.Heads, old.HeadsAt = heads, headsAt
			w, _ := json.Marshal(old)
			if _, err := st.exec(`UPDATE tandem_webhook_windows SET state = ? WHERE document = ?`, string(w), id); err != nil {
				return nil, nil, err
			}
			continue
		}
		if kw := h.known(id); kw != nil {
			next, err := h.moveKnown(st, id, kw, c, users, heads)
			if err != nil {
				return nil, nil, err
			}
			if wrote[id] = next; next != nil {
				continue
			}
		}
		first, last := c.first.UnixMilli(), c.last.UnixMilli()
		w, _ := json.Marshal(window{Users: users, Heads: heads, HeadsAt: headsAt})
		res, err := st.exec(`INSERT INTO tandem_webhook_windows (document, opened_at, last_at, due_at, state)
			VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`, id, first, last, h.due(first, last), string(w))
		if err != nil {
			return nil, nil, err
		}
		if n, _ := res.RowsAffected(); n == 1 {
			wrote[id] = &knownWindow{opened: first, last: last, window: window{Users: users, Heads: heads, HeadsAt: headsAt}}
			continue // opened
		}
		var opened, was int64
		var stored string
		err = st.queryRow(lock, id).Scan(&opened, &was, &stored)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, nil, errors.New("webhook: a window closed under a write; written again next time")
		}
		if err != nil {
			return nil, nil, err
		}
		var old window
		json.Unmarshal([]byte(stored), &old)
		merged := mergeUsers(old.Users, users)
		last = max(last, was)
		if old.HeadsAt > headsAt {
			heads, headsAt = old.Heads, old.HeadsAt // noted later, on another node
		}
		now := &knownWindow{opened: opened, last: last, window: window{Users: merged, Heads: heads, HeadsAt: headsAt}}
		w, _ = json.Marshal(now.window)
		if _, err := st.exec(`UPDATE tandem_webhook_windows SET last_at = ?, due_at = ?, state = ? WHERE document = ?`,
			last, h.due(opened, last), string(w), id); err != nil {
			return nil, nil, err
		}
		wrote[id] = now
	}
	msgs, err := h.enqueue(ctx, tx, msgs)
	return msgs, wrote, err
}

// yieldBatch is how many documents a flush or a sweep works through
// before it lets other goroutines run: about half a millisecond of work.
const yieldBatch = 16

// yieldEvery lets the goroutines waiting for this one's core run, once
// every yieldBatch documents (i counts them). A flush of a thousand
// documents' windows is several milliseconds of one core in SQLite; Go
// has no priorities, so without a yield the presence and sync goroutines
// queued behind it on a busy node wait for the whole of it, and their
// tail latency grows by as much.
func yieldEvery(i int) {
	if i%yieldBatch == yieldBatch-1 {
		runtime.Gosched()
	}
}

// mergeUsers is the sorted union of two windows' users, with "" (one past
// MaxUsers) marking truncation.
func mergeUsers(a, b []string) []string {
	set := map[string]bool{}
	trunc := false
	for _, l := range [][]string{a, b} {
		for _, u := range l {
			if u == "" {
				trunc = true
				continue
			}
			set[u] = true
		}
	}
	out := make([]string, 0, len(set))
	for u := range set {
		out = append(out, u)
	}
	slices.Sort(out)
	if len(out) > MaxUsers {
		out, trunc = out[:MaxUsers], true
	}
	if trunc {
		out = append(out, "")
	}
	return out
}

// trimUsers drops the truncation mark.
func trimUsers(u []string) []string {
	if len(u) > 0 && u[len(u)-1] == "" {
		u = u[:len(u)-1]
	}
	if u == nil {
		u = []string{}
	}
	return u
}

// closeDue is the time (Unix ms) up to which a window due is closed now.
// On PostgreSQL, where other nodes write the same windows, that is
// FlushEvery ago: a change another node made before the window was due
// reaches it at that node's next flush, and a sweep here knows nothing
// of it (heldLast is this node's), so a window closed at once would
// leave that change to open a second one. On SQLite the node is alone,
// and heldLast keeps a window open for what it holds.
func (h *Hooks) closeDue() int64 {
	now := h.cfg.Now().UnixMilli()
	if h.store.postgres {
		return now - h.cfg.FlushEvery.Milliseconds()
	}
	return now
}

// sweepBatch bounds the windows one sweep transaction closes.
const sweepBatch = 256

// sweep closes the windows due and queues their events; several nodes
// may sweep at once, and each window is closed by one of them.
func (h *Hooks) sweep(ctx context.Context) {
	// A read first: an idle node takes no write lock (SQLite's is the
	// whole database's) four times a second.
	var one int
	err := h.store.db.QueryRowContext(ctx, h.store.q(`SELECT 1 FROM tandem_webhook_windows WHERE due_at <= ? LIMIT 1`),
		h.closeDue()).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return
	}
	if err != nil {
		if ctx.Err() == nil {
			h.log.Warn("webhook: looking for windows due", "err", err)
		}
		return
	}
	for {
		n := 0
		err := h.decide(ctx, func(tx *sql.Tx) ([]message, error) {
			msgs, err := h.closeWindows(ctx, tx)
			n = len(msgs)
			return msgs, err
		})
		if err != nil {
			if ctx.Err() == nil {
				h.log.Warn("webhook: closing windows", "err", err)
			}
			return
		}
		if n < sweepBatch {
			return
		}
	}
}

func (h *Hooks) closeWindows(ctx context.Context, tx *sql.Tx) ([]message, error) {
	s := h.store
	query := `SELECT document, opened_at, last_at, state FROM tandem_webhook_windows WHERE due_at <= ? ORDER BY due_at LIMIT ?`
	if s.postgres {
		query += " FOR UPDATE SKIP LOCKED"
	}
	rows, err := tx.QueryContext(ctx, s.q(query), h.closeDue(), sweepBatch)
	if err != nil {
		return nil, err
	}
	type due struct {
		doc         string
		opened, ast int64
		stored      string
	}
	var all []due
	for rows.Next() {
		var d due
		if err := rows.Scan(&d.doc, &d.opened, &d.ast, &d.stored); err != nil {
			rows.Close()
			return nil, err
		}
		all = append(all, d)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	st := s.stmts(ctx, tx)
	defer st.close()
	now := h.cfg.Now().UnixMilli()
	var msgs []message
	for i, d := range all {
		yieldEvery(i)
		// A change this node holds unwritten, made after the window's
		// last, keeps it open to the debounce after it (never past the
		// maximum wait): a flush that takes longer than the debounce
		// (1,000 documents on a busy PostgreSQL) must not split every
		// document's changes into windows of one flush each.
		if last, ok := h.heldLast(d.doc); ok && last > d.ast && h.due(d.opened, last) > now {
			if _, err := st.exec(`UPDATE tandem_webhook_windows SET due_at = ? WHERE document = ?`, h.due(d.opened, last), d.doc); err != nil {
				return nil, err
			}
			continue
		}
		h.forget(d.doc)
		if _, err := st.exec(`DELETE FROM tandem_webhook_windows WHERE document = ?`, d.doc); err != nil {
			return nil, err
		}
		var w window
		json.Unmarshal([]byte(d.stored), &w)
		data := DocumentChangedData{DocumentID: d.doc, Heads: w.Heads, Users: trimUsers(w.Users), FirstChangeAt: d.opened, LastChangeAt: d.ast}
		data.UsersTruncated = len(data.Users) < len(w.Users)
		if len(data.Heads) > MaxHeads {
			data.Heads, data.HeadsTruncated = data.Heads[:MaxHeads], true
		}
		if data.Heads == nil {
			data.Heads = []string{}
		}
		m, err := newMessage(DocumentChanged, time.UnixMilli(d.ast), data)
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, m)
	}
	return h.enqueue(ctx, tx, msgs)
}
