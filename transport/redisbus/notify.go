package redisbus

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/tandemhq/tandem/internal/lifecycle"
)

// NotifyPusher carries notification pushes between nodes over Redis
// Pub/Sub, one channel per user (tandem:notify:<user>), subscribed on a
// node only while one of that user's live connections is there. It has a
// subscription connection of its own, apart from the document bus.
type NotifyPusher struct {
	client  *redis.Client
	log     *slog.Logger
	loop    lifecycle.Loop
	deliver func(user string, push []byte) // set by Attach
	resync  func(user string)
	ps      *redis.PubSub

	mu        sync.Mutex
	following map[string]int // subscriptions per user on this node
}

const notifyPrefix = "tandem:notify:"

// NewNotifyPusher returns a pusher; Run starts receiving.
func NewNotifyPusher(client *redis.Client, log *slog.Logger) (*NotifyPusher, error) {
	if client == nil {
		return nil, errors.New("redisbus: NewNotifyPusher needs a client")
	}
	if log == nil {
		log = slog.Default()
	}
	return &NotifyPusher{client: client, log: log, following: map[string]int{}}, nil
}

// Attach gives the pusher what it hands received pushes to (see Run); call
// it before Run.
func (p *NotifyPusher) Attach(deliver func(user string, push []byte), resync func(user string)) {
	p.deliver, p.resync = deliver, resync
}

// Close stops Run and waits for it or ctx. Safe to call twice.
func (p *NotifyPusher) Close(ctx context.Context) error {
	_, err := p.loop.Stop(ctx)
	return err
}

// Publish implements notify.Pusher.
func (p *NotifyPusher) Publish(ctx context.Context, user string, push []byte) error {
	return p.client.Publish(ctx, notifyPrefix+user, push).Err()
}

// Follow implements notify.Pusher: it counts a user's subscriptions and
// subscribes to the user's channel while there is one. Counting makes the
// order of a closing and an opening subscription (a reloaded tab)
// irrelevant; the Redis commands go out in the order of the counts' changes.
func (p *NotifyPusher) Follow(user string, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.following[user]
	if on {
		p.following[user] = n + 1
		if n > 0 {
			return
		}
	} else {
		if n <= 1 {
			delete(p.following, user)
		} else {
			p.following[user] = n - 1
		}
		if n != 1 {
			return
		}
	}
	if p.ps == nil {
		return // Run subscribes to what is followed by then
	}
	// go-redis replays subscriptions after a reconnection, so an error
	// here is only logged.
	var err error
	if on {
		err = p.ps.Subscribe(context.Background(), notifyPrefix+user)
	} else {
		err = p.ps.Unsubscribe(context.Background(), notifyPrefix+user)
	}
	if err != nil {
		p.log.Warn("notification channel", "user", user, "follow", on, "err", err)
	}
}

// Run receives pushes for the followed users and hands each to deliver,
// until ctx ends or Close. When the subscription connection comes back
// after a loss, pushes published meanwhile never arrive: resync is then
// called for every followed user, so that their live streams end and their
// clients catch up from the store (a reconnecting EventSource sends
// Last-Event-ID).
func (p *NotifyPusher) Run(ctx context.Context) error {
	if p.deliver == nil || p.resync == nil {
		return errors.New("redisbus: NotifyPusher.Run before Attach")
	}
	return p.loop.Run(ctx, func(ctx context.Context) error {
		p.receive(ctx, p.deliver, p.resync)
		return nil
	})
}

func (p *NotifyPusher) receive(ctx context.Context, deliver func(user string, push []byte), resync func(user string)) {
	p.mu.Lock()
	channels := make([]string, 0, len(p.following))
	for u := range p.following {
		channels = append(channels, notifyPrefix+u)
	}
	// A PubSub with no channel yet: go-redis connects on the first Subscribe.
	p.ps = p.client.Subscribe(ctx, channels...)
	p.mu.Unlock()
	defer p.ps.Close()
	// Confirmations tell a re-subscription after a reconnection (a second
	// "subscribe" for a channel with no "unsubscribe" between) from a first.
	confirmed := map[string]bool{}
	ch := p.ps.ChannelWithSubscriptions()
	for {
		select {
		case <-ctx.Done():
			return
		case v, ok := <-ch:
			if !ok {
				return
			}
			switch m := v.(type) {
			case *redis.Subscription:
				user, found := strings.CutPrefix(m.Channel, notifyPrefix)
				if !found {
					continue
				}
				switch m.Kind {
				case "subscribe":
					if confirmed[m.Channel] {
						p.log.Info("notification channel resubscribed: live streams catch up", "user", user)
						resync(user)
					}
					confirmed[m.Channel] = true
				case "unsubscribe":
					delete(confirmed, m.Channel)
				}
			case *redis.Message:
				if user, found := strings.CutPrefix(m.Channel, notifyPrefix); found {
					deliver(user, []byte(m.Payload))
				}
			}
		}
	}
}
