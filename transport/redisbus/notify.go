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
// Pub/Sub, one channel per user (tandem:notify:<user>, a sharded channel
// on a Redis Cluster), subscribed on a node only while one of that user's
// live connections is there. It has subscription connections of its own,
// apart from the document bus.
type NotifyPusher struct {
	client  redis.UniversalClient
	log     *slog.Logger
	loop    lifecycle.Loop
	deliver func(user string, push []byte) // set by Attach
	resync  func(user string)

	mu        sync.Mutex
	sub       *subscriber    // while Run runs
	following map[string]int // subscriptions per user on this node
}

const notifyPrefix = "tandem:notify:"

// NewNotifyPusher returns a pusher over one Redis (*redis.Client) or a
// Redis Cluster (*redis.ClusterClient); Run starts receiving.
func NewNotifyPusher(client redis.UniversalClient, log *slog.Logger) (*NotifyPusher, error) {
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
	_, sharded := p.client.(*redis.ClusterClient)
	return publishTo(ctx, p.client, sharded, notifyPrefix+user, push).Err()
}

// Follow implements notify.Pusher: it counts a user's subscriptions and
// subscribes to the user's channel while there is one. Counting makes the
// order of a closing and an opening subscription (a reloaded tab)
// irrelevant.
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
	if p.sub == nil {
		return // Run subscribes to what is followed by then
	}
	if on {
		p.sub.add(notifyPrefix + user)
	} else {
		p.sub.remove(notifyPrefix + user)
	}
}

// Run receives pushes for the followed users and hands each to deliver,
// until ctx ends or Close. When a subscription comes back after a loss,
// pushes published meanwhile never arrive: resync is then called for its
// user, so that their live streams end and their clients catch up from
// the store (a reconnecting EventSource sends Last-Event-ID).
func (p *NotifyPusher) Run(ctx context.Context) error {
	if p.deliver == nil || p.resync == nil {
		return errors.New("redisbus: NotifyPusher.Run before Attach")
	}
	return p.loop.Run(ctx, func(ctx context.Context) error {
		sub, err := newSubscriber(subscriberConfig{
			client: p.client, log: p.log,
			deliver: func(channel, payload string) {
				if user, ok := strings.CutPrefix(channel, notifyPrefix); ok {
					p.deliver(user, []byte(payload))
				}
			},
			ready: func(channel string, resumed bool) {
				if user, ok := strings.CutPrefix(channel, notifyPrefix); ok && resumed {
					p.log.Info("notification channel resubscribed: live streams catch up", "user", user)
					p.resync(user)
				}
			},
		})
		if err != nil {
			return err
		}
		p.mu.Lock()
		p.sub = sub
		for u := range p.following {
			sub.add(notifyPrefix + u)
		}
		p.mu.Unlock()
		<-ctx.Done()
		p.mu.Lock()
		p.sub = nil
		p.mu.Unlock()
		sub.close()
		return nil
	})
}
