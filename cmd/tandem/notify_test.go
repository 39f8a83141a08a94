package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"

	"github.com/tandemhq/tandem/doc"
	"github.com/tandemhq/tandem/web/notify"
)

// What mentions may cost is bounded: one report notifies each user once
// and at most maxMentionedPerReport of them, never the author, and an
// author's reports together notify at most mentionsPerMinute at once.
func TestMentionsAreBounded(t *testing.T) {
	var mu sync.Mutex
	var posted []notify.Event
	post := func(_ context.Context, es []notify.Event) error {
		mu.Lock()
		posted = append(posted, es...)
		mu.Unlock()
		return nil
	}
	sink := mentionSink(context.Background(), post, slog.New(slog.NewTextHandler(io.Discard, nil)))
	users := []string{"ana", "ana", "me"}
	for i := range 5000 {
		users = append(users, fmt.Sprint("u", i))
	}
	sink(doc.Mention{DocumentID: "d", Actor: "me", Title: "T", Users: users})
	if len(posted) != maxMentionedPerReport {
		t.Fatalf("one report of 5,000 mentions made %d events, want %d", len(posted), maxMentionedPerReport)
	}
	seen := map[string]bool{}
	for _, e := range posted {
		if e.Recipient == "me" || seen[e.Recipient] {
			t.Fatalf("recipient %q notified wrongly", e.Recipient)
		}
		seen[e.Recipient] = true
	}
	for range 10 {
		sink(doc.Mention{DocumentID: "d", Actor: "me", Title: "T", Users: users[3:53]})
	}
	if len(posted) > mentionsPerMinute+1 { // the budget refills a little while the test runs
		t.Fatalf("an author's reports made %d events at once, want at most %d", len(posted), mentionsPerMinute)
	}
	before := len(posted)
	sink(doc.Mention{DocumentID: "d", Actor: "other", Title: "T", Users: []string{"ana"}})
	if len(posted) != before+1 {
		t.Fatal("another author's mention was held back by the first one's budget")
	}
}
