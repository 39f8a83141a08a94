package doc

import (
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tandemhq/tandem/doc/amsync"
)

// Sync states are charged to their connection. What a room keeps of a
// peer's sync state (amsync.State.Kept: the heads it named, what it is
// owed until sent, the spans of what it was sent, the filter of the log
// made for it) is summed per connection (a Peer) over its documents, and
// bounded by Config.SyncStateBytes: before a message is read into the
// state, what it may add (amsync.Holds) must fit, or the message is
// refused and nothing of it is applied. Honest peers keep a few hundred
// bytes a document: a head or two each way, and a span or two.

// errSyncState marks a message whose peer's sync states would pass
// Config.SyncStateBytes.
var errSyncState = fmt.Errorf("%w: the connection's sync states would pass their bound", errUnsafe)

// defaultSyncStateBytes is Config.SyncStateBytes' default: a connection
// may name 10,000 heads (amsync.MaxHeads) in a dozen documents at once.
const defaultSyncStateBytes = 4 << 20

// syncStates sums the kept bytes of every connection's sync states.
type syncStates struct {
	max   int64
	gauge prometheus.Gauge
	mu    sync.Mutex
	by    map[Peer]int64 // summed over the peer's rooms (member.kept)
}

func newSyncStates(max int64) *syncStates {
	return &syncStates{max: max, by: make(map[Peer]int64), gauge: prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tandem_sync_state_bytes",
		Help: "Bytes of the sync states kept for peers (the heads they named, what they are owed until it is sent, what they were sent), summed over connections and documents.",
	})}
}

// fits reports whether p's states may hold hold bytes more than they do.
func (s *syncStates) fits(p Peer, hold int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.by[p]+hold <= s.max
}

// charge sets what p's state in one room holds from was to now.
func (s *syncStates) charge(p Peer, was, now int64) {
	if was == now {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.by[p] + now - was
	if v <= 0 {
		delete(s.by, p)
	} else {
		s.by[p] = v
	}
	s.gauge.Add(float64(now - was))
}

// settle charges m's state as it is now. The caller holds r.mu.
func (m *member) settle(h *Hub) {
	now := int64(m.sync.Kept())
	h.syncStates.charge(m.peer, m.kept, now)
	m.kept = now
}

// release gives back what m's state was charged: it leaves the room.
func (m *member) release(h *Hub) {
	h.syncStates.charge(m.peer, m.kept, 0)
	m.kept = 0
}

// holds bounds what reading msg into a sync state may add.
func holds(msg *amsync.Message) int64 { return int64(amsync.Holds(msg)) }
