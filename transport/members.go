package transport

import (
	"context"
	"sync"

	"github.com/tandemhq/tandem/awareness"
	"github.com/tandemhq/tandem/doc"
	"github.com/tandemhq/tandem/internal/smallmap"
)

// members is the node's one record of which connections are in which
// document. It alone tells the others: presence (a newcomer is sent
// everyone there; a closed connection's goodbye), the document layer (a
// closed connection's sync states go) and the bus (it watches a document
// from its first connection here to its last). It also routes each
// ephemeral message, once: presence's, or the document's relay.
//
// A connection is in a document from its first message for it (join)
// until it closes (leave), or until a change it sent there is refused
// (leaveDocument); a connection's own list of its documents is
// conn.docs, which only its reader touches.
type members struct {
	cfg *Config

	mu   sync.Mutex
	docs map[string]int // connections in each document
}

func newMembers(cfg *Config) *members {
	return &members{cfg: cfg, docs: make(map[string]int)}
}

// join puts c in a document unless the document is full here, and reports
// whether it did.
func (m *members) join(c *conn, documentID string) bool {
	m.mu.Lock()
	if m.docs[documentID] >= m.cfg.MaxPeersPerDocument {
		m.mu.Unlock()
		return false
	}
	m.docs[documentID]++
	first := m.docs[documentID] == 1
	m.mu.Unlock()
	if first && m.cfg.Bus != nil {
		m.cfg.Bus.Join(documentID)
	}
	if p := m.cfg.Presence; p != nil {
		p.Join(c, documentID)
	}
	return true
}

// leave takes a closed connection out of every document it joined.
// Presence goes first: the peer's goodbye, in its name, before anything
// else; or, if a newer connection of the same user took the peer over on
// another node (movedTo), nothing in its name at all.
func (m *members) leave(c *conn, docs *smallmap.Map[string, struct{}], movedTo string) {
	if p := m.cfg.Presence; p != nil && c.peerID != "" {
		if movedTo != "" {
			p.Handoff(c, movedTo)
		} else {
			p.Leave(c)
		}
	}
	var unwatched []string
	m.mu.Lock()
	for id := range docs.Keys() {
		if m.docs[id]--; m.docs[id] <= 0 {
			delete(m.docs, id)
			unwatched = append(unwatched, id)
		}
	}
	m.mu.Unlock()
	for id := range docs.Keys() {
		m.cfg.Documents.Leave(c, id)
	}
	if m.cfg.Bus != nil {
		for _, id := range unwatched {
			m.cfg.Bus.Leave(id)
		}
	}
}

// leaveDocument takes c out of one document while it stays connected (a
// change it sent there was refused: refused.go). The caller has taken the
// document out of c.docs.
func (m *members) leaveDocument(c *conn, documentID string) {
	if p := m.cfg.Presence; p != nil {
		p.LeaveDocument(c, documentID)
	}
	m.mu.Lock()
	m.docs[documentID]--
	last := m.docs[documentID] <= 0
	if last {
		delete(m.docs, documentID)
	}
	m.mu.Unlock()
	m.cfg.Documents.Leave(c, documentID)
	if last && m.cfg.Bus != nil {
		m.cfg.Bus.Leave(documentID)
	}
}

// ephemeral routes an ephemeral message of c's: presence takes what is
// presence (an error means it is presence and malformed); anything else is
// the application's, relayed to the document's peers.
func (m *members) ephemeral(ctx context.Context, c *conn, documentID string, e doc.Ephemeral) (presenceErr, docErr error) {
	if p := m.cfg.Presence; p != nil {
		handled, err := p.Receive(c, documentID, awareness.Message{
			SenderID: e.SenderID, SessionID: e.SessionID, Count: e.Count, Data: e.Data,
		})
		if err != nil || handled {
			return err, nil
		}
	}
	return nil, m.cfg.Documents.Ephemeral(ctx, c, documentID, e)
}
