package doc

import (
	"strings"
)

// What a mention is (`@<userId>`), and the fields it is read from.

// MentionFields names where a document keeps what mentions are read
// from: Text, the text searched for `@<userId>`, and Title, what names the
// document in a notification. Each is a key of the root map, or a path of
// keys through nested maps separated by dots ("body.text"). Defaults
// "text" and "title", the demo's.
type MentionFields struct {
	Text, Title string
}

func (f *MentionFields) setDefaults() {
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

// mentionsNow counts the mentions in the text now. The caller holds r.mu.
func (r *room) mentionsNow() map[string]int {
	return countMentions(r.text.mentionText())
}
