package notify

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/tandemhq/tandem/internal/sqlargs"
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

// q writes query for the store's database (sqlargs).
func (s *store) q(query string) string {
	if s.dialect != postgres {
		return query
	}
	return sqlargs.Numbered(query)
}

// durable makes a transaction's commit wait for the disk. The PostgreSQL
// pool commits without waiting (OpenPostgres): the queue's bookkeeping and
// folding an event into its window may be lost whole if PostgreSQL itself
// crashes, and are then simply done again. Accepting an event and storing
// a notification must not be lost: those transactions call durable.
func (s *store) durable(ctx context.Context, tx *sql.Tx) error {
	if s.dialect != postgres {
		return nil
	}
	_, err := tx.ExecContext(ctx, "SET LOCAL synchronous_commit = on")
	return err
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
			opened_at ` + forever + ` NOT NULL,
			due_at ` + forever + ` NOT NULL,
			UNIQUE (recipient, kind, document)
		)`,
		`CREATE INDEX IF NOT EXISTS tandem_notify_windows_due ON tandem_notify_windows (due_at)`,
		// The events, by the id of the job that carries each through the
		// queue. window_id is set when the event's job has run: a window
		// closes only when none of the events of its time is still without.
		`CREATE TABLE IF NOT EXISTS tandem_notify_events (
			job_id ` + forever + ` PRIMARY KEY,
			window_id ` + forever + `,
			recipient TEXT NOT NULL,
			kind TEXT NOT NULL,
			document TEXT NOT NULL,
			at ` + forever + ` NOT NULL,
			actor TEXT NOT NULL,
			actor_name TEXT NOT NULL,
			title TEXT NOT NULL,
			verb TEXT NOT NULL,
			payload TEXT NOT NULL
		)`,
		`CREATE INDEX IF NOT EXISTS tandem_notify_events_key ON tandem_notify_events (recipient, kind, document, at)`,
		`CREATE INDEX IF NOT EXISTS tandem_notify_events_window ON tandem_notify_events (window_id, at)`,
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
		// Keys of the events posted with one, for KeyRetention.
		`CREATE TABLE IF NOT EXISTS tandem_notify_keys (
			key TEXT PRIMARY KEY,
			at ` + forever + ` NOT NULL
		)`,
		`CREATE INDEX IF NOT EXISTS tandem_notify_keys_at ON tandem_notify_keys (at)`,
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
	id                   int64
	recipient, kind, doc string
	openedAt, dueAt      int64
}

// claimKey records an event's key; false if it was posted before.
func (s *store) claimKey(ctx context.Context, tx *sql.Tx, key string, at int64) (bool, error) {
	res, err := tx.ExecContext(ctx, s.q(`INSERT INTO tandem_notify_keys (key, at) VALUES (?, ?) ON CONFLICT DO NOTHING`), key, at)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// forgetKeys deletes the keys posted before a time.
func (s *store) forgetKeys(ctx context.Context, before int64) error {
	_, err := s.db.ExecContext(ctx, s.q(`DELETE FROM tandem_notify_keys WHERE at < ?`), before)
	return err
}

// addEvent records a queued event, in the transaction that queues its job.
func (s *store) addEvent(ctx context.Context, tx *sql.Tx, jobID int64, e *Event) error {
	payload := []byte(e.Payload)
	if len(payload) == 0 {
		payload = []byte("null")
	}
	_, err := tx.ExecContext(ctx, s.q(`INSERT INTO tandem_notify_events
		(job_id, recipient, kind, document, at, actor, actor_name, title, verb, payload)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		jobID, e.Recipient, e.Kind, e.Document, e.At, e.Actor, e.ActorName, e.Title, e.Verb, string(payload))
	return err
}

// errLate is foldEvent's answer for an event from after its key's open
// window: it belongs to the next window, which opens once this one closes.
var errLate = errors.New("notify: event after the open window's time")

// foldEvent puts a queued event into its key's open window, opening one
// (due windowMs after the event) if there is none. It reports the
// window's due time and whether this event opened it. The window's row is
// locked while the event goes in, so a close either comes first (and this
// event opens the next window, or finds itself already folded by it) or
// waits for this transaction.
func (s *store) foldEvent(ctx context.Context, tx *sql.Tx, jobID int64, windowMs int64) (dueAt int64, opened bool, err error) {
	var e window
	err = tx.QueryRowContext(ctx, s.q(`SELECT recipient, kind, document, at FROM tandem_notify_events WHERE job_id = ?`), jobID).
		Scan(&e.recipient, &e.kind, &e.doc, &e.openedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil // folded and closed already (a rerun of a finished job)
	}
	if err != nil {
		return 0, false, err
	}
	lock := `SELECT id, due_at FROM tandem_notify_windows WHERE recipient = ? AND kind = ? AND document = ?`
	if s.dialect == postgres {
		lock += " FOR UPDATE"
	}
	for attempt := 0; attempt < 5; attempt++ {
		var w window
		err = tx.QueryRowContext(ctx, s.q(lock), e.recipient, e.kind, e.doc).Scan(&w.id, &w.dueAt)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return 0, false, err
		}
		found := err == nil
		// With the window locked (or none open), see whether a close has
		// taken this event meanwhile.
		var folded sql.NullInt64
		err = tx.QueryRowContext(ctx, s.q(`SELECT window_id FROM tandem_notify_events WHERE job_id = ?`), jobID).Scan(&folded)
		if errors.Is(err, sql.ErrNoRows) || (err == nil && folded.Valid) {
			return 0, false, nil
		}
		if err != nil {
			return 0, false, err
		}
		if !found {
			err = tx.QueryRowContext(ctx, s.q(`INSERT INTO tandem_notify_windows (recipient, kind, document, opened_at, due_at)
				VALUES (?, ?, ?, ?, ?) ON CONFLICT (recipient, kind, document) DO NOTHING RETURNING id, due_at`),
				e.recipient, e.kind, e.doc, e.openedAt, e.openedAt+windowMs).Scan(&w.id, &w.dueAt)
			if errors.Is(err, sql.ErrNoRows) {
				continue // another event's job opened it first: lock that one
			}
			if err != nil {
				return 0, false, err
			}
			opened = true
		}
		if e.openedAt >= w.dueAt {
			return 0, false, errLate
		}
		// This event and any other of its key and window still waiting for
		// its job: a backlog is folded in a few transactions, not one per
		// event, and those jobs find their events done.
		_, err = tx.ExecContext(ctx, s.q(`UPDATE tandem_notify_events SET window_id = ?
			WHERE (job_id = ? OR (recipient = ? AND kind = ? AND document = ? AND at < ?)) AND window_id IS NULL`),
			w.id, jobID, e.recipient, e.kind, e.doc, w.dueAt)
		return w.dueAt, opened, err
	}
	return 0, false, errors.New("notify: window kept closing under a new event")
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

