package webhook

import (
	"context"
	"database/sql"
	"slices"
	"strings"
	"time"

	"github.com/tandemhq/tandem/awareness"
)

// presence.entered, presence.left and user.status across a cluster.
//
// Presence history (awareness/history.go) already turns each node's
// presence into intervals, written in batches off the presence path every
// half second: one per user and document while the user has a tab there,
// one per user for its status, each ended when that changes. Tee passes
// those writes on to the history store and hands a copy to these Hooks,
// which mirror every run's open intervals in tandem_webhook_present. A
// user is in a document while some run has an interval open there, and
// its status is the best of its runs' status intervals; a batch is
// applied under one lock, and what it changes of either is an event,
// decided by the node whose batch changed it. A dead run's intervals end
// as history ends them (CloseDeadRuns), at its last beat.
//
// A stay shorter than the recorder's half second is not recorded, and so
// not announced.

// Tee is a HistoryStore that passes every call to the store it wraps and,
// once a write succeeded, hands a copy to Hooks without waiting: past
// MaxHandoff intervals waiting, the batch is dropped (counted).
type Tee struct {
	awareness.HistoryStore
	h *Hooks
}

// Tee wraps a presence history store (awareness.Config.History).
func (h *Hooks) Tee(inner awareness.HistoryStore) *Tee { return &Tee{HistoryStore: inner, h: h} }

var _ awareness.HistoryStore = (*Tee)(nil)

type presenceItem struct {
	opened []awareness.HistoryInterval
	closed []awareness.HistoryEnd
	beat   *runBeat
	dead   *deadRuns
}

type runBeat struct {
	run  int64
	node string
	at   time.Time
}

type deadRuns struct {
	node        string
	staleBefore time.Time
	keep        int64
}

func (t *Tee) WriteHistory(ctx context.Context, opened []awareness.HistoryInterval, closed []awareness.HistoryEnd) error {
	if err := t.HistoryStore.WriteHistory(ctx, opened, closed); err != nil {
		return err
	}
	// The recorder reuses its slices once the write returns.
	t.h.hand(presenceItem{opened: slices.Clone(opened), closed: slices.Clone(closed)})
	return nil
}

func (t *Tee) BeatHistory(ctx context.Context, run int64, node string, at time.Time) error {
	if err := t.HistoryStore.BeatHistory(ctx, run, node, at); err != nil {
		return err
	}
	t.h.hand(presenceItem{beat: &runBeat{run, node, at}})
	return nil
}

func (t *Tee) CloseDeadRuns(ctx context.Context, node string, staleBefore time.Time, keep int64) (int64, error) {
	n, err := t.HistoryStore.CloseDeadRuns(ctx, node, staleBefore, keep)
	if err == nil {
		t.h.hand(presenceItem{dead: &deadRuns{node, staleBefore, keep}})
	}
	return n, err
}

func (it *presenceItem) size() int64 { return int64(len(it.opened) + len(it.closed)) }

// hand queues an item for presenceLoop, or drops it if the hand-off is
// full.
func (h *Hooks) hand(it presenceItem) {
	if !h.sends[PresenceEntered] && !h.sends[PresenceLeft] && !h.sends[UserStatus] {
		return
	}
	n := it.size()
	if h.handoff.Add(n) > int64(h.cfg.MaxHandoff) {
		h.handoff.Add(-n)
		h.m.dropped.WithLabelValues("presence").Inc()
		return
	}
	select {
	case h.handed <- it:
		h.m.handoff.Set(float64(h.handoff.Load()))
	default:
		h.handoff.Add(-n)
		h.m.dropped.WithLabelValues("presence").Inc()
	}
}

// presenceLoop applies the items handed off, in order, each until it is
// applied or ctx ends.
func (h *Hooks) presenceLoop(ctx context.Context) {
	wait := 100 * time.Millisecond
	for {
		select {
		case <-ctx.Done():
			return
		case it := <-h.handed:
			for {
				err := h.applyPresence(ctx, &it)
				if err == nil || ctx.Err() != nil {
					break
				}
				h.log.Warn("webhook: applying presence", "err", err, "retry_in", wait)
				t := time.NewTimer(wait)
				select {
				case <-ctx.Done():
					t.Stop()
				case <-t.C:
				}
				wait = min(wait*2, 5*time.Second)
			}
			wait = 100 * time.Millisecond
			h.m.handoff.Set(float64(h.handoff.Add(-it.size())))
		}
	}
}

// drainPresence applies what is still handed off, once each (the stop).
func (h *Hooks) drainPresence(ctx context.Context) {
	for {
		select {
		case it := <-h.handed:
			if err := h.applyPresence(ctx, &it); err != nil {
				h.log.Warn("webhook: applying presence at the stop", "err", err)
			}
			h.m.handoff.Set(float64(h.handoff.Add(-it.size())))
		default:
			return
		}
	}
}

