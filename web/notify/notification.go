package notify

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Event is one thing that happened for a recipient.
type Event struct {
	Recipient string `json:"recipient"`
	// Kind names what happened: "mention" for mentions; applications
	// choose their own ([a-z0-9_.-], e.g. "comment.reply").
	Kind     string `json:"kind"`
	Document string `json:"document,omitempty"`
	// Title is the document's title as the notification shows it.
	Title     string `json:"title,omitempty"`
	Actor     string `json:"actor"`
	ActorName string `json:"actorName,omitempty"`
	// Verb is the phrase of the notification ("commented on"); by default
	// "mentioned you in" for mentions and the kind otherwise.
	Verb    string          `json:"verb,omitempty"`
	Payload json.RawMessage `json:"payload,omitempty"`
	// At is when it was posted (Unix ms), set by Post.
	At int64 `json:"at,omitempty"`
	// Key, when set, makes posting the event idempotent: an event whose
	// key was posted within KeyRetention is taken as a repeat and dropped.
	// Mentions carry one, so a report offered twice notifies once.
	Key string `json:"key,omitempty"`
}

// KindMention is the kind of the events the server makes for mentions.
const KindMention = "mention"

// Limits on what an event may carry.
const (
	MaxIDLen      = 128
	MaxTextLen    = 256
	MaxPayloadLen = 4096
	MaxKeyLen     = 256
)

var kindRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,63}$`)

// ErrBadEvent wraps every reason Validate refuses an event. It is
// permanent (its Permanent method says so, for callers that cannot import
// this package): the same event is refused again, so a caller that retries
// failed posts drops it instead, as the document hub does a mention report.
var ErrBadEvent error = permanentError("bad notification event")

type permanentError string

func (e permanentError) Error() string { return string(e) }

// Permanent reports that offering the same thing again fails again.
func (permanentError) Permanent() bool { return true }

// Validate checks an event before it is queued.
func (e *Event) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrBadEvent, fmt.Sprintf(format, a...))
	}
	switch {
	case !validID(e.Recipient):
		return bad("recipient must be 1-%d bytes of UTF-8 without U+0000", MaxIDLen)
	case !kindRE.MatchString(e.Kind):
		return bad("kind must match %s", kindRE)
	case !validID(e.Actor):
		return bad("actor must be 1-%d bytes of UTF-8 without U+0000", MaxIDLen)
	case len(e.Document) > MaxIDLen:
		return bad("document must be at most %d bytes", MaxIDLen)
	case len(e.Title) > MaxTextLen || len(e.ActorName) > MaxTextLen || len(e.Verb) > MaxTextLen:
		return bad("title, actorName and verb must be at most %d bytes", MaxTextLen)
	case len(e.Key) > MaxKeyLen:
		return bad("key must be at most %d bytes", MaxKeyLen)
	case len(e.Payload) > MaxPayloadLen:
		return bad("payload must be at most %d bytes", MaxPayloadLen)
	case len(e.Payload) > 0 && !json.Valid(e.Payload):
		return bad("payload must be JSON")
	}
	for _, s := range []string{e.Recipient, e.Kind, e.Actor, e.Document, e.Title, e.ActorName, e.Verb, e.Key} {
		if !validText(s) {
			return bad("text must be UTF-8 without U+0000")
		}
	}
	return nil
}

// validID reports whether s may name a recipient or an actor.
func validID(s string) bool {
	return s != "" && len(s) <= MaxIDLen && validText(s)
}

// validText reports whether s may be stored: UTF-8 without U+0000, which
// PostgreSQL stores in no text column (SQLite would, and the same event
// must not be taken by one store and refused by the other).
func validText(s string) bool {
	return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}

// clip makes s fit a field of at most max bytes: invalid UTF-8 and U+0000
// are left out, and a longer text is cut at a rune boundary, with "…" for
// what was cut.
func clip(s string, max int) string {
	s = strings.ReplaceAll(strings.ToValidUTF8(s, ""), "\x00", "")
	if len(s) <= max {
		return s
	}
	const more = "…"
	cut := max - len(more)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + more
}

// Actor is one of the people behind a notification.
type Actor struct {
	ID   string `json:"id"`
	Name string `json:"name,omitempty"`
}

// Notification is what a recipient sees: every event with the same
// recipient, kind and document within one window, folded together.
type Notification struct {
	ID        int64  `json:"id"`
	Recipient string `json:"recipient"`
	Kind      string `json:"kind"`
	Document  string `json:"document,omitempty"`
	Title     string `json:"title,omitempty"`
	// Text reads like "Ana and 12 others mentioned you in Roadmap".
	Text string `json:"text"`
	// Actors are the first distinct actors, at most MaxActors of them;
	// ActorCount counts them all.
	Actors     []Actor         `json:"actors"`
	ActorCount int             `json:"actorCount"`
	Events     int             `json:"events"`
	Payload    json.RawMessage `json:"payload,omitempty"` // the latest event's
	FirstAt    int64           `json:"firstAt"`
	LastAt     int64           `json:"lastAt"`
	CreatedAt  int64           `json:"createdAt"`
	Read       bool            `json:"read"`
}

// Redacted is the notification as a recipient who may not read its
// document sees it: that something happened, and who did it, but neither
// the document's title nor its id nor the payload.
func (n *Notification) Redacted() *Notification {
	r := *n
	where := n.Title
	if where == "" {
		where = n.Document
	}
	if where != "" {
		// text trims the sentence, so it ends with where trimmed. A text
		// that does not is not text's: it is said again without where.
		rest, ok := strings.CutSuffix(n.Text, strings.TrimSpace(where))
		if !ok {
			rest = text(n.Kind, "", "", "", n.Actors, n.ActorCount)
		}
		r.Text = strings.TrimRightFunc(rest, unicode.IsSpace) + " a document"
	}
	r.Title, r.Document, r.Payload = "", "", nil
	return &r
}

// MaxActors bounds the actors a notification lists by name.
const MaxActors = 20

// text renders a notification's sentence.
func text(kind, verb, title, document string, actors []Actor, actorCount int) string {
	name := "Someone"
	if len(actors) > 0 {
		name = actors[0].Name
		if name == "" {
			name = actors[0].ID
		}
	}
	switch others := actorCount - 1; {
	case others == 1:
		name += " and 1 other"
	case others > 1:
		name += fmt.Sprintf(" and %d others", others)
	}
	if verb == "" {
		verb = kind
		if kind == KindMention {
			verb = "mentioned you in"
		}
	}
	where := title
	if where == "" {
		where = document
	}
	return strings.TrimSpace(strings.Join([]string{name, verb, where}, " "))
}

func nowMillis() int64 { return time.Now().UnixMilli() }
