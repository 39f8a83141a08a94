package doc

import (
	"strings"

	"github.com/automerge/automerge-go"
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

// text returns the text field, or "".
func (f MentionFields) text(d *automerge.Doc) string {
	return stringAt(d, f.Text)
}

// title returns the title field, or the text's first non-blank line, at
// most 80 characters.
func (f MentionFields) title(d *automerge.Doc) string {
	t := strings.TrimSpace(stringAt(d, f.Title))
	if t == "" {
		for _, line := range strings.Split(f.text(d), "\n") {
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

// stringAt reads a text or string at a dotted path of map keys; anything
// else, or nothing there, is "".
func stringAt(d *automerge.Doc, path string) string {
	keys := strings.Split(path, ".")
	p := make([]any, len(keys))
	for i, k := range keys {
		p[i] = k
	}
	v, err := d.Path(p...).Get()
	if err != nil {
		return ""
	}
	switch v.Kind() {
	case automerge.KindText:
		s, _ := v.Text().Get()
		return s
	case automerge.KindStr:
		return v.Str()
	}
	return ""
}

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

// textCopy is the document's content for the mention tracker: an
// automerge document brought up to the room's log when the tracker reads
// the text, the one copy of a document's content the node keeps, and only
// for documents whose mentions it reports. Every change in the log passed
// the guard (or came from the store or another node, where it had).
type textCopy struct {
	doc *automerge.Doc
	at  int // the log's first at changes are in doc
}

// catchUp brings the copy up to the log's first n changes, whose bytes
// since the copy's are data.
func (t *textCopy) catchUp(data []byte, n int) error {
	if t.doc == nil {
		t.doc = automerge.New()
	}
	if len(data) > 0 {
		if err := t.doc.LoadIncremental(data); err != nil {
			return err
		}
	}
	t.at = n
	return nil
}

// contentNow returns the room's content brought up to its log. The caller
// holds r.mu (and r.applyMu, or the log may move on at once).
func (r *room) contentNow(h *Hub) *automerge.Doc {
	if r.text == nil {
		r.text = &textCopy{}
	}
	n := r.log.Len()
	if err := r.text.catchUp(joinChanges(r.log, span(r.text.at, n)), n); err != nil {
		h.log.Error("the mention tracker's copy of the document does not take its changes", "document", r.id, "err", err)
	}
	return r.text.doc
}

// mentionsNow counts the mentions in the text now. The caller holds r.mu.
func (r *room) mentionsNow(h *Hub) map[string]int {
	return countMentions(r.mentions.fields.text(r.contentNow(h)))
}
