package notify

import (
	"context"
	"fmt"
	"sync"
	"testing"

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
