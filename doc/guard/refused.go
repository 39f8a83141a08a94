package guard

import (
	"bytes"
	"container/list"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Refused changes are remembered, so that a client sending one again (a
// stock client does, on every reconnection, and in later sync messages) is
// refused by the change's hash alone: its message is not admitted or
// checked a second time.
//
// What is remembered, per document, is a change hash the guard's verdict
// is sure to repeat for:
//   - a change refused on its own bytes (over ChangeBytes, or
//     malformed), whose checksum is its hash, so that the hash names these
//     bytes and no others: no sender can make the hub remember a change it
//     would take;
//   - otherwise (the message was refused as a whole: over the
//     document's limit, an actor's sequence broken) the
//     set of its changes, as one hash over their sorted hashes: only a
//     message with exactly these changes is refused by it.
// Entries are bounded node-wide in count and bytes; past either bound the
// least recently used go. A forgotten change is only checked again.

// Defaults for NewRefusals' bounds.
const (
	DefaultRefusedChanges     = 10_000
	DefaultRefusedChangeBytes = 4 << 20
)

// refusalOverhead is what one entry costs beyond its document id and
// reason: the key's hash, the list element and the map's share.
const refusalOverhead = 160

// maxRefusalReason bounds the reason kept with an entry.
const maxRefusalReason = 240

// Refusals is a node's memory of refused changes. Safe for concurrent use.
type Refusals struct {
	maxEntries int
	maxBytes   int64

	mu      sync.Mutex // guards entries, order, perDoc and size
	entries map[refusalKey]*list.Element
	order   *list.List     // of *refusal, most recently used first
	perDoc  map[string]int // entries per document: a document with none costs no hashing
	size    int64

	guard, remembered map[error]prometheus.Counter // refusals by the guard and by the memory, by kind
	byGuard, byMemory atomic.Uint64                // the same, summed over kinds, for RefusalStats
}

type refusalKey struct {
	doc  string
	hash [32]byte
}

type refusal struct {
	key    refusalKey
	kind   error // ErrLimit or ErrRefused
	reason string
	set    bool // hash is of a message's set of changes
	size   int64
}

// NewRefusals returns a memory of at most maxEntries refused changes
// taking at most maxBytes, its metrics registered with reg if not nil.
func NewRefusals(maxEntries int, maxBytes int64, reg prometheus.Registerer) *Refusals {
	rf := &Refusals{
		maxEntries: maxEntries,
		maxBytes:   maxBytes,
		entries:    make(map[refusalKey]*list.Element),
		order:      list.New(),
		perDoc:     make(map[string]int),
	}
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tandem_sync_refused_total",
		Help: "Sync messages refused, by reason (document_limit: over a limit; sync_refused: what a stock client could not apply) and by what refused them: guard (checked and refused) or remembered (carrying a change refused before, known by its hash and not checked again).",
	}, []string{"reason", "by"})
	rf.guard = map[error]prometheus.Counter{
		ErrLimit: refused.WithLabelValues("document_limit", "guard"), ErrRefused: refused.WithLabelValues("sync_refused", "guard"),
	}
	rf.remembered = map[error]prometheus.Counter{
		ErrLimit: refused.WithLabelValues("document_limit", "remembered"), ErrRefused: refused.WithLabelValues("sync_refused", "remembered"),
	}
	count := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tandem_refused_changes_remembered",
		Help: "Refused changes (or sets of changes) remembered by hash, node-wide.",
	}, func() float64 { return float64(rf.Stats().Remembered) })
	size := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tandem_refused_changes_remembered_bytes",
		Help: "Bytes the remembered refused changes take, as counted against the hub's RefusedChangeBytes.",
	}, func() float64 { return float64(rf.Stats().Bytes) })
	if reg != nil {
		reg.MustRegister(refused, count, size)
	}
	return rf
}

// RefusalStats counts the refusals of sync messages since the memory
// was made, and what it remembers of them.
type RefusalStats struct {
	// ByGuard counts messages the guard checked and refused; ByMemory
	// those refused by a remembered hash, unchecked.
	ByGuard, ByMemory uint64
	// Remembered and Bytes are the entries held now and their size.
	Remembered int
	Bytes      int64
}

// Stats returns the refusal counts.
func (rf *Refusals) Stats() RefusalStats {
	s := RefusalStats{ByGuard: rf.byGuard.Load(), ByMemory: rf.byMemory.Load()}
	rf.mu.Lock()
	s.Remembered, s.Bytes = rf.order.Len(), rf.size
	rf.mu.Unlock()
	return s
}

