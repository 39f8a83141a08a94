package awareness

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"
)

// HistoryStore keeps presence history: each stretch of time a user was
// present in a document (online or away) and each stretch of a user's
// status, as intervals. The history subpackage has the stores.
//
// Intervals are written by one recorder per hub run, named by Run (random
// per process) and Seq (counting up within the run): a run opens an
// interval, and later closes it, by those two numbers. Doc "" names a
// user's status interval, any other a presence in that document.
type HistoryStore interface {
	// WriteHistory stores a batch: the intervals opened (To zero: still
	// open) and the ends of intervals opened in an earlier batch. A batch
	// is written whole or not at all, and writing it again changes
	// nothing (a write that failed may have been stored): an interval
	// still open is not opened twice, an end applies to an open interval
	// only. An interval stored ended may be stored again, the same. A
	// batch refused for data the store cannot hold (a NUL in a user id)
	// fails with ErrUnstorable.
	WriteHistory(ctx context.Context, opened []HistoryInterval, closed []HistoryEnd) error
	// BeatHistory records that run, of node, was alive at at.
	BeatHistory(ctx context.Context, run int64, node string, at time.Time) error
	// CloseDeadRuns ends the open intervals of every run but keep whose
	// last beat is before staleBefore, at that beat, and returns how many
	// it ended; node "" means any node's runs, else only that node's. Any
	// node may call it, any number of times: an interval is ended once.
	CloseDeadRuns(ctx context.Context, node string, staleBefore time.Time, keep int64) (int64, error)
	// PruneHistory deletes up to limit intervals that ended before
	// before, and returns how many it deleted.
	PruneHistory(ctx context.Context, before time.Time, limit int) (int64, error)
}

// HistoryInterval is one stored interval.
type HistoryInterval struct {
	Run, Seq int64
	Doc      string // "" for a user's status interval
	User     string
	Name     string // the user's name when it began, if known
	Status   Status // online or away
	From     time.Time
	To       time.Time // zero while open
}

// HistoryEnd ends an interval written open.
type HistoryEnd struct {
	Run, Seq int64
	Doc      string // as it was opened: "" for a status interval
	To       time.Time
}

// MaxHistorySpan is the longest a stored interval lasts: a presence that
// goes on longer is stored as intervals that touch, each at most this
// long, so that a query for a window reads only the intervals that began
// at most this long before it (an index on the start answers it).
const MaxHistorySpan = time.Hour

// The recorder: presence history off the presence path.
//
// The hub marks a user whose presence may have changed here (histMark,
// under its lock: a map write); the recorder's goroutine reads the marked
// users' presence every historyEvery, compares it with the intervals it
// holds open, and writes what opened and ended in batches. So one change
// costs the hub a map write, and a thousand users leaving at once one
// batch. Each interval begins or ends at the moment its user was last
// marked before the read: within historyEvery of the change while the
// store keeps up.
//
// Only this node's connections are recorded here; each node records its
// own, and the stores' readers merge them (several tabs, a move between
// nodes). A run that dies leaves its intervals open: any node ends them at
// the run's last beat once it is stale (CloseDeadRuns), at once when the
// cluster sees the node go (NodeGone), and every historySweep anyway. A
// run whose beats failed for so long that others may have taken it for
// dead continues its open intervals from its last beat (resume).

const (
	historyEvery = 500 * time.Millisecond
	// historyBeat is how often a run records that it is alive (and before
	// every write); a run whose beat is historyStale old is dead. Nodes'
	// clocks must agree well within historyStale.
	historyBeat  = 2 * time.Second
	historyStale = 5 * historyBeat
	// historySweep is how often the recorder ends dead runs' intervals
	// and deletes those past the retention, at most historyPruneBatches
	// batches of historyPruneBatch a sweep.
	historySweep        = 30 * time.Second
	historyPruneBatch   = 1000
	historyPruneBatches = 10
	// historyChunk bounds the intervals and ends one write holds.
	historyChunk = 4096
	// maxPendingHistory bounds the intervals waiting for a store that
	// fails; past it new ones are dropped (counted), and so are their
	// ends. Ends of intervals written are kept: there are never more of
	// them than intervals open.
	maxPendingHistory = 1 << 17
	// maxHistoryName and maxHistoryUser bound what an interval keeps of a
	// name and a user id (a peer's presence may hold more).
	maxHistoryName = 128
	maxHistoryUser = 256
)

