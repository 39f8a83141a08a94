package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/automerge/automerge-go"
	"github.com/gorilla/websocket"

	"github.com/tandemhq/tandem/transport/wire"
)

// peer is one simulated automerge-repo client on its own socket.
type peer struct {
	id      string
	session string
	count   uint64
	ws      *websocket.Conn
	wmu     sync.Mutex // one writer at a time on ws
	server  string

	// What the peer received: frames and bytes, for the clients' side of
	// a benchmark's figures.
	framesIn, bytesIn atomic.Int64

	// The document it opened, as its replica and sync state (open).
	doc     string
	replica *automerge.Doc
	state   *automerge.SyncState

	// counts is the last ephemeral count the peer took from each sender
	// and session, as automerge-repo's NetworkSubsystem keeps it: a
	// message whose count is not higher is dropped. Only the reader uses it.
	counts map[string]uint64
}

func dialPeer(url string) (*peer, error) { return dialPeerAsking(url, false) }

// dialPeerAsking is dialPeer for a peer that, with batches, asks for
// presence in batches in its join, as Tandem's JS client does.
func dialPeerAsking(url string, batches bool) (*peer, error) {
	id := newPeerID()
	p := &peer{id: id, session: id[len(id)-8:]}
	ws, _, err := dialer().Dial(url, nil)
	if err != nil {
		return nil, err
	}
	p.ws = ws
	// A pong as a browser sends it: whenever the socket takes it. Gorilla's
	// own gives up after a second, and a failed write ends the socket's
	// reads too: on a loaded machine peers went deaf mid-run.
	ws.SetPingHandler(func(data string) error {
		p.wmu.Lock()
		defer p.wmu.Unlock()
		ws.WriteControl(websocket.PongMessage, []byte(data), time.Time{})
		return nil
	})
	if err := p.send(&wire.Message{Type: wire.TypeJoin, PeerMetadata: &wire.PeerMetadata{IsEphemeral: true, PresenceBatch: batches},
		SupportedProtocolVersions: []string{wire.ProtocolV1}}); err != nil {
		return nil, err
	}
	ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		m, err := p.recv()
		if err != nil {
			return nil, fmt.Errorf("handshake: %w", err)
		}
		if m.Type == wire.TypePeer {
			p.server = m.SenderID
			ws.SetReadDeadline(time.Time{})
			return p, nil
		}
	}
}

// portsPerSource is how many connections the bench opens from one source
// address to a server on the loopback: the kernel's ephemeral ports (about
// 28,000 by default) are per pair of addresses, so past this the bench
// dials from 127.0.0.2, 127.0.0.3 and so on.
const portsPerSource = 25000

var dials atomic.Int64

// dialer returns the dialer of the next connection.
func dialer() *websocket.Dialer {
	n := dials.Add(1) - 1
	if n < portsPerSource {
		return websocket.DefaultDialer
	}
	d := *websocket.DefaultDialer
	local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(1+n/portsPerSource))}
	nd := &net.Dialer{LocalAddr: local, Timeout: 30 * time.Second}
	d.NetDialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if host, _, err := net.SplitHostPort(addr); err != nil || !net.ParseIP(host).IsLoopback() {
			var plain net.Dialer
			return plain.DialContext(ctx, network, addr) // another host: its own source address
		}
		return nd.DialContext(ctx, network, addr)
	}
	return &d
}

func (p *peer) send(m *wire.Message) error {
	m.SenderID = p.id
	return p.sendAs(m)
}

// sendAs sends m to the server under the sender m names.
func (p *peer) sendAs(m *wire.Message) error {
	if p.server != "" {
		m.TargetID = p.server
	}
	b, err := wire.Encode(m)
	if err != nil {
		return err
	}
	p.wmu.Lock() // the reader answers sync while a sender moves cursors
	defer p.wmu.Unlock()
	return p.ws.WriteMessage(websocket.BinaryMessage, b)
}

// fresh reports whether an ephemeral is new to the peer, and notes it, as
// automerge-repo's NetworkSubsystem does: its count must be higher than
// the last taken from its sender's session. Only the reader calls it.
func (p *peer) fresh(m *wire.Message) bool {
	if p.counts == nil {
		p.counts = make(map[string]uint64)
	}
	source := m.SenderID + ":" + m.SessionID
	if last, ok := p.counts[source]; ok && m.Count <= last {
		return false
	}
	p.counts[source] = m.Count
	return true
}

// passOn sends an ephemeral the peer took to its other peers in the
// document, under its sender, as automerge-repo's DocSynchronizer does
// with every ephemeral it receives: the peer's one other peer is the
// server, which sent it.
func (p *peer) passOn(m *wire.Message) error {
	if m.SenderID == p.server {
		return nil
	}
	return p.sendAs(m)
}

func (p *peer) recv() (*wire.Message, error) {
	_, b, err := p.ws.ReadMessage()
	if err != nil {
		return nil, err
	}
	p.counted(b)
	return wire.Decode(b)
}

func (p *peer) counted(b []byte) {
	p.framesIn.Add(1)
	p.bytesIn.Add(int64(len(b)))
}

// ephemeral broadcasts data to the document's other peers.
func (p *peer) ephemeral(doc string, data []byte) error {
	p.count++
	return p.send(&wire.Message{Type: wire.TypeEphemeral, DocumentID: doc, SessionID: p.session, Count: p.count, Data: data})
}

// create makes a document on the server: it syncs a one-change document
// until the server answers nothing more.
func (p *peer) create(doc string) error {
	d := automerge.New()
	d.RootMap().Set("bench", "yes")
	d.Commit("create")
	state := automerge.NewSyncState(d)
	p.doc, p.replica, p.state = doc, d, state // its reader answers what comes later (answer)
	p.ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer p.ws.SetReadDeadline(time.Time{})
	for round := 0; round < 10; round++ {
		m, ok := state.GenerateMessage()
		if !ok {
			return nil
		}
		if err := p.send(&wire.Message{Type: wire.TypeSync, DocumentID: doc, Data: m.Bytes()}); err != nil {
			return err
		}
		reply, err := p.recv()
		if err != nil {
			return err
		}
		if reply.Type == wire.TypeSync {
			if _, err := state.ReceiveMessage(reply.Data); err != nil {
				return err
			}
		}
	}
	return nil
}

// open asks for a document so that the server counts this peer in it.
// open asks for a document, as a client's find does; the peer's reader
// then answers what the server sends (answer), as automerge-repo does,
// until both sides are level.
func (p *peer) open(doc string) error {
	p.doc = doc
	p.replica = automerge.New()
	p.state = automerge.NewSyncState(p.replica)
	m, _ := p.state.GenerateMessage()
	return p.send(&wire.Message{Type: wire.TypeRequest, DocumentID: doc, Data: m.Bytes()})
}

// answer takes a sync message of the opened document and replies if
// automerge has anything to say. Only the peer's reader calls it.
func (p *peer) answer(data []byte) error {
	if p.state == nil {
		return nil
	}
	if _, err := p.state.ReceiveMessage(data); err != nil {
		return err
	}
	if m, ok := p.state.GenerateMessage(); ok {
		return p.send(&wire.Message{Type: wire.TypeSync, DocumentID: p.doc, Data: m.Bytes()})
	}
	return nil
}

// newPeerID makes a peer id of its own.
func newPeerID() string {
	var b [8]byte
	rand.Read(b[:])
	return "bench-" + hex.EncodeToString(b[:])
}

func newDocID() string {
	var u [16]byte
	rand.Read(u[:])
	return wire.NewDocumentID(u)
}
