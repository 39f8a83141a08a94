package webhook

import (
	"context"
	"database/sql"
	"time"

	"github.com/tandemhq/tandem/web/notify"
)

// NotificationStored queues notification.created for a notification, in
// the transaction that stores it (notify.Config.Stored): the event is
// queued if and only if the notification is stored, once.
func (h *Hooks) NotificationStored(ctx context.Context, tx *sql.Tx, n *notify.Notification) error {
	if !h.sends[NotificationCreated] {
		return nil
	}
	m, err := newMessage(NotificationCreated, time.UnixMilli(n.CreatedAt), NotificationData{Notification: n})
	if err != nil {
		return err
	}
	msgs, err := h.enqueue(ctx, tx, []message{m})
	if err != nil {
		return err
	}
	// Counted before the commit, which notify makes: a close that rolls
	// back is retried and counted again.
	h.counted(msgs)
	return nil
}