// check refuses a message whose changes, or whose set of changes, were
// refused before in this document, with the same kind of error.
func (rf *Refusals) Check(documentID string, changes [][]byte) error {
	if len(changes) == 0 {
		return nil
	}
	rf.mu.Lock()
	none := rf.perDoc[documentID] == 0
	rf.mu.Unlock()
	if none {
		return nil
	}
	hashes := make([][32]byte, 0, len(changes))
	whole := true
	for _, b := range changes {
		h, ok := entryHash(b)
		if !ok {
			whole = false
			continue
		}
		hashes = append(hashes, h)
	}
	keys := hashes
	if whole {
		keys = append(keys, setHash(hashes))
	}
	rf.mu.Lock()
	defer rf.mu.Unlock()
	for _, h := range keys {
		el := rf.entries[refusalKey{documentID, h}]
		if el == nil {
			continue
		}
		rf.order.MoveToFront(el)
		e := el.Value.(*refusal)
		rf.remembered[e.kind].Inc()
		rf.byMemory.Add(1)
		if e.set {
			return fmt.Errorf("%w: the same changes were refused before: %s", e.kind, e.reason)
		}
		return fmt.Errorf("%w: change %x was refused before: %s", e.kind, h[:4], e.reason)
	}
	return nil
}

// refused counts a refusal by the guard and remembers what it refused.
// cause wraps ErrLimit or ErrRefused; lim are the limits it was checked
// against.
func (rf *Refusals) Refused(documentID string, changes [][]byte, cause error, lim Limits) {
	kind := ErrRefused
	if errors.Is(cause, ErrLimit) {
		kind = ErrLimit
	}
	rf.guard[kind].Inc()
	rf.byGuard.Add(1)
	if len(changes) == 0 {
		return // an unsafe bloom filter, say: nothing to know a retry by
	}
	reason := cause.Error()
	if len(reason) > maxRefusalReason {
		reason = reason[:maxRefusalReason] + "…"
	}
	var own, all [][32]byte
	whole := true
	for _, b := range changes {
		h, ok := entryHash(b)
		if !ok {
			whole = false
			continue
		}
		all = append(all, h)
		if _, err := lim.readChange(b, false); err != nil {
			own = append(own, h)
		}
	}
	set := false
	if len(own) == 0 {
		if !whole {
			return // a message that no hash names whole
		}
		own, set = [][32]byte{setHash(all)}, true
	}
	rf.mu.Lock()
	defer rf.mu.Unlock()
	for _, h := range own {
		rf.add(&refusal{key: refusalKey{documentID, h}, kind: kind, reason: reason, set: set})
	}
}

// add remembers e, making room for it. The caller holds rf.mu.
func (rf *Refusals) add(e *refusal) {
	if el := rf.entries[e.key]; el != nil {
		rf.order.MoveToFront(el)
		return
	}
	e.size = int64(len(e.key.doc)+len(e.reason)) + refusalOverhead
	if e.size > rf.maxBytes {
		return
	}
	for rf.order.Len() >= rf.maxEntries || rf.size+e.size > rf.maxBytes {
		rf.remove(rf.order.Back())
	}
	rf.entries[e.key] = rf.order.PushFront(e)
	rf.perDoc[e.key.doc]++
	rf.size += e.size
}

func (rf *Refusals) remove(el *list.Element) {
	e := rf.order.Remove(el).(*refusal)
	delete(rf.entries, e.key)
	if rf.perDoc[e.key.doc]--; rf.perDoc[e.key.doc] <= 0 {
		delete(rf.perDoc, e.key.doc)
	}
	rf.size -= e.size
}

// entryHash returns the hash of a sync message's change entry, if the entry
// is exactly one plain change chunk whose checksum is that hash: then the
// hash names these bytes and no others. A change's hash is SHA-256 over
// its chunk type, length and body (amcheck.Change.Hash).
func entryHash(b []byte) ([32]byte, bool) {
	if len(b) < 10 || !bytes.Equal(b[:4], []byte{0x85, 0x6f, 0x4a, 0x83}) || b[8] != 1 {
		return [32]byte{}, false
	}
	n, k := binary.Uvarint(b[9:])
	if k <= 0 || n != uint64(len(b)-9-k) {
		return [32]byte{}, false
	}
	h := sha256.Sum256(b[8:])
	if !bytes.Equal(h[:4], b[4:8]) {
		return [32]byte{}, false
	}
	return h, true
}

// setHash names a set of changes: SHA-256 over their sorted hashes.
func setHash(hashes [][32]byte) [32]byte {
	sorted := slices.Clone(hashes)
	slices.SortFunc(sorted, func(a, b [32]byte) int { return bytes.Compare(a[:], b[:]) })
	sorted = slices.Compact(sorted)
	d := sha256.New()
	d.Write([]byte("tandem refused set\x00"))
	for _, h := range sorted {
		d.Write(h[:])
	}
	var out [32]byte
	d.Sum(out[:0])
	return out
}
