package notify

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// dialect is the SQL flavour of the store's database.
type dialect int

const (
	sqlite dialect = iota
	postgres
)

// store holds open windows and notifications. Every method that changes
// state takes the transaction of the job it belongs to.
type store struct {
	db      *sql.DB
	dialect dialect
}

// q rewrites ? placeholders to $n for PostgreSQL.
func (s *store) q(query string) string {
	if s.dialect != postgres {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func (s *store) migrate(ctx context.Context) error {
	serial, forever := "INTEGER PRIMARY KEY AUTOINCREMENT", "INTEGER"
	if s.dialect == postgres {
		serial, forever = "BIGSERIAL PRIMARY KEY", "BIGINT"
	}
	// Ids never repeat (AUTOINCREMENT, BIGSERIAL): a notification names the
	// window it came from, and a window id must not come back.
	stmts := []string{
		`CREATE TABLE IF NOT EXISTS tandem_notify_windows (
			id ` + serial + `,
			recipient TEXT NOT NULL,
			kind TEXT NOT NULL,
			document TEXT NOT NULL,
			title TEXT NOT NULL,
			verb TEXT NOT NULL,
			opened_at ` + forever + ` NOT NULL,
			due_at ` + forever + ` NOT NULL,
			last_at ` + forever + ` NOT NULL,
			events ` + forever + ` NOT NULL,
			actors TEXT NOT NULL,
			actor_count ` + forever + ` NOT NULL,
			payload TEXT NOT NULL,
			UNIQUE (recipient, kind, document)
		)`,
		`CREATE INDEX IF NOT EXISTS tandem_notify_windows_due ON tandem_notify_windows (due_at)`,
		// Events queued but not folded yet, by the id of their job: a
		// window closes only once none of the events of its time is left.
		`CREATE TABLE IF NOT EXISTS tandem_notify_pending (
			job_id ` + forever + ` PRIMARY KEY,
			recipient TEXT NOT NULL,
			kind TEXT NOT NULL,
			document TEXT NOT NULL,
			at ` + forever + ` NOT NULL
		)`,
		`CREATE INDEX IF NOT EXISTS tandem_notify_pending_key ON tandem_notify_pending (recipient, kind, document, at)`,
		`CREATE TABLE IF NOT EXISTS tandem_notifications (
			id ` + serial + `,
			window_id ` + forever + ` NOT NULL UNIQUE,
			recipient TEXT NOT NULL,
			kind TEXT NOT NULL,
			document TEXT NOT NULL,
			title TEXT NOT NULL,
			text TEXT NOT NULL,
			actors TEXT NOT NULL,
			actor_count ` + forever + ` NOT NULL,
			events ` + forever + ` NOT NULL,
			payload TEXT NOT NULL,
			first_at ` + forever + ` NOT NULL,
			last_at ` + forever + ` NOT NULL,
			created_at ` + forever + ` NOT NULL,
			read_at ` + forever + `
		)`,
		`CREATE INDEX IF NOT EXISTS tandem_notifications_recipient ON tandem_notifications (recipient, id)`,
	}
	for _, st := range stmts {
		if _, err := s.db.ExecContext(ctx, st); err != nil {
			return fmt.Errorf("notify: migrate: %w", err)
		}
	}
	return nil
}

// window is an open aggregation window.
type window struct {
	id                      int64
	recipient, kind, doc    string
	title, verb             string
	openedAt, dueAt, lastAt int64
	events                  int64
	actors                  []Actor
	actorCount              int64
	payload                 json.RawMessage
}

// addPending records a queued event.
func (s *store) addPending(ctx context.Context, tx *sql.Tx, jobID int64, e *Event) error {
	_, err := tx.ExecContext(ctx, s.q(`INSERT INTO tandem_notify_pending (job_id, recipient, kind, document, at) VALUES (?, ?, ?, ?, ?)`),
		jobID, e.Recipient, e.Kind, e.Document, e.At)
	return err
}

// donePending forgets a queued event once it is folded.
func (s *store) donePending(ctx context.Context, tx *sql.Tx, jobID int64) error {
	_, err := tx.ExecContext(ctx, s.q(`DELETE FROM tandem_notify_pending WHERE job_id = ?`), jobID)
	return err
}

// pendingBefore reports whether events of a window's key from before its
// due time are still queued.
func (s *store) pendingBefore(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, w *window) (bool, error) {
	var n int
	err := q.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM tandem_notify_pending
		WHERE recipient = ? AND kind = ? AND document = ? AND at < ?`), w.recipient, w.kind, w.doc, w.dueAt).Scan(&n)
	return n > 0, err
}

// errLate is addEvent's answer for an event from after its key's open
// window: it belongs to the next window, which opens once this one closes.
var errLate = errors.New("notify: event after the open window's time")

// addEvent folds e into its window, opening the window (due `windowMs`
// after the event) if none is open. It reports the window's due time and
// whether this event opened it.
func (s *store) addEvent(ctx context.Context, tx *sql.Tx, e *Event, windowMs int64) (dueAt int64, opened bool, err error) {
	for attempt := 0; attempt < 3; attempt++ {
		res, err := tx.ExecContext(ctx, s.q(`INSERT INTO tandem_notify_windows
			(recipient, kind, document, title, verb, opened_at, due_at, last_at, events, actors, actor_count, payload)
			VALUES (?, ?, ?, '', '', ?, ?, ?, 0, '[]', 0, 'null')
			ON CONFLICT (recipient, kind, document) DO NOTHING`),
			e.Recipient, e.Kind, e.Document, e.At, e.At+windowMs, e.At)
		if err != nil {
			return 0, false, err
		}
		n, _ := res.RowsAffected()
		w, err := s.lockWindow(ctx, tx, `recipient = ? AND kind = ? AND document = ?`, e.Recipient, e.Kind, e.Document)
		if errors.Is(err, sql.ErrNoRows) {
			continue // flushed between the insert and the select: open a new one
		}
		if err != nil {
			return 0, false, err
		}
		if e.At >= w.dueAt {
			return 0, false, errLate
		}
		w.fold(e)
		actors, _ := json.Marshal(w.actors)
		payload := []byte(w.payload)
		if len(payload) == 0 {
			payload = []byte("null")
		}
		_, err = tx.ExecContext(ctx, s.q(`UPDATE tandem_notify_windows
			SET title = ?, verb = ?, last_at = ?, events = ?, actors = ?, actor_count = ?, payload = ?
			WHERE id = ?`),
			w.title, w.verb, w.lastAt, w.events, string(actors), w.actorCount, string(payload), w.id)
		return w.dueAt, n == 1, err
	}
	return 0, false, errors.New("notify: window kept closing under a new event")
}

// fold adds one event to the window.
func (w *window) fold(e *Event) {
	w.events++
	if e.At > w.lastAt {
		w.lastAt = e.At
	}
	if e.Title != "" {
		w.title = e.Title
	}
	if e.Verb != "" {
		w.verb = e.Verb
	}
	if len(e.Payload) > 0 {
		w.payload = e.Payload
	}
	for i := range w.actors {
		if w.actors[i].ID == e.Actor {
			if e.ActorName != "" {
				w.actors[i].Name = e.ActorName
			}
			return
		}
	}
	// Beyond MaxActors listed, each new name counts as another actor:
	// an over-count only when one actor returns after twenty others.
	w.actorCount++
	if len(w.actors) < MaxActors {
		w.actors = append(w.actors, Actor{ID: e.Actor, Name: e.ActorName})
	}
}

// lockWindow reads one window, locking its row until the transaction ends
// (SQLite locks the whole database for a write transaction anyway).
func (s *store) lockWindow(ctx context.Context, tx *sql.Tx, where string, args ...any) (*window, error) {
	query := `SELECT id, recipient, kind, document, title, verb, opened_at, due_at, last_at, events, actors, actor_count, payload
		FROM tandem_notify_windows WHERE ` + where
	if s.dialect == postgres {
		query += " FOR UPDATE"
	}
	var w window
	var actors, payload string
	err := tx.QueryRowContext(ctx, s.q(query), args...).Scan(&w.id, &w.recipient, &w.kind, &w.doc, &w.title, &w.verb,
		&w.openedAt, &w.dueAt, &w.lastAt, &w.events, &actors, &w.actorCount, &payload)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(actors), &w.actors); err != nil {
		return nil, fmt.Errorf("notify: window %d actors: %w", w.id, err)
	}
	if payload != "null" {
		w.payload = json.RawMessage(payload)
	}
	return &w, nil
}

// dueWindows lists windows whose time has come.
func (s *store) dueWindows(ctx context.Context, now int64, limit int) ([]int64, error) {
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT id FROM tandem_notify_windows WHERE due_at <= ? ORDER BY due_at LIMIT ?`), now, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// peekWindow reads a window without locking it; nil if it is closed.
func (s *store) peekWindow(ctx context.Context, windowID int64) (*window, error) {
	var w window
	err := s.db.QueryRowContext(ctx, s.q(`SELECT id, recipient, kind, document, due_at FROM tandem_notify_windows WHERE id = ?`), windowID).
		Scan(&w.id, &w.recipient, &w.kind, &w.doc, &w.dueAt)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	return &w, err
}

// errNotYet is closeWindow's answer while events of the window's time are
// still queued.
var errNotYet = errors.New("notify: events of the window are still queued")

// closeWindow turns a window into its notification and deletes it. It
// returns the notification, or nil if the window was already closed.
func (s *store) closeWindow(ctx context.Context, tx *sql.Tx, windowID int64) (*Notification, error) {
	w, err := s.lockWindow(ctx, tx, `id = ?`, windowID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if pending, err := s.pendingBefore(ctx, tx, w); err != nil || pending {
		if err == nil {
			err = errNotYet
		}
		return nil, err
	}
	n := &Notification{
		Recipient: w.recipient, Kind: w.kind, Document: w.doc, Title: w.title,
		Text:   text(w.kind, w.verb, w.title, w.doc, w.actors, int(w.actorCount)),
		Actors: w.actors, ActorCount: int(w.actorCount), Events: int(w.events), Payload: w.payload,
		FirstAt: w.openedAt, LastAt: w.lastAt, CreatedAt: nowMillis(),
	}
	actors, _ := json.Marshal(n.Actors)
	payload := []byte(n.Payload)
	if len(payload) == 0 {
		payload = []byte("null")
	}
	err = tx.QueryRowContext(ctx, s.q(`INSERT INTO tandem_notifications
		(window_id, recipient, kind, document, title, text, actors, actor_count, events, payload, first_at, last_at, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`),
		w.id, n.Recipient, n.Kind, n.Document, n.Title, n.Text, string(actors), n.ActorCount, n.Events, string(payload),
		n.FirstAt, n.LastAt, n.CreatedAt).Scan(&n.ID)
	if err != nil {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM tandem_notify_windows WHERE id = ?`), w.id); err != nil {
		return nil, err
	}
	return n, nil
}

const notificationColumns = `id, recipient, kind, document, title, text, actors, actor_count, events, payload, first_at, last_at, created_at, read_at`

type scanner interface{ Scan(...any) error }

func scanNotification(r scanner) (*Notification, error) {
	var n Notification
	var actors, payload string
	var readAt sql.NullInt64
	if err := r.Scan(&n.ID, &n.Recipient, &n.Kind, &n.Document, &n.Title, &n.Text, &actors, &n.ActorCount, &n.Events,
		&payload, &n.FirstAt, &n.LastAt, &n.CreatedAt, &readAt); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(actors), &n.Actors); err != nil {
		return nil, err
	}
	if payload != "null" {
		n.Payload = json.RawMessage(payload)
	}
	n.Read = readAt.Valid
	return &n, nil
}

// get returns one notification.
func (s *store) get(ctx context.Context, id int64) (*Notification, error) {
	return scanNotification(s.db.QueryRowContext(ctx, s.q(`SELECT `+notificationColumns+` FROM tandem_notifications WHERE id = ?`), id))
}

// ListOptions selects a page of a recipient's notifications.
type ListOptions struct {
	UnreadOnly bool
	// Before, when not zero, lists notifications older than this id
	// (the previous page's Next).
	Before int64
	// After, when not zero, lists notifications newer than this id,
	// oldest first (to catch up after a reconnection).
	After int64
	// Limit is the page size: 1-100, default 20.
	Limit int
}

// list returns a recipient's notifications, newest first (oldest first
// with After).
func (s *store) list(ctx context.Context, recipient string, o ListOptions) ([]*Notification, error) {
	query := `SELECT ` + notificationColumns + ` FROM tandem_notifications WHERE recipient = ?`
	args := []any{recipient}
	if o.UnreadOnly {
		query += ` AND read_at IS NULL`
	}
	order := " ORDER BY id DESC"
	if o.Before > 0 {
		query += ` AND id < ?`
		args = append(args, o.Before)
	}
	if o.After > 0 {
		query += ` AND id > ?`
		args = append(args, o.After)
		order = " ORDER BY id ASC"
	}
	query += order + ` LIMIT ?`
	args = append(args, o.Limit)
	rows, err := s.db.QueryContext(ctx, s.q(query), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []*Notification{}
	for rows.Next() {
		n, err := scanNotification(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, rows.Err()
}

// unread counts a recipient's unread notifications.
func (s *store) unread(ctx context.Context, recipient string) (int, error) {
	var n int
	err := s.db.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM tandem_notifications WHERE recipient = ? AND read_at IS NULL`), recipient).Scan(&n)
	return n, err
}

// markRead marks the recipient's notifications with these ids read, or all
// of them when ids is nil. Ids of other recipients are ignored.
func (s *store) markRead(ctx context.Context, recipient string, ids []int64) (int64, error) {
	query := `UPDATE tandem_notifications SET read_at = ? WHERE recipient = ? AND read_at IS NULL`
	args := []any{nowMillis(), recipient}
	if ids != nil {
		if len(ids) == 0 {
			return 0, nil
		}
		query += ` AND id IN (` + strings.TrimSuffix(strings.Repeat("?, ", len(ids)), ", ") + `)`
		for _, id := range ids {
			args = append(args, id)
		}
	}
	res, err := s.db.ExecContext(ctx, s.q(query), args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}
