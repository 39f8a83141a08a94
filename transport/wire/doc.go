// Package wire is the automerge-repo network protocol (version 1) as Tandem
// speaks it: the message shapes, their CBOR encoding, and the validation of
// document ids. It knows bytes, not sockets: the WebSocket side lives in
// package transport, the CRDT rules in packages doc and awareness.
//
// Everything here is stateless and safe for concurrent use. PROTOCOL.md in
// this folder describes the wire as Tandem implements it.
package wire
