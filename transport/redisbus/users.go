package redisbus

// Users' statuses across nodes: each node writes its users' statuses to
// a hash per user and publishes changes on the user's channel, which the
// nodes whose contact lists follow the user subscribe to.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tandemhq/tandem/awareness"
)

func userChannel(id string) string { return "tandem:user:" + id }

// userKey is the hash of a user's status on each node: field = node id,
// value = "<status> <expiry in unix ms>". Nodes rewrite their fields every
// beat in one pipeline; readers ignore expired fields, and the key itself
// expires when no node writes it any more.
func userKey(id string) string { return "tandem:user-status:" + id }

// UserStatus implements awareness.Directory: the best status the other
// nodes wrote for the user and have not let expire.
func (b *Bus) UserStatus(ctx context.Context, userID string) (awareness.Status, error) {
	fields, err := b.cfg.Client.HGetAll(ctx, userKey(userID)).Result()
	if err != nil {
		return awareness.StatusOffline, err
	}
	best := awareness.StatusOffline
	now := time.Now().UnixMilli()
	for _, v := range fields {
		st, fresh := parseUserStatus(v, now)
		if !fresh {
			continue
		}
		switch st {
		case awareness.StatusOnline:
			best = awareness.StatusOnline
		case awareness.StatusAway:
			if best == awareness.StatusOffline {
				best = awareness.StatusAway
			}
		}
	}
	return best, nil
}

// readUsers applies the statuses other nodes last wrote for these users
// (their channels are subscribed: what changes from now is heard).
func (b *Bus) readUsers(ctx context.Context, sub []string) {
	if len(sub) == 0 {
		return
	}
	pipe := b.cfg.Client.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(sub))
	for i, id := range sub {
		cmds[i] = pipe.HGetAll(ctx, userKey(id))
	}
	pipe.Exec(ctx)
	now := time.Now().UnixMilli()
	for i, id := range sub {
		fields, err := cmds[i].Result()
		if err != nil {
			continue
		}
		for node, v := range fields {
			if st, fresh := parseUserStatus(v, now); fresh && node != b.cfg.NodeID {
				b.presence.ApplyUserStatus(node, id, st)
			}
		}
	}
}

// PublishUserStatus implements awareness.Replicator.
func (b *Bus) PublishUserStatus(userID string, st awareness.Status) {
	payload, err := b.encode(busMsg{Kind: kindUser, User: userID, Status: st})
	if err != nil {
		return
	}
	b.enqueue(busOut{channel: userChannel(userID), payload: payload, user: userID, status: st, leave: st == awareness.StatusOffline})
}

// WatchUsers implements awareness.Replicator.
func (b *Bus) WatchUsers(userIDs []string, on bool) {
	b.mu.Lock()
	for _, id := range userIDs {
		if on {
			b.users[id] = true
		} else {
			delete(b.users, id)
		}
		b.usersDirty[id] = true
	}
	b.mu.Unlock()
	b.poke()
}

// writeUserStatus sets this node's field of a user's status hash, valid for
// one node TTL, and keeps the hash alive for two.
func (b *Bus) writeUserStatus(ctx context.Context, pipe redis.Pipeliner, user string, st awareness.Status) {
	until := time.Now().Add(b.cfg.NodeTTL).UnixMilli()
	pipe.HSet(ctx, userKey(user), b.cfg.NodeID, fmt.Sprintf("%s %d", st, until))
	pipe.PExpire(ctx, userKey(user), 2*b.cfg.NodeTTL)
}

// parseUserStatus reads a field written by writeUserStatus; fresh is false
// for an unreadable or expired one.
func parseUserStatus(v string, nowMillis int64) (st awareness.Status, fresh bool) {
	s, until, ok := strings.Cut(v, " ")
	ms, err := strconv.ParseInt(until, 10, 64)
	if !ok || err != nil || ms < nowMillis {
		return awareness.StatusOffline, false
	}
	return awareness.Status(s), true
}