// historyRecorder holds this run's open intervals. Its fields past gone
// belong to its goroutine.
type historyRecorder struct {
	store     HistoryStore
	node      string
	run       int64
	retention time.Duration
	log       *slog.Logger
	metrics   *metrics

	// dirty (guarded by the hub's lock) holds the users marked since the
	// last read, with when they were last marked.
	dirty map[string]time.Time
	// gone (guarded by the hub's lock) holds the nodes the cluster saw
	// go since the last read.
	gone []string

	seq      int64
	lastBeat time.Time                           // the last beat stored; zero before the first
	open     map[string]map[string]*openInterval // user → doc ("" for the status) → open
	opened   []HistoryInterval                   // waiting to be written
	closed   []HistoryEnd
	// pending indexes opened by seq, so an end that comes before its
	// interval was written closes it in place.
	pending map[int64]int
}

type openInterval struct {
	seq     int64
	status  Status
	name    string
	from    time.Time
	dropped bool // never queued (maxPendingHistory): nothing to end
}

// historyView is a user's presence here at a moment: its status in each
// document it is present in, and overall.
type historyView struct {
	at     time.Time
	status Status
	docs   map[string]Status
	name   string
}

func newHistoryRecorder(cfg Config, m *metrics) *historyRecorder {
	var b [8]byte
	rand.Read(b[:])
	run := int64(binary.BigEndian.Uint64(b[:]) >> 1)
	return &historyRecorder{
		store: cfg.History, node: cfg.HistoryNode, run: run, retention: cfg.HistoryRetention,
		log: cfg.Logger, metrics: m,
		dirty: make(map[string]time.Time), open: make(map[string]map[string]*openInterval),
		pending: make(map[int64]int),
	}
}

// histMark notes, under the hub's lock, that user's presence here may
// have changed.
func (h *Hub) histMark(user string) {
	if h.hist != nil {
		h.hist.dirty[user] = h.cfg.Now()
	}
}

// historyViewOf reads a user's presence here; the caller holds h.mu.
func (h *Hub) historyViewOf(user string, at time.Time) historyView {
	v := historyView{at: at, status: StatusOffline}
	u := h.users[user]
	if u == nil {
		return v
	}
	v.status = u.local
	for _, pi := range u.peers.All() {
		if pi.conn == nil || pi.status == StatusOffline {
			continue
		}
		for id := range pi.docs.Keys() {
			r := h.rooms[id]
			if r == nil || !r.present[pi.id] {
				continue
			}
			if v.docs == nil {
				v.docs = make(map[string]Status)
			}
			if pi.status.rank() > v.docs[id].rank() {
				v.docs[id] = pi.status
			}
			if v.name == "" {
				v.name = nameOf(r, pi)
			}
		}
	}
	return v
}

// nameOf is the name a peer's user channel gives in a room, if any.
func nameOf(r *room, pi *peerInfo) string {
	if pi.identity != nil && pi.identity.Name != "" {
		return pi.identity.Name
	}
	p := r.state[pi.id]
	if p == nil {
		return ""
	}
	if raw, ok := p.Get(ChannelUser); ok {
		return userNameFrom(raw)
	}
	return ""
}

// clip cuts s to at most n bytes, at a character's start.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return strings.Clone(s[:n])
}

// runHistory records until ctx ends, then ends every interval it holds
// open and writes them (for up to five seconds, and never past the
// deadline Close was given).
func (h *Hub) runHistory(ctx context.Context) {
	rec := h.hist
	tick := time.NewTicker(historyEvery)
	defer tick.Stop()
	var lastSweep time.Time
	if h.cfg.Replicator == nil {
		// Alone on its store: every other run is dead (a SIGKILL before
		// this start), whatever its last beat.
		rec.closeDead(ctx, "", h.cfg.Now())
	}
	for {
		select {
		case <-ctx.Done():
			wait := 5 * time.Second
			if by := h.closeBy.Load(); by != 0 {
				wait = min(wait, max(time.Until(time.Unix(0, by))-100*time.Millisecond, 0))
			}
			fctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			h.readHistory()
			now := h.cfg.Now()
			rec.endAll(now)
			rec.flush(fctx, now)
			return
		case <-tick.C:
		}
		gone := h.readHistory()
		now := h.cfg.Now()
		if now.Sub(rec.lastBeat) >= historyBeat {
			rec.roll(now)
			rec.beat(ctx, now)
		}
		rec.flush(ctx, now)
		for _, node := range gone {
			rec.closeDead(ctx, node, now.Add(-2*historyBeat))
		}
		if now.Sub(lastSweep) >= historySweep {
			lastSweep = now
			rec.closeDead(ctx, "", now.Add(-historyStale))
			rec.prune(ctx, now)
		}
	}
}

