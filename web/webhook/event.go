package webhook

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/tandemhq/tandem/web/notify"
)

// The event types.
const (
	DocumentCreated     = "document.created"
	DocumentChanged     = "document.changed"
	PresenceEntered     = "presence.entered"
	PresenceLeft        = "presence.left"
	UserStatus          = "user.status"
	NotificationCreated = "notification.created"
)

// AllEvents lists every event type, in the order the README gives them.
var AllEvents = []string{DocumentCreated, DocumentChanged, PresenceEntered, PresenceLeft, UserStatus, NotificationCreated}

// Event is one message as every endpoint receives it: the body of the
// POST, which the signature covers.
type Event struct {
	Type string `json:"type"`
	// Timestamp is when the event happened (RFC 3339).
	Timestamp time.Time `json:"timestamp"`
	Data      any       `json:"data"`
}

// DocumentCreatedData is the data of document.created: the first changes
// of a document the cluster had not held, made by a peer of this node.
type DocumentCreatedData struct {
	DocumentID string   `json:"documentId"`
	Users      []string `json:"users"`
}

// DocumentChangedData is the data of document.changed: a document's
// changes, folded over the debounce window.
type DocumentChangedData struct {
	DocumentID string `json:"documentId"`
	// Heads are the document's heads after the window's last change seen
	// (hex hashes, as automerge names them), at most MaxHeads.
	Heads          []string `json:"heads"`
	HeadsTruncated bool     `json:"headsTruncated,omitempty"`
	// Users are the ids of the users whose changes the window holds (from
	// their tokens), at most MaxUsers, sorted.
	Users          []string `json:"users"`
	UsersTruncated bool     `json:"usersTruncated,omitempty"`
	// FirstChangeAt and LastChangeAt bound the window's changes (Unix ms).
	FirstChangeAt int64 `json:"firstChangeAt"`
	LastChangeAt  int64 `json:"lastChangeAt"`
}

// PresenceData is the data of presence.entered and presence.left.
type PresenceData struct {
	DocumentID string `json:"documentId"`
	UserID     string `json:"userId"`
	Name       string `json:"name,omitempty"`
	// At is when the first tab came or the last went (Unix ms).
	At int64 `json:"at"`
}

// UserStatusData is the data of user.status.
type UserStatusData struct {
	UserID string `json:"userId"`
	Status string `json:"status"` // "online", "away" or "offline"
	At     int64  `json:"at"`
}

// NotificationData is the data of notification.created.
type NotificationData struct {
	Notification *notify.Notification `json:"notification"`
}

// message is an event made ready to queue: its id and body.
type message struct {
	id   string
	typ  string
	body []byte
}

func newMessage(typ string, at time.Time, data any) (message, error) {
	body, err := json.Marshal(Event{Type: typ, Timestamp: at.UTC(), Data: data})
	if err != nil {
		return message{}, err
	}
	var b [16]byte
	rand.Read(b[:])
	return message{id: "msg_" + hex.EncodeToString(b[:]), typ: typ, body: body}, nil
}
