package notify

import (
	"encoding/json"
	"strings"
	"testing"
)

// A redacted notification names no document, whatever white space its
// title begins or ends with: the sentence is trimmed where the title is
// not.
func TestARedactedNotificationKeepsTheTitleToItself(t *testing.T) {
	actors := []Actor{{ID: "ana", Name: "Ana"}}
	cases := []struct{ title, document string }{
		{"Roadmap", "doc-1"},
		{"Roadmap ", "doc-1"},
		{"Roadmap\n", "doc-1"},
		{" Roadmap\u00a0\t", "doc-1"},
		{"", "doc-1 "},
		{"   ", "doc-1"},
	}
	for _, c := range cases {
		n := &Notification{Kind: KindMention, Document: c.document, Title: c.title, Actors: actors, ActorCount: 1,
			Payload: json.RawMessage(`{"at":1}`)}
		n.Text = text(n.Kind, "", n.Title, n.Document, n.Actors, n.ActorCount)
		r := n.Redacted()
		if strings.Contains(r.Text, "Roadmap") || strings.Contains(r.Text, "doc-1") {
			t.Errorf("title %q, document %q: redacted text %q names the document", c.title, c.document, r.Text)
		}
		if r.Text != "Ana mentioned you in a document" {
			t.Errorf("title %q, document %q: redacted text %q", c.title, c.document, r.Text)
		}
		if r.Title != "" || r.Document != "" || r.Payload != nil {
			t.Errorf("title %q: redacted = %+v", c.title, r)
		}
		if n.Title != c.title || n.Document != c.document {
			t.Errorf("Redacted changed the notification: %+v", n)
		}
	}
	// A text that does not end with the title is said again without it.
	n := &Notification{Kind: KindMention, Title: "Roadmap", Text: "Ana mentioned you in Roadmap (draft)", Actors: actors, ActorCount: 1}
	if r := n.Redacted(); r.Text != "Ana mentioned you in a document" {
		t.Errorf("redacted text %q, from %q", r.Text, n.Text)
	}
}