// readHistory takes the marked users' presence under the hub's lock and
// turns what changed into intervals; it returns the nodes seen going.
func (h *Hub) readHistory() (gone []string) {
	rec := h.hist
	h.mu.Lock()
	dirty := rec.dirty
	if len(dirty) > 0 {
		rec.dirty = make(map[string]time.Time, len(dirty))
	}
	views := make(map[string]historyView, len(dirty))
	for user, at := range dirty {
		views[user] = h.historyViewOf(user, at)
	}
	gone, rec.gone = rec.gone, nil
	h.mu.Unlock()
	for user, v := range views {
		rec.apply(user, v)
	}
	return gone
}

// apply ends the user's intervals that v no longer has, or has with
// another status, and opens the new ones.
func (rec *historyRecorder) apply(user string, v historyView) {
	open := rec.open[user]
	for doc, iv := range open {
		s := v.status
		if doc != "" {
			s = v.docs[doc]
		}
		if s != iv.status {
			rec.end(doc, iv, v.at)
			delete(open, doc)
		}
	}
	want := func(doc string, s Status) {
		if s == StatusOffline || s == "" {
			return
		}
		if _, ok := open[doc]; ok {
			return
		}
		if open == nil {
			open = make(map[string]*openInterval)
			rec.open[user] = open
		}
		open[doc] = rec.begin(doc, user, v.name, s, v.at)
	}
	want("", v.status)
	for doc, s := range v.docs {
		want(doc, s)
	}
	if len(open) == 0 {
		delete(rec.open, user)
	}
}

func (rec *historyRecorder) begin(doc, user, name string, s Status, at time.Time) *openInterval {
	rec.seq++
	iv := &openInterval{seq: rec.seq, status: s, name: clip(name, maxHistoryName), from: at}
	if len(rec.opened) >= maxPendingHistory {
		rec.metrics.historyLost.Inc()
		iv.dropped = true
		return iv
	}
	rec.pending[iv.seq] = len(rec.opened)
	rec.opened = append(rec.opened, HistoryInterval{
		Run: rec.run, Seq: iv.seq, Doc: doc, User: clip(user, maxHistoryUser), Name: iv.name, Status: s, From: at,
	})
	return iv
}

func (rec *historyRecorder) end(doc string, iv *openInterval, at time.Time) {
	if iv.dropped {
		return
	}
	if at.Before(iv.from) {
		at = iv.from
	}
	if i, ok := rec.pending[iv.seq]; ok {
		rec.opened[i].To = at // not written yet: written ended
		delete(rec.pending, iv.seq)
		return
	}
	rec.closed = append(rec.closed, HistoryEnd{Run: rec.run, Seq: iv.seq, Doc: doc, To: at})
}

// roll ends the intervals open for nearly MaxHistorySpan and opens their
// continuation at the same moment.
func (rec *historyRecorder) roll(now time.Time) {
	for user, open := range rec.open {
		for doc, iv := range open {
			if now.Sub(iv.from) < MaxHistorySpan-time.Minute {
				continue
			}
			rec.end(doc, iv, now)
			open[doc] = rec.begin(doc, user, iv.name, iv.status, now)
		}
	}
}

// resume continues every open interval from at: after beats failed for
// so long that another node may have ended them at the last beat stored,
// at, which the continuation touches. An interval nobody ended is ended
// there by the recorder itself.
func (rec *historyRecorder) resume(at, now time.Time) {
	from := at
	if earliest := now.Add(-(MaxHistorySpan - time.Minute)); from.Before(earliest) {
		from = earliest // no stored interval may outlast MaxHistorySpan
	}
	for user, open := range rec.open {
		for doc, iv := range open {
			if _, waiting := rec.pending[iv.seq]; waiting || iv.dropped {
				continue // not stored: no one could have ended it
			}
			at := from
			if at.Before(iv.from) {
				at = iv.from
			}
			rec.end(doc, iv, at)
			open[doc] = rec.begin(doc, user, iv.name, iv.status, at)
		}
	}
}

// endAll ends every open interval at now (a clean stop).
func (rec *historyRecorder) endAll(now time.Time) {
	for user, open := range rec.open {
		for doc, iv := range open {
			rec.end(doc, iv, now)
		}
		delete(rec.open, user)
	}
}

