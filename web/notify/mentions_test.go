package notify

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tandemhq/tandem/internal/testenv"
)

// What mentions may cost is bounded: one report notifies each user once
// and at most MaxMentionedPerReport of them, never the author, and an
// author's reports together notify at most MentionsPerMinute at once.
func TestMentionsAreBounded(t *testing.T) {
	var mu sync.Mutex
	var posted []Event
	post := func(_ context.Context, es []Event) error {
		mu.Lock()
		posted = append(posted, es...)
		mu.Unlock()
		return nil
	}
	p := NewMentions(post, testenv.QuietLogger())
	ctx := context.Background()
	users := []string{"ana", "ana", "me"}
	for i := range 5000 {
		users = append(users, fmt.Sprint("u", i))
	}
	p.Report(ctx, Mention{DocumentID: "d", Key: "k", Actor: "me", Title: "T", Users: users})
	if len(posted) != MaxMentionedPerReport {
		t.Fatalf("one report of 5,000 mentions made %d events, want %d", len(posted), MaxMentionedPerReport)
	}
	seen := map[string]bool{}
	for _, e := range posted {
		if e.Recipient == "me" || seen[e.Recipient] {
			t.Fatalf("recipient %q notified wrongly", e.Recipient)
		}
		if e.Key != "k:"+e.Recipient || e.Kind != KindMention {
			t.Fatalf("event %+v: want the key k:<recipient> and kind %s", e, KindMention)
		}
		seen[e.Recipient] = true
	}
	for range 10 {
		p.Report(ctx, Mention{DocumentID: "d", Actor: "me", Title: "T", Users: users[3:53]})
	}
	if len(posted) > MentionsPerMinute+1 { // the budget refills a little while the test runs
		t.Fatalf("an author's reports made %d events at once, want at most %d", len(posted), MentionsPerMinute)
	}
	before := len(posted)
	p.Report(ctx, Mention{DocumentID: "d", Actor: "other", Title: "T", Users: []string{"ana"}})
	if len(posted) != before+1 {
		t.Fatal("another author's mention was held back by the first one's budget")
	}
}

// Whatever text a document and its author's presence hold, the events a
// report makes pass Validate: a title of 80 emoji (319 bytes as the
// document layer cuts it), an actor id and a name past their limits, and
// U+0000 or invalid UTF-8 in them are clipped or left out, never refused.
// A user id no event can carry is not notified; the others are.
func TestEveryEventOfAReportPassesValidate(t *testing.T) {
	var posted []Event
	post := func(_ context.Context, es []Event) error {
		for _, e := range es {
			if err := e.Validate(); err != nil {
				return err
			}
		}
		posted = append(posted, es...)
		return nil
	}
	p := NewMentions(post, testenv.QuietLogger())
	m := Mention{DocumentID: "d", Key: "k",
		Title:     strings.Repeat("😀", 79) + "…",
		Actor:     strings.Repeat("a", 3*MaxIDLen/2) + "\x00",
		ActorName: "Ana\x00" + strings.Repeat("é", MaxTextLen) + "\xff",
		Users:     []string{"bo", strings.Repeat("x", MaxIDLen+1), "cy\x00", "dee"},
	}
	if err := p.Report(context.Background(), m); err != nil {
		t.Fatalf("Report: %v", err)
	}
	if len(posted) != 2 || posted[0].Recipient != "bo" || posted[1].Recipient != "dee" {
		t.Fatalf("posted %+v, want events for bo and dee", posted)
	}
	e := posted[0]
	if !strings.HasPrefix(e.Title, strings.Repeat("😀", 60)) || !strings.HasSuffix(e.Title, "😀…") {
		t.Errorf("title clipped to %q, want the emoji it could hold and …", e.Title)
	}
	if !strings.HasPrefix(e.ActorName, "Anaé") || !strings.HasPrefix(e.Actor, "aaa") {
		t.Errorf("actor %q named %q", e.Actor, e.ActorName)
	}
}

// A report whose event cannot be carried (here its document id is too
// long) fails for good: its error says it is permanent, so that the
// document layer drops it instead of offering it again for ever. A post
// that fails for now does not say so.
func TestAReportNoEventCanCarryFailsForGood(t *testing.T) {
	var permanent interface{ Permanent() bool }
	p := NewMentions(func(_ context.Context, es []Event) error {
		for _, e := range es {
			if err := e.Validate(); err != nil {
				return err
			}
		}
		return nil
	}, testenv.QuietLogger())
	err := p.Report(context.Background(), Mention{DocumentID: strings.Repeat("d", MaxIDLen+1), Key: "k", Actor: "ana", Users: []string{"bo"}})
	if !errors.Is(err, ErrBadEvent) || !errors.As(err, &permanent) || !permanent.Permanent() {
		t.Fatalf("Report = %v, want a permanent ErrBadEvent", err)
	}
	down := NewMentions(func(context.Context, []Event) error { return errors.New("queue away") }, testenv.QuietLogger())
	err = down.Report(context.Background(), Mention{DocumentID: "d", Key: "k", Actor: "ana", Users: []string{"bo"}})
	if err == nil || errors.As(err, &permanent) {
		t.Fatalf("Report = %v, want an error that is not permanent", err)
	}
}

// A mention in a document whose title holds U+0000 notifies its user on
// either store: PostgreSQL refused the text before and the report was
// offered again for ever, while SQLite took it.
func TestAMentionWithU0000IsNotifiedOnEveryStore(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			open, pg := b.open(t)
			s := startService(t, open(), pg, 50*time.Millisecond)
			ctx := context.Background()
			p := NewMentions(s.PostMany, testenv.QuietLogger())
			m := Mention{DocumentID: "docRoadmap", Key: "k", Title: "Road\x00map", Actor: "ana", ActorName: "A\x00na", Users: []string{"bo"}}
			if err := p.Report(ctx, m); err != nil {
				t.Fatalf("Report: %v", err)
			}
			var page []*Notification
			testenv.WaitFor(t, "bo's notification", func() bool {
				var err error
				page, _, _, err = s.List(ctx, "bo", ListOptions{})
				if err != nil {
					t.Fatal(err)
				}
				return len(page) == 1
			})
			if n := page[0]; n.Title != "Roadmap" || n.Text != "Ana mentioned you in Roadmap" {
				t.Fatalf("notification %+v", n)
			}
		})
	}
}
