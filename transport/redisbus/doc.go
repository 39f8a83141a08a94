// Package redisbus joins Tandem nodes into a cluster over Redis.
//
// A Bus carries, between the nodes that watch a document, the changes each
// node accepted and the presence of its peers; it keeps node liveness
// (heartbeats, a key per node with a TTL, a goodbye on a clean stop) and
// user statuses (membership.go, users.go); it asks the other nodes for a
// document this node lacks (find.go); and it ties each authenticated
// connection's peer id to its user across the cluster (claims.go).
// NotifyPusher carries notification pushes to every node (notify.go).
//
// BUS.md, beside this file, is the protocol: channels, kinds of message,
// keys, and what is lost when and how it is repaired.
//
// Subscriptions follow the documents this node's clients watch (Join and
// Leave), never the whole cluster's, and are kept across lost connections,
// failovers and moved slots by a subscriber of the bus's own
// (subscriber.go; on a Redis Cluster every channel is a sharded channel,
// and topology.go says which master serves it). Publishing never blocks
// the caller: messages wait in a bounded queue, then in a lane per shard
// that sends them in pipelines (publish.go).
package redisbus
