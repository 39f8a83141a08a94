package redisbus

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Peer id claims. With tokens, a connection's peer id is tied to its user
// across the cluster: a hash tandem:peer:<id> holds the user (u), the node
// (n) and a token of the connection (t), with a TTL of one node TTL that
// each node's beat renews for its own claims. A join whose peer id another
// user holds, on any node, is refused; the same user takes the claim over
// (a tab whose socket dropped reconnects to another node), and the node
// that held it closes its connection as replaced and hands the peer over
// without a word in its name. A claim goes when its connection does: only
// by the token that took it, so a newer claim stays.

// claimTimeout bounds how long a join waits for Redis.
const claimTimeout = time.Second

func claimKey(peerID string) string { return "tandem:peer:" + peerID }

// claimScript takes a peer id unless another user holds it. KEYS[1] is the
// claim; ARGV user, node, token, TTL in ms. It returns {1, node that held
// it before or ""}, or {0, node of the other user}.
var claimScript = redis.NewScript(`
local cur = redis.call('HMGET', KEYS[1], 'u', 'n')
if cur[1] and cur[1] ~= ARGV[1] then
  return {0, cur[2] or ''}
end
redis.call('HSET', KEYS[1], 'u', ARGV[1], 'n', ARGV[2], 't', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return {1, cur[2] or ''}
`)

// renewScript keeps a claim alive, or takes it again if it lapsed (Redis
// was away past the TTL, or restarted). Same keys and arguments as
// claimScript; it returns 1 if the claim is still the caller's, otherwise
// {user, node} of the claim that replaced it.
var renewScript = redis.NewScript(`
local cur = redis.call('HMGET', KEYS[1], 'u', 'n', 't')
if cur[3] == ARGV[3] then
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
  return 1
end
if not cur[1] then
  redis.call('HSET', KEYS[1], 'u', ARGV[1], 'n', ARGV[2], 't', ARGV[3])
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
  return 1
end
return {cur[1], cur[2] or ''}
`)

// deleteClaimScript deletes a claim if it is still the one with token ARGV[1].
var deleteClaimScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 't') == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// peerClaim is one connection's claim on this node.
type peerClaim struct {
	peer, user, token string
	moved             func(node string) // the transport's: a newer connection of the user took it
	held              bool              // Redis said it is ours; guarded by Bus.cmu
}

// ClaimPeer implements transport.Claims: one Redis round trip. When Redis cannot
// answer, the claim is kept here and taken by the next beat that reaches
// Redis, and the error says so; deciding whether to accept the join is the
// caller's.
func (b *Bus) ClaimPeer(ctx context.Context, peerID, userID string, moved func(node string)) (unclaim func(), taken bool, err error) {
	pc := &peerClaim{peer: peerID, user: userID, token: claimToken(), moved: moved}
	ctx, cancel := context.WithTimeout(ctx, claimTimeout)
	defer cancel()
	res, err := claimScript.Run(ctx, b.cfg.Client, []string{claimKey(peerID)},
		userID, b.cfg.NodeID, pc.token, b.cfg.NodeTTL.Milliseconds()).Slice()
	if err == nil && len(res) != 2 {
		err = fmt.Errorf("unexpected reply %v", res)
	}
	if err != nil {
		b.addClaim(pc, false)
		return func() { b.giveUpClaim(pc) }, false, fmt.Errorf("redisbus: claim peer id %q: %w", peerID, err)
	}
	if ok, _ := res[0].(int64); ok != 1 {
		return func() {}, true, nil
	}
	b.addClaim(pc, true)
	if node, _ := res[1].(string); node != "" && node != b.cfg.NodeID {
		// The same user's connection on another node had it: that node
		// checks its claims now rather than at its next beat.
		payload, err := b.encode(busMsg{Kind: kindClaim, Peer: peerID})
		if err == nil {
			b.toNodes(payload)
		}
	}
	return func() { b.giveUpClaim(pc) }, false, nil
}

func claimToken() string {
	var t [8]byte
	rand.Read(t[:])
	return hex.EncodeToString(t[:])
}

func (b *Bus) addClaim(pc *peerClaim, held bool) {
	b.cmu.Lock()
	pc.held = held
	b.claims[pc.peer] = append(b.claims[pc.peer], pc)
	b.cmu.Unlock()
}