// lockWindow reads a window and locks its row until the transaction ends
// (SQLite locks the database for a write transaction anyway); nil if the
// window is closed.
func (s *store) lockWindow(ctx context.Context, tx *sql.Tx, windowID int64) (*window, error) {
	query := `SELECT id, recipient, kind, document, opened_at, due_at FROM tandem_notify_windows WHERE id = ?`
	if s.dialect == postgres {
		query += " FOR UPDATE"
	}
	var w window
	err := tx.QueryRowContext(ctx, s.q(query), windowID).Scan(&w.id, &w.recipient, &w.kind, &w.doc, &w.openedAt, &w.dueAt)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	return &w, err
}

// closeWindow turns a window and its events into a notification and
// deletes them. It returns the notification, or nil if the window was
// already closed.
func (s *store) closeWindow(ctx context.Context, tx *sql.Tx, windowID int64) (*Notification, error) {
	w, err := s.lockWindow(ctx, tx, windowID)
	if err != nil || w == nil {
		return nil, err
	}
	// Events of the window's time still waiting for their jobs go in now,
	// under the window's lock; their jobs then find them done.
	if _, err := tx.ExecContext(ctx, s.q(`UPDATE tandem_notify_events SET window_id = ?
		WHERE recipient = ? AND kind = ? AND document = ? AND at < ? AND window_id IS NULL`),
		w.id, w.recipient, w.kind, w.doc, w.dueAt); err != nil {
		return nil, err
	}
	n := &Notification{Recipient: w.recipient, Kind: w.kind, Document: w.doc, CreatedAt: nowMillis(), Actors: []Actor{}}
	var actorCount int64
	err = tx.QueryRowContext(ctx, s.q(`SELECT COUNT(*), COUNT(DISTINCT actor), COALESCE(MIN(at), 0), COALESCE(MAX(at), 0)
		FROM tandem_notify_events WHERE window_id = ?`), w.id).Scan(&n.Events, &actorCount, &n.FirstAt, &n.LastAt)
	if err != nil {
		return nil, err
	}
	n.ActorCount = int(actorCount)
	// The actors in the order they first acted, each under the latest name
	// they gave.
	rows, err := tx.QueryContext(ctx, s.q(`SELECT actor FROM tandem_notify_events WHERE window_id = ?
		GROUP BY actor ORDER BY MIN(at), actor LIMIT ?`), w.id, MaxActors)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var a Actor
		if err := rows.Scan(&a.ID); err != nil {
			rows.Close()
			return nil, err
		}
		n.Actors = append(n.Actors, a)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for i := range n.Actors {
		err := tx.QueryRowContext(ctx, s.q(`SELECT actor_name FROM tandem_notify_events WHERE window_id = ? AND actor = ? AND actor_name <> ''
			ORDER BY at DESC, job_id DESC LIMIT 1`), w.id, n.Actors[i].ID).Scan(&n.Actors[i].Name)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return nil, err
		}
	}
	// Title, verb and payload: the latest event's that has one.
	var verb, payload string
	for col, dst := range map[string]*string{"title": &n.Title, "verb": &verb, "payload": &payload} {
		empty := "''"
		if col == "payload" {
			empty = "'null'"
		}
		err := tx.QueryRowContext(ctx, s.q(`SELECT `+col+` FROM tandem_notify_events WHERE window_id = ? AND `+col+` <> `+empty+`
			ORDER BY at DESC, job_id DESC LIMIT 1`), w.id).Scan(dst)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return nil, err
		}
	}
	if payload != "" {
		n.Payload = json.RawMessage(payload)
	}
	n.Text = text(n.Kind, verb, n.Title, n.Document, n.Actors, n.ActorCount)
	actors, _ := json.Marshal(n.Actors)
	if payload == "" {
		payload = "null"
	}
	err = tx.QueryRowContext(ctx, s.q(`INSERT INTO tandem_notifications
		(window_id, recipient, kind, document, title, text, actors, actor_count, events, payload, first_at, last_at, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`),
		w.id, n.Recipient, n.Kind, n.Document, n.Title, n.Text, string(actors), n.ActorCount, n.Events, payload,
		n.FirstAt, n.LastAt, n.CreatedAt).Scan(&n.ID)
	if err != nil {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, s.q(`DELETE FROM tandem_notify_events WHERE window_id = ?`), w.id); err != nil {
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
