package mention

import (
	"strings"

	"github.com/tandemhq/tandem/doc"
)

// What a mention is (`@<userId>`), the fields it is read from, and the
// report a burst of edits that inserted some makes.

// Report reports that a local peer inserted mentions of users into a
// document's text: `@<userId>` in its text field (Fields).
type Report struct {
	DocumentID string
	// Key names this report for good: a report handed over again (after
	// a failed attempt, or by the node that took over a dead node's
	// journal) has the same key, so that the receiver can tell a repeat.
	Key string
	// Peer is the peer whose changes inserted them; nil when the report
	// comes from the journal of a node that died (PeerID names it then).
	Peer   doc.Peer
	PeerID string
	// Actor and ActorName are the user behind the peer, as Config.Author
	// said when the peer's edits began or settled; Actor is the peer id
	// when it could not say.
	Actor, ActorName string
	// Title is the document's title field, or else the first line of its
	// text, for the notification to name the document.
	Title string
	// Users has one entry per inserted mention.
	Users []string
}

// Fields names where a document keeps what mentions are read from: Text,
// the text searched for `@<userId>`, and Title, what names the document
// in a notification. Each is a key of the root map, or a path of keys
// through nested maps separated by dots ("body.text"). Defaults "text"
// and "title", the demo's.
type Fields struct {
	Text, Title string
}

func (f *Fields) setDefaults() {
	if f.Text == "" {
		f.Text = "text"
	}
	if f.Title == "" {
		f.Title = "title"
	}
}

// title returns the title field, or the text's first non-blank line, at
// most 80 characters.
func (c *content) title() string {
	t := strings.TrimSpace(c.field(1))
	if t == "" {
		for _, line := range strings.Split(c.field(0), "\n") {
			if t = strings.TrimSpace(strings.TrimLeft(line, "#")); t != "" {
				break
			}
		}
	}
	if r := []rune(t); len(r) > 80 {
		t = string(r[:79]) + "…"
	}
	return t
}

// text returns the text field, or "".
func (c *content) text() string { return c.field(0) }

// maxMentionID bounds a mentioned user id.
const maxMentionID = 64

// countMentions counts `@<userId>` in text. A mention starts at an @ that
// does not follow a letter, digit or one of _ . - @ (so e-mail addresses
// are not mentions), and its id is letters, digits, _ . - starting with a
// letter, digit or _ and without a trailing . or -.
func countMentions(text string) map[string]int {
	out := map[string]int{}
	for i := 0; i < len(text); i++ {
		if text[i] != '@' || (i > 0 && (mentionChar(text[i-1]) || text[i-1] == '@')) {
			continue
		}
		j := i + 1
		for j < len(text) && j-i-1 < maxMentionID && mentionChar(text[j]) {
			j++
		}
		id := strings.TrimRight(text[i+1:j], ".-")
		if id != "" && id[0] != '.' && id[0] != '-' {
			out[id]++
		}
		i = j - 1
	}
	return out
}

func mentionChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
}
