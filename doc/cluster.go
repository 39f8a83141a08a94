package doc

import (
	"context"
	"fmt"

	"github.com/fxamacker/cbor/v2"
)

// The document protocol between the nodes of a cluster. The hub speaks it;
// a bus carries its messages as bytes between the nodes that watch a
// document and knows nothing of what is in them (transport/redisbus is
// one such bus; its BUS.md shows where these messages travel).
//
//   - chg: changes the store holds: the sending node accepted and stored
//     them, or had them from the store or another node. Sent once per
//     accepted change, and in answer to heads or want, once stored. The
//     receiving node does not write them again.
//   - heads: the sender's heads of the document. Sent when the bus asks
//     (AnnounceHeads: a node starts watching, Redis came back, and every
//     roster interval). A node that has changes the sender lacks answers
//     with chg; one that lacks some of the sender's answers with want.
//   - want: the changes after these heads, please. Answered with chg: the
//     changes since those heads, or the whole document if some are unknown.
//   - eph: an application's ephemeral message of a peer of the sender's.
//
// A lost message costs nothing for long: the heads exchange repairs any
// gap within a roster interval. Changes arrive possibly twice or out of
// order; the log ignores what it has, and what lacks a dependency waits
// in the room until it comes.

// Cluster carries this node's document messages to the other nodes that
// watch the document. PublishDocument must not block: it queues, and may
// drop under pressure. It may be called with a room's lock held.
type Cluster interface {
	PublishDocument(documentID string, payload []byte)
}

// clusterKind names a document message between nodes.
type clusterKind string

const (
	kindChanges   clusterKind = "chg"
	kindHeads     clusterKind = "heads"
	kindWant      clusterKind = "want"
	kindEphemeral clusterKind = "eph"
)

// clusterMsg is one document message between nodes, CBOR-encoded.
type clusterMsg struct {
	Kind  clusterKind       `cbor:"k"`
	Data  []byte            `cbor:"d,omitempty"` // chg: changes, or a whole document
	Heads [][]byte          `cbor:"h,omitempty"` // heads, want
	Eph   *clusterEphemeral `cbor:"e,omitempty"` // eph
}

// clusterEphemeral is an application's ephemeral message between nodes.
type clusterEphemeral struct {
	Sender  string `cbor:"s"`
	Session string `cbor:"ss"`
	Count   uint64 `cbor:"c"`
	Data    []byte `cbor:"d"`
}

// laneSize bounds the document messages received and not yet handled;
// past it Receive waits for the lane.
const laneSize = 4096

// laneWork is a received document message waiting in the lane.
type laneWork struct {
	documentID string
	m          clusterMsg
}

// publish sends one of this node's document messages to the others.
func (h *Hub) publish(documentID string, m clusterMsg) {
	if h.cfg.Cluster == nil {
		return
	}
	payload, err := cbor.Marshal(m)
	if err != nil {
		h.log.Error("encode a document message for the cluster", "kind", m.Kind, "err", err)
		return
	}
	h.cfg.Cluster.PublishDocument(documentID, payload)
}

// publishChanges sends changes accepted here, once stored. It is called
// with the room's lock held.
func (h *Hub) publishChanges(documentID string, changes []byte) {
	h.publish(documentID, clusterMsg{Kind: kindChanges, Data: changes})
}

// ReceiveRemote takes a document message that another node published. An
// ephemeral goes to the local peers at once. Changes, heads and wants wait
// in the document lane, handled one at a time in the order they came:
// applying changes takes the room's locks, which the caller (a bus, also
// carrying presence and goodbyes) must not wait for. ReceiveRemote blocks only
// while the lane is full, and not past Close.
func (h *Hub) ReceiveRemote(documentID string, payload []byte) error {
	var m clusterMsg
	if err := cbor.Unmarshal(payload, &m); err != nil {
		return fmt.Errorf("doc: undecodable document message for %s: %w", documentID, err)
	}
	switch m.Kind {
	case kindEphemeral:
		if e := m.Eph; e != nil {
			h.relayRemoteEphemeral(documentID, Ephemeral{SenderID: e.Sender, SessionID: e.Session, Count: e.Count, Data: e.Data})
		}
	case kindChanges, kindHeads, kindWant:
		select {
		case h.lane <- laneWork{documentID: documentID, m: m}:
		case <-h.stop:
		}
	default:
		// A kind of a newer node's: nothing here answers it.
	}
	return nil
}

// AnnounceHeads tells the other nodes this node's heads of a document, if
// it has the document in memory: they answer with what either side lacks.
func (h *Hub) AnnounceHeads(documentID string) {
	if heads, ok := h.Heads(documentID); ok {
		h.publish(documentID, clusterMsg{Kind: kindHeads, Heads: heads})
	}
}

// laneLoop handles the received changes, heads and wants in order, until
// ctx ends.
func (h *Hub) laneLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case w := <-h.lane:
			h.handleRemote(w.documentID, w.m)
		}
	}
}

func (h *Hub) handleRemote(documentID string, m clusterMsg) {
	switch m.Kind {
	case kindChanges:
		if err := h.applyRemoteChanges(documentID, m.Data); err != nil {
			h.log.Warn("another node's changes", "document", documentID, "err", err)
		}
	case kindHeads:
		if h.compare(documentID, m.Heads) {
			heads, _ := h.Heads(documentID)
			h.publish(documentID, clusterMsg{Kind: kindWant, Heads: heads})
		}
	case kindWant:
		h.changesSince(documentID, m.Heads)
	}
}

// publishEphemeral sends a local peer's ephemeral message to the
// document's peers on the other nodes.
func (h *Hub) publishEphemeral(documentID string, e Ephemeral) {
	h.publish(documentID, clusterMsg{Kind: kindEphemeral, Eph: &clusterEphemeral{
		Sender: e.SenderID, Session: e.SessionID, Count: e.Count, Data: e.Data,
	}})
}

// relayRemoteEphemeral sends an ephemeral message a peer on another node
// sent to every peer of the document here.
func (h *Hub) relayRemoteEphemeral(documentID string, e Ephemeral) {
	r := h.loadedRoom(documentID)
	if r == nil {
		return // no peer of the document here
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.evicted {
		return
	}
	for id, m := range r.members {
		if id != e.SenderID {
			m.peer.SendEphemeral(r.id, e)
		}
	}
}
