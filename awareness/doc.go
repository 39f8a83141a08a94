// Package awareness is Tandem's presence: who is in each document, where
// their cursors are, whether they are online, away or offline, and who is
// typing.
//
// Each document's presence is a state-based CRDT (State): per peer, a map
// of channels (user, cursor, selection, status, typing, or any channel an
// application adds), each a last-writer-wins register ordered by the
// sender's clock. Removing a peer is a tombstone with a higher clock.
// Merging states is commutative, associative and idempotent, so replicas
// that see the same updates in any order, with duplicates, agree.
//
// A Hub speaks automerge-repo's Presence protocol (ephemeral messages whose
// payload is {"__presence": ...}) on top of that CRDT: it tells newcomers
// the state of every live peer, forwards at most a leading and a
// trailing edge of each peer's channels per period (a room's period is one
// Config.Tick, longer by a tick per Config.RoomTickPeers peers, and each
// peer's period ends at a tick of its own: forward.go), drives status and
// typing expiry from one heartbeat/TTL table swept every Config.Sweep, and
// speaks goodbye for peers that vanish. What is forwarded goes to the
// room's feed (feed.go), from which each member's connection takes when it
// can write: what piled up meanwhile, the newest value of each channel
// only, or the whole room for a member that fell far behind.
//
// In a cluster the hub publishes its own peers' presence (after
// coalescing) and merges what other nodes publish into the same CRDT; the
// peers of a node that stops beating are removed (replica.go). It speaks
// that protocol itself (cluster.go) through a Replicator, which carries
// the messages as bytes. When each user was last seen is kept through
// LastSeenStore (the lastseen subpackage has the stores), and presence
// history, the intervals each user was present in each document and had
// each status, through HistoryStore, written by a recorder off the
// presence path (history.go; the history subpackage has the stores).
//
// The package knows nothing of sockets: peers are the small Peer interface,
// time comes from Config.Now, and tests drive Hub.Tick by hand.
//
// Concurrency: Hub methods are safe for concurrent use. One lock guards
// the hub: merging a message is quick, so one lock costs less than a lock
// per room (the document layer, whose guard checks each change against
// the document, has one per room). Peer methods are called outside that
// lock, and must not block; a feed's lock is taken after the hub's. Watch
// callbacks (subscription lists) and Replicator methods are called with
// the lock held: they must only queue.
package awareness
