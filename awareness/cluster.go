package awareness

import (
	"fmt"
	"sync"
	"time"

	"github.com/fxamacker/cbor/v2"
)

// The presence protocol between the nodes of a cluster. The hub speaks it;
// a bus carries its messages as bytes between the nodes that watch a
// document (transport/redisbus is one such bus; its BUS.md shows where
// they travel), and asks for what only it can time.
//
//   - delta: a change of one of the sender's peers' presence (Delta),
//     after coalescing, goodbyes included. Sent as presence forwards it,
//     and for every peer when the bus asks (SendState: a node started
//     watching the document, or Redis came back).
//   - roster: the sender's peers visible in the document, even none. Sent
//     when the bus asks (AnnounceRoster, every roster interval). A
//     receiver says goodbye for the sender's peers it does not list (their
//     goodbye was lost), and if it lists a peer the receiver has no state
//     of, the receiver asks every node for its state (AskState), at most
//     once per three roster intervals per document.
//
// A goodbye is published as a leave: a bus must not drop it for a full
// queue.

// Replicator carries presence to the other nodes. Its methods must not
// block: they are called with the hub's lock held.
type Replicator interface {
	// PublishPresence sends a presence message about a document to the
	// other nodes that watch it; leave marks a goodbye.
	PublishPresence(documentID string, payload []byte, leave bool)
	// AskState asks every node that watches the document for the whole
	// presence of its peers there (their SendState).
	AskState(documentID string)
	// PublishUserStatus sends the status of a user's peers on this node.
	PublishUserStatus(userID string, s Status)
	// WatchUsers starts (or, with on false, stops) receiving the
	// statuses other nodes publish for these users.
	WatchUsers(userIDs []string, on bool)
	// Hears reports whether this node has heard the document's channel
	// long enough to take a remote peer's silence there for its absence:
	// not while its subscription is being made again (a Redis failover),
	// nor just after. A remote peer of a document not heard does not
	// expire by RemoteTTL; its node's death still ends it.
	Hears(documentID string) bool
}

// nodeKind names a presence message between nodes.
type nodeKind string

const (
	kindDelta  nodeKind = "delta"
	kindRoster nodeKind = "roster"
)

// nodeMsg is one presence message between nodes, CBOR-encoded.
type nodeMsg struct {
	Kind  nodeKind `cbor:"k"`
	Delta *Delta   `cbor:"x,omitempty"`  // delta
	Peers []string `cbor:"ps,omitempty"` // roster
}

// askAgainDefault bounds how often a document's state is asked for again
// when the hub has no RemoteTTL (three roster intervals of 3 s).
const askAgainDefault = 9 * time.Second

// asking rate-limits AskState per document.
type asking struct {
	mu   sync.Mutex
	last map[string]time.Time
}

func (a *asking) may(documentID string, now time.Time, every time.Duration) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if now.Sub(a.last[documentID]) < every {
		return false
	}
	if a.last == nil || len(a.last) > 4096 {
		a.last = make(map[string]time.Time)
	}
	a.last[documentID] = now
	return true
}

// publishDelta sends a delta of one of this node's peers. It may be called
// with h.mu held.
func (h *Hub) publishDelta(documentID string, d Delta) {
	h.publishNode(documentID, nodeMsg{Kind: kindDelta, Delta: &d}, d.IsGoodbye())
}

func (h *Hub) publishNode(documentID string, m nodeMsg, leave bool) {
	if h.cfg.Replicator == nil {
		return
	}
	payload, err := cbor.Marshal(m)
	if err != nil {
		h.log.Error("encode a presence message for the cluster", "kind", m.Kind, "err", err)
		return
	}
	h.cfg.Replicator.PublishPresence(documentID, payload, leave)
}

// ReceiveRemote takes a presence message that node published about a
// document. A message of a kind this node does not know (a newer node's)
// is ignored.
func (h *Hub) ReceiveRemote(node, documentID string, payload []byte) error {
	var m nodeMsg
	if err := cbor.Unmarshal(payload, &m); err != nil {
		return fmt.Errorf("awareness: undecodable presence message from %s for %s: %w", node, documentID, err)
	}
	switch m.Kind {
	case kindDelta:
		if m.Delta != nil {
			h.ApplyRemote(node, documentID, *m.Delta)
		}
	case kindRoster:
		every := h.cfg.RemoteTTL
		if every <= 0 {
			every = askAgainDefault
		}
		if h.ApplyRoster(node, documentID, m.Peers) && h.asked.may(documentID, time.Now(), every) && h.cfg.Replicator != nil {
			h.cfg.Replicator.AskState(documentID) // a state lost on its way
		}
	}
	return nil
}

// SendState publishes the whole presence of this node's peers in a
// document: another node started watching it, or may have lost messages.
func (h *Hub) SendState(documentID string) {
	for _, d := range h.LocalState(documentID) {
		h.publishDelta(documentID, d)
	}
}

// AnnounceRoster publishes this node's peers visible in a document. Even
// an empty roster says something: none of this node's peers is there now.
func (h *Hub) AnnounceRoster(documentID string) {
	h.publishNode(documentID, nodeMsg{Kind: kindRoster, Peers: h.LocalRoster(documentID)}, false)
}