// flush writes what waits, historyChunk at a time; what a failed write
// held stays for the next flush.
func (rec *historyRecorder) flush(ctx context.Context, now time.Time) {
	for len(rec.opened) > 0 || len(rec.closed) > 0 {
		if rec.lastBeat.Before(now) {
			// A beat first, at now, which is after every waiting
			// interval began: from the moment they are stored, the
			// run's last beat is past their start, so if the run dies
			// they end after they began (CloseDeadRuns ends them at the
			// beat). Stored before the beat, a death between the two
			// would end them where they began: no presence, to readers.
			if rec.beat(ctx, now); rec.lastBeat.Before(now) {
				return
			}
		}
		n, m := min(len(rec.opened), historyChunk), min(len(rec.closed), historyChunk)
		err := rec.write(ctx, rec.opened[:n], rec.closed[:m])
		if errors.Is(err, ErrUnstorable) {
			// A row the store cannot hold: it must not keep the
			// others out for ever.
			var k, j int
			k, j, err = rec.isolate(ctx, n, m)
			rec.written(k, j)
			n, m = 0, 0
		}
		if err != nil {
			rec.metrics.historyWrites.WithLabelValues("failed").Inc()
			rec.log.Error("presence: store history", "opened", len(rec.opened), "ended", len(rec.closed), "err", err)
			return
		}
		rec.metrics.historyWrites.WithLabelValues("ok").Inc()
		rec.written(n, m)
	}
}

// write makes one WriteHistory call, for up to five seconds.
func (rec *historyRecorder) write(ctx context.Context, opened []HistoryInterval, closed []HistoryEnd) error {
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return rec.store.WriteHistory(wctx, opened, closed)
}

// isolate writes the first n intervals one at a time, after a batch that
// held them failed for data the store cannot hold (ErrUnstorable): an
// interval the store refuses so is dropped, counted and logged, and the
// others are written. The first m ends follow in one write (they hold
// numbers only; refused, they are dropped too). It returns how many
// intervals and ends are done with, and the error of a write that failed
// otherwise: what it did not reach waits for the next flush.
func (rec *historyRecorder) isolate(ctx context.Context, n, m int) (int, int, error) {
	for i := range n {
		err := rec.write(ctx, rec.opened[i:i+1], nil)
		if errors.Is(err, ErrUnstorable) {
			iv := rec.opened[i]
			rec.metrics.storeRefused.WithLabelValues("history").Inc()
			rec.log.Error("presence: the store refused a history interval, dropped", "user", iv.User, "doc", iv.Doc, "err", err)
		} else if err != nil {
			return i, 0, err
		}
	}
	err := rec.write(ctx, nil, rec.closed[:m])
	if errors.Is(err, ErrUnstorable) {
		rec.metrics.storeRefused.WithLabelValues("history").Add(float64(m))
		rec.log.Error("presence: the store refused the ends of history intervals, dropped", "ended", m, "err", err)
	} else if err != nil {
		return n, 0, err
	}
	return n, m, nil
}

// written drops the first n intervals and m ends, which the store has.
func (rec *historyRecorder) written(n, m int) {
	for seq, i := range rec.pending {
		if i < n {
			delete(rec.pending, seq)
		} else {
			rec.pending[seq] = i - n
		}
	}
	k := copy(rec.opened, rec.opened[n:])
	clear(rec.opened[k:]) // the strings of what was written go
	rec.opened = rec.opened[:k]
	k = copy(rec.closed, rec.closed[m:])
	rec.closed = rec.closed[:k]
}

func (rec *historyRecorder) beat(ctx context.Context, now time.Time) {
	bctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := rec.store.BeatHistory(bctx, rec.run, rec.node, now); err != nil {
		rec.log.Error("presence: history beat", "err", err)
		return
	}
	if !rec.lastBeat.IsZero() && now.Sub(rec.lastBeat) >= historyStale {
		rec.resume(rec.lastBeat, now)
	}
	rec.lastBeat = now
}

// closeDead ends the open intervals of node's dead runs (any node's, for
// "") whose last beat is before staleBefore; never this run's.
func (rec *historyRecorder) closeDead(ctx context.Context, node string, staleBefore time.Time) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := rec.store.CloseDeadRuns(cctx, node, staleBefore, rec.run)
	if err != nil {
		rec.log.Error("presence: end dead runs' history", "node", node, "err", err)
		return
	}
	if n > 0 {
		rec.log.Info("presence: ended the history of dead runs", "node", node, "intervals", n)
	}
}

// prune deletes intervals past the retention, up to historyPruneBatches
// batches: a backlog goes over several sweeps, and the recorder keeps
// beating meanwhile.
func (rec *historyRecorder) prune(ctx context.Context, now time.Time) {
	if rec.retention <= 0 {
		return
	}
	before := now.Add(-rec.retention)
	for range historyPruneBatches {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		n, err := rec.store.PruneHistory(pctx, before, historyPruneBatch)
		cancel()
		if err != nil {
			rec.log.Error("presence: prune history", "err", err)
			return
		}
		rec.metrics.historyPruned.Add(float64(n))
		if n < historyPruneBatch {
			return
		}
	}
}
