// Command tandem runs a Tandem node: an automerge-repo sync server with
// presence, serving its demo page and WebSocket endpoint on one address.
// Alone it keeps documents in an embedded store; with --redis-url and
// --postgres-url it is one node of a cluster.
//
// config.go reads the flags; stores.go opens what the node keeps on disk;
// assemble.go builds the components in dependency order, runs them under
// one errgroup and stops each after those that talk to it; notify.go wires the
// notifications and the mentions doc/mention's tracker reports.
package main
