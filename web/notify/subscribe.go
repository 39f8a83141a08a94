package notify

import (
	"context"
	"encoding/json"
)

// Subscription is one live connection of a user (a tab's event stream)
// receiving pushes.
type Subscription struct {
	s    *Service
	user string
	c    chan Delivery
	seen map[int64]bool // notification ids delivered here: pushes are at least once
	// order remembers seen ids oldest first, to bound seen.
	order  []int64
	closed bool
}

// subBuffer is how many pushes a subscription holds for a slow reader
// before it is closed (the client reconnects and catches up from the
// store).
const subBuffer = 64

// Delivery is a push as it reaches a subscription: decoded once, on its
// arrival at this node, for every subscription of the user here, with the
// JSON it came as (to send on unchanged).
type Delivery struct {
	Push *Push // shared by the subscriptions: read it, do not change it
	JSON []byte
}

// C delivers pushes. It is closed when the subscription ends: by Close, by
// the service closing, or because the reader fell subBuffer pushes behind.
func (sub *Subscription) C() <-chan Delivery { return sub.c }

// Subscribe starts delivering a user's pushes to a new subscription.
func (s *Service) Subscribe(user string) *Subscription {
	sub := &Subscription{s: s, user: user, c: make(chan Delivery, subBuffer), seen: map[int64]bool{}}
	s.mu.Lock()
	set := s.subs[user]
	if set == nil {
		set = map[*Subscription]struct{}{}
		s.subs[user] = set
	}
	set[sub] = struct{}{}
	s.mu.Unlock()
	s.cfg.Metrics.Subscriptions.Inc()
	s.pusher.Follow(user, true) // once per subscription: the pusher counts
	return sub
}

// Seen records notification ids the subscriber already has (e.g. those it
// was sent when catching up), so that a push of one is not sent again.
func (sub *Subscription) Seen(ids ...int64) {
	sub.s.mu.Lock()
	defer sub.s.mu.Unlock()
	for _, id := range ids {
		sub.markLocked(id)
	}
}

func (sub *Subscription) markLocked(id int64) bool {
	if sub.seen[id] {
		return false
	}
	sub.seen[id] = true
	sub.order = append(sub.order, id)
	if len(sub.order) > 4*subBuffer {
		delete(sub.seen, sub.order[0])
		sub.order = sub.order[1:]
	}
	return true
}

// Close ends the subscription.
func (sub *Subscription) Close() {
	s := sub.s
	s.mu.Lock()
	removed := false
	if set, ok := s.subs[sub.user]; ok {
		if _, mine := set[sub]; mine {
			delete(set, sub)
			removed = true
			if len(set) == 0 {
				delete(s.subs, sub.user)
			}
		}
	}
	sub.closeLocked()
	s.mu.Unlock()
	if removed {
		s.pusher.Follow(sub.user, false)
	}
}

func (sub *Subscription) closeLocked() {
	if !sub.closed {
		sub.closed = true
		close(sub.c)
		sub.s.cfg.Metrics.Subscriptions.Dec()
	}
}

// Deliver hands a push that arrived for a user to the user's subscriptions
// on this node. Pushers call it.
func (s *Service) Deliver(user string, push []byte) {
	d := Delivery{Push: new(Push), JSON: push}
	if err := json.Unmarshal(push, d.Push); err != nil {
		s.log.Warn("notify: an undecodable push", "user", user, "err", err)
		return
	}
	s.mu.Lock()
	var slow []*Subscription
	for sub := range s.subs[user] {
		if n := d.Push.Notification; n != nil && !sub.markLocked(n.ID) {
			s.cfg.Metrics.Duplicates.Inc()
			continue
		}
		select {
		case sub.c <- d:
			s.cfg.Metrics.Delivered.Inc()
		default:
			slow = append(slow, sub)
		}
	}
	s.mu.Unlock()
	for _, sub := range slow {
		s.cfg.Metrics.SlowClosed.Inc()
		sub.Close()
	}
}

// Resync ends a user's subscriptions on this node, for a pusher that may
// have missed pushes: the clients reconnect and catch up from the store.
func (s *Service) Resync(user string) {
	s.mu.Lock()
	subs := make([]*Subscription, 0, len(s.subs[user]))
	for sub := range s.subs[user] {
		subs = append(subs, sub)
	}
	s.mu.Unlock()
	for _, sub := range subs {
		sub.Close()
	}
}

// localPusher delivers on this node only: a node without Redis.
type localPusher struct{ s *Service }

func (l localPusher) Publish(_ context.Context, user string, push []byte) error {
	l.s.Deliver(user, push)
	return nil
}

func (localPusher) Follow(string, bool) {}
