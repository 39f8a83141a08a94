package notify

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"golang.org/x/time/rate"
)

// Mention is one report of mentions: a burst of one author's edits to a
// document inserted mentions of these users (the document layer's report,
// doc.Mention, field for field).
type Mention struct {
	DocumentID string
	// Key names the report for good: a report offered again keeps it.
	Key              string
	Actor, ActorName string
	Title            string
	// Users has one entry per inserted mention.
	Users []string
}

// Bounds on what mentions may cost: one report (the changes of a burst of
// typing) notifies at most MaxMentionedPerReport distinct users, and one
// author causes at most MentionsPerMinute events a minute (a burst of as
// many); past either, mentions are dropped and logged. A 34 KB change
// naming 5,000 ids made 5,000 notifications before.
const (
	MaxMentionedPerReport = 50
	MentionsPerMinute     = 120
	maxMentionAuthors     = 10_000 // authors whose budget is remembered
)

// Mentions turns mention reports into events, within the bounds.
type Mentions struct {
	post func(context.Context, []Event) error
	log  *slog.Logger

	mu      sync.Mutex
	budgets map[string]*rate.Limiter // by author
}

// NewMentions returns a policy that posts with post (Service.PostMany).
func NewMentions(post func(context.Context, []Event) error, log *slog.Logger) *Mentions {
	if log == nil {
		log = slog.Default()
	}
	return &Mentions{post: post, log: log, budgets: make(map[string]*rate.Limiter)}
}

// Report posts a report's events in one batch, each keyed by the report's
// key and its recipient, so that a report offered again notifies nobody
// twice. Each user is notified once per report; mentioning yourself
// notifies nobody, nor does a user id no event can carry (logged). The
// title, the actor and its name are clipped to what an event carries
// (clip), so whatever text a document holds, its events pass Validate.
// An error means nothing was posted: offer the report again, unless it
// wraps ErrBadEvent (its document or key cannot be carried), which is
// permanent.
func (p *Mentions) Report(ctx context.Context, m Mention) error {
	actor := m.Actor
	var users []string
	seen := make(map[string]bool, len(m.Users))
	unaddressable := 0
	for _, u := range m.Users {
		if u == actor || seen[u] {
			continue
		}
		seen[u] = true
		if !validID(u) {
			unaddressable++
			continue
		}
		users = append(users, u)
	}
	if unaddressable > 0 {
		p.log.Warn("a report names users no notification can be addressed to: they are not notified",
			"document", m.DocumentID, "actor", actor, "users", unaddressable)
	}
	if len(users) > MaxMentionedPerReport {
		p.log.Warn("a change mentions too many users: the rest are not notified",
			"document", m.DocumentID, "actor", actor, "mentioned", len(users), "notified", MaxMentionedPerReport)
		users = users[:MaxMentionedPerReport]
	}
	if granted := p.allow(actor, len(users)); granted < len(users) {
		p.log.Warn("an author mentions faster than allowed: the rest are not notified",
			"document", m.DocumentID, "actor", actor, "mentioned", len(users), "notified", granted)
		users = users[:granted]
	}
	if len(users) == 0 {
		return nil
	}
	events := make([]Event, len(users))
	title, by, name := clip(m.Title, MaxTextLen), clip(actor, MaxIDLen), clip(m.ActorName, MaxTextLen)
	for i, u := range users {
		events[i] = Event{Recipient: u, Kind: KindMention, Document: m.DocumentID, Title: title,
			Actor: by, ActorName: name, Key: m.Key + ":" + u}
	}
	if err := p.post(ctx, events); err != nil {
		return fmt.Errorf("queue %d mentions in %s: %w", len(events), m.DocumentID, err)
	}
	return nil
}

// allow takes up to n events from the author's budget and returns how many
// it took.
func (p *Mentions) allow(actor string, n int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	b := p.budgets[actor]
	if b == nil {
		if len(p.budgets) >= maxMentionAuthors {
			clear(p.budgets)
		}
		b = rate.NewLimiter(rate.Limit(MentionsPerMinute)/60, MentionsPerMinute)
		p.budgets[actor] = b
	}
	granted := 0
	for granted < n && b.Allow() {
		granted++
	}
	return granted
}