// presenceKey is a user in a document, or its status for doc "".
type presenceKey struct{ doc, user string }

// presenceState is a key's rows at a moment.
type presenceState struct {
	here   bool   // some run has the key open
	status string // the best status among them: online, away, or offline
	name   string
}

func (h *Hooks) applyPresence(ctx context.Context, it *presenceItem) error {
	return h.decide(ctx, func(tx *sql.Tx) ([]message, error) {
		if err := h.store.lockPresence(ctx, tx); err != nil {
			return nil, err
		}
		switch {
		case it.beat != nil:
			return nil, h.store.beat(ctx, tx, it.beat)
		case it.dead != nil:
			return h.endDeadRuns(ctx, tx, it.dead)
		}
		return h.applyIntervals(ctx, tx, it.opened, it.closed)
	})
}

func (h *Hooks) applyIntervals(ctx context.Context, tx *sql.Tx, opened []awareness.HistoryInterval, closed []awareness.HistoryEnd) ([]message, error) {
	s := h.store
	at := map[presenceKey]time.Time{}
	var keys []presenceKey
	note := func(k presenceKey, t time.Time) {
		if _, ok := at[k]; !ok {
			keys = append(keys, k)
		}
		if t.After(at[k]) {
			at[k] = t
		}
	}
	// The ends' keys, a run's seqs at a time (a batch is one run's).
	ends := map[int64][]any{} // run → seqs mirrored here
	seqs := map[int64][]any{}
	endAt := map[[2]int64]time.Time{}
	for _, e := range closed {
		seqs[e.Run] = append(seqs[e.Run], e.Seq)
		endAt[[2]int64{e.Run, e.Seq}] = e.To
	}
	for run, all := range seqs {
		for chunk := range slices.Chunk(all, sqlChunk) {
			rows, err := tx.QueryContext(ctx, s.q(`SELECT seq, doc, user_id FROM tandem_webhook_present WHERE run = ? AND seq IN (`+marks(len(chunk))+`)`),
				append([]any{run}, chunk...)...)
			if err != nil {
				return nil, err
			}
			for rows.Next() {
				var seq int64
				var k presenceKey
				if err := rows.Scan(&seq, &k.doc, &k.user); err != nil {
					rows.Close()
					return nil, err
				}
				note(k, endAt[[2]int64{run, seq}])
				ends[run] = append(ends[run], seq)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return nil, err
			}
		}
	}
	// Opened and ended within one batch: shorter than a read, not told.
	var open []awareness.HistoryInterval
	runs := map[int64]int64{} // run → its earliest interval here
	for _, iv := range opened {
		if !iv.To.IsZero() {
			continue
		}
		open = append(open, iv)
		note(presenceKey{iv.Doc, iv.User}, iv.From)
		if f, ok := runs[iv.Run]; !ok || iv.From.UnixMilli() < f {
			runs[iv.Run] = iv.From.UnixMilli()
		}
	}
	before, err := h.states(ctx, tx, keys)
	if err != nil {
		return nil, err
	}
	for chunk := range slices.Chunk(open, sqlChunk/6) {
		args := make([]any, 0, 6*len(chunk))
		values := make([]string, len(chunk))
		for i, iv := range chunk {
			values[i] = "(?, ?, ?, ?, ?, ?)"
			args = append(args, iv.Run, iv.Seq, iv.Doc, iv.User, iv.Name, string(iv.Status))
		}
		if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO tandem_webhook_present (run, seq, doc, user_id, name, status)
			VALUES `+strings.Join(values, ", ")+` ON CONFLICT DO NOTHING`), args...); err != nil {
			return nil, err
		}
	}
	// A run is known by its intervals too, in case its beats were
	// dropped: its rows can then still be ended when it dies.
	for run, from := range runs {
		if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO tandem_webhook_runs (run, node, beat_ms) VALUES (?, '', ?) ON CONFLICT DO NOTHING`),
			run, from); err != nil {
			return nil, err
		}
	}
	for run, all := range ends {
		for chunk := range slices.Chunk(all, sqlChunk) {
			if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM tandem_webhook_present WHERE run = ? AND seq IN (`+marks(len(chunk))+`)`),
				append([]any{run}, chunk...)...); err != nil {
				return nil, err
			}
		}
	}
	after, err := h.states(ctx, tx, keys)
	if err != nil {
		return nil, err
	}
	return h.presenceEvents(ctx, tx, keys, before, after, func(k presenceKey) time.Time { return at[k] })
}

// sqlChunk bounds the parameters of one statement (SQLite allows 32,766).
const sqlChunk = 500

// marks is n placeholders, comma-separated.
func marks(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

// states reads the keys' rows, their users' rows a chunk at a time.
func (h *Hooks) states(ctx context.Context, tx *sql.Tx, keys []presenceKey) (map[presenceKey]presenceState, error) {
	out := make(map[presenceKey]presenceState, len(keys))
	var users []any
	seen := map[string]bool{}
	for _, k := range keys {
		out[k] = presenceState{status: string(awareness.StatusOffline)}
		if !seen[k.user] {
			seen[k.user] = true
			users = append(users, k.user)
		}
	}
	for chunk := range slices.Chunk(users, sqlChunk) {
		rows, err := tx.QueryContext(ctx, h.store.q(`SELECT doc, user_id, status, name FROM tandem_webhook_present WHERE user_id IN (`+marks(len(chunk))+`)`), chunk...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var k presenceKey
			var status, name string
			if err := rows.Scan(&k.doc, &k.user, &status, &name); err != nil {
				rows.Close()
				return nil, err
			}
			st, ok := out[k]
			if !ok {
				continue // another document of the user's
			}
			st.here = true
			if status == string(awareness.StatusOnline) || st.status == string(awareness.StatusOffline) {
				st.status = status
			}
			if st.name == "" {
				st.name = name
			}
			out[k] = st
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// presenceEvents turns what changed of each key into events and queues
// them.
func (h *Hooks) presenceEvents(ctx context.Context, tx *sql.Tx, keys []presenceKey, before, after map[presenceKey]presenceState, at func(presenceKey) time.Time) ([]message, error) {
	var msgs []message
	add := func(typ string, t time.Time, data any) error {
		m, err := newMessage(typ, t, data)
		if err == nil {
			msgs = append(msgs, m)
		}
		return err
	}
	for _, k := range keys {
		b, a, t := before[k], after[k], at(k)
		var err error
		switch {
		case k.doc == "" && a.status != b.status:
			err = add(UserStatus, t, UserStatusData{UserID: k.user, Status: a.status, At: t.UnixMilli()})
		case k.doc != "" && !b.here && a.here:
			err = add(PresenceEntered, t, PresenceData{DocumentID: k.doc, UserID: k.user, Name: a.name, At: t.UnixMilli()})
		case k.doc != "" && b.here && !a.here:
			err = add(PresenceLeft, t, PresenceData{DocumentID: k.doc, UserID: k.user, Name: b.name, At: t.UnixMilli()})
		}
		if err != nil {
			return nil, err
		}
	}
	return h.enqueue(ctx, tx, msgs)
}

// beat records a run's beat.
func (s *store) beat(ctx context.Context, tx *sql.Tx, b *runBeat) error {
	_, err := tx.ExecContext(ctx, s.q(`INSERT INTO tandem_webhook_runs (run, node, beat_ms) VALUES (?, ?, ?)
		ON CONFLICT (run) DO UPDATE SET node = excluded.node, beat_ms = excluded.beat_ms`), b.run, b.node, b.at.UnixMilli())
	return err
}

// endDeadRuns deletes the rows of the runs whose last beat is before
// staleBefore (of node, or any node's for ""), but keep's, as the
// history store ends their intervals; what that changes is told as of
// each run's last beat.
func (h *Hooks) endDeadRuns(ctx context.Context, tx *sql.Tx, d *deadRuns) ([]message, error) {
	s := h.store
	query := `SELECT run, beat_ms FROM tandem_webhook_runs WHERE beat_ms < ? AND run <> ?`
	args := []any{d.staleBefore.UnixMilli(), d.keep}
	if d.node != "" {
		query += ` AND node = ?`
		args = append(args, d.node)
	}
	rows, err := tx.QueryContext(ctx, s.q(query), args...)
	if err != nil {
		return nil, err
	}
	beats := map[int64]int64{}
	for rows.Next() {
		var run, beat int64
		if err := rows.Scan(&run, &beat); err != nil {
			rows.Close()
			return nil, err
		}
		beats[run] = beat
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(beats) == 0 {
		return nil, nil
	}
	at := map[presenceKey]time.Time{}
	var keys []presenceKey
	for run, beat := range beats {
		rows, err := tx.QueryContext(ctx, s.q(`SELECT doc, user_id FROM tandem_webhook_present WHERE run = ?`), run)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var k presenceKey
			if err := rows.Scan(&k.doc, &k.user); err != nil {
				rows.Close()
				return nil, err
			}
			if _, ok := at[k]; !ok {
				keys = append(keys, k)
			}
			if t := time.UnixMilli(beat); t.After(at[k]) {
				at[k] = t
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	before, err := h.states(ctx, tx, keys)
	if err != nil {
		return nil, err
	}
	for run := range beats {
		if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM tandem_webhook_present WHERE run = ?`), run); err != nil {
			return nil, err
		}
		if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM tandem_webhook_runs WHERE run = ?`), run); err != nil {
			return nil, err
		}
	}
	after, err := h.states(ctx, tx, keys)
	if err != nil {
		return nil, err
	}
	return h.presenceEvents(ctx, tx, keys, before, after, func(k presenceKey) time.Time { return at[k] })
}