// dropClaim forgets a claim. It reports whether the claim was still here
// and whether Redis had confirmed it.
func (b *Bus) dropClaim(pc *peerClaim) (here, held bool) {
	b.cmu.Lock()
	defer b.cmu.Unlock()
	list := b.claims[pc.peer]
	for i, c := range list {
		if c == pc {
			list = append(list[:i], list[i+1:]...)
			if len(list) == 0 {
				delete(b.claims, pc.peer)
			} else {
				b.claims[pc.peer] = list
			}
			return true, pc.held
		}
	}
	return false, false
}

// giveUpClaim gives up a claim when its connection ends: one round trip, and
// nothing if another connection's claim replaced it. A claim Redis never
// confirmed (it was away) is only forgotten here: if it was taken after
// all, it expires within a node TTL. So is one Redis does not answer for.
func (b *Bus) giveUpClaim(pc *peerClaim) {
	if here, held := b.dropClaim(pc); !here || !held {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), claimTimeout)
	defer cancel()
	if err := deleteClaimScript.Run(ctx, b.cfg.Client, []string{claimKey(pc.peer)}, pc.token).Err(); err != nil {
		b.log.Debug("bus: release peer id claim", "peer", pc.peer, "err", err)
	}
}

// claimsOf returns this node's claims, all of them or those of one peer id.
func (b *Bus) claimsOf(peerID string) []*peerClaim {
	b.cmu.Lock()
	defer b.cmu.Unlock()
	if peerID != "" {
		return append([]*peerClaim(nil), b.claims[peerID]...)
	}
	var out []*peerClaim
	for _, list := range b.claims {
		out = append(out, list...)
	}
	return out
}

// recheckClaims is told that another node took a claim on peerID.
func (b *Bus) recheckClaims(peerID string) {
	b.cmu.Lock()
	_, ours := b.claims[peerID]
	b.cmu.Unlock()
	if !ours {
		return
	}
	select {
	case b.recheck <- peerID:
	default: // the next beat renews, and so checks, every claim
	}
}

// queueRenewals adds the renewal of each claim to a pipeline;
// actOnRenewals reads the answers once it has run.
func (b *Bus) queueRenewals(ctx context.Context, pipe redis.Pipeliner, claims []*peerClaim) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(claims))
	ttl := b.cfg.NodeTTL.Milliseconds()
	for i, pc := range claims {
		cmds[i] = renewScript.EvalSha(ctx, pipe, []string{claimKey(pc.peer)}, pc.user, b.cfg.NodeID, pc.token, ttl)
	}
	return cmds
}

// renewClaims renews claims in a pipeline of their own.
func (b *Bus) renewClaims(ctx context.Context, claims []*peerClaim) {
	if len(claims) == 0 {
		return
	}
	pipe := b.cfg.Client.Pipeline()
	cmds := b.queueRenewals(ctx, pipe, claims)
	pipe.Exec(ctx)
	b.actOnRenewals(ctx, claims, cmds, true)
}

// actOnRenewals reads the answers to renewals: a claim still ours is
// marked held; one the same user took on another node means this node's
// connection was replaced. After a Redis restart the script must be
// loaded again; retry then renews at once.
func (b *Bus) actOnRenewals(ctx context.Context, claims []*peerClaim, cmds []*redis.Cmd, retry bool) {
	for i, cmd := range cmds {
		res, err := cmd.Result()
		if redis.HasErrorPrefix(err, "NOSCRIPT") {
			if retry && renewScript.Load(ctx, b.cfg.Client).Err() == nil {
				pipe := b.cfg.Client.Pipeline()
				again := b.queueRenewals(ctx, pipe, claims[i:])
				pipe.Exec(ctx)
				b.actOnRenewals(ctx, claims[i:], again, false)
			}
			return
		}
		if err != nil {
			continue // Redis is away: the next beat tries again
		}
		pc := claims[i]
		holder, ok := res.([]any)
		if !ok || len(holder) != 2 {
			b.cmu.Lock()
			pc.held = true // still ours, or taken again
			b.cmu.Unlock()
			continue
		}
		user, _ := holder[0].(string)
		node, _ := holder[1].(string)
		if here, _ := b.dropClaim(pc); !here {
			continue // given up meanwhile
		}
		switch {
		case user == pc.user && node == b.cfg.NodeID:
			// A newer connection here: the transport has replaced this one.
		case user == pc.user:
			b.log.Info("bus: peer reconnected on another node", "peer", pc.peer, "node", node)
			pc.moved(node)
		default:
			// Only if this node's claim lapsed (Redis lost it) and another
			// user took the id meanwhile. The connection here stays: no
			// claim elsewhere cuts off a user already connected.
			b.log.Warn("bus: peer id claimed by another user while this node's claim had lapsed",
				"peer", pc.peer, "node", node)
		}
	}
}
