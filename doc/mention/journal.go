package mention

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// The journal makes mentions as durable as the changes that insert them.
// Each room writes, per node, what it still owes: the bursts of edits not
// yet settled (their mentions counted so far, and for the one whose
// changes are not counted yet, the counts they started from) and the
// settled reports not yet handed over. It is written in the same store
// transaction as the changes (doc.Observer.Journal), so whatever moment a
// node is killed at, the store holds changes and journal that agree: the
// text minus the baseline is exactly what the pending author's stored
// changes inserted.
//
// A journal whose node is gone is taken over by whichever node loads the
// document or sweeps the store first (a node sweeps at start, every
// Config.Sweep, and when the bus tells it a node is gone): its reports
// become this node's, in the same transaction that deletes the dead
// node's journal. Reports keep their key, so a report handed over twice
// (taken over after it was handed over but before its journal said so)
// can be told apart by the receiver.

// journalData is a journal as stored (JSON).
type journalData struct {
	// Pending is the key of the burst whose changes are not counted yet;
	// Baseline the counts they started from.
	Pending  string         `json:"pending,omitempty"`
	Baseline map[string]int `json:"baseline,omitempty"`
	Bursts   []journalEntry `json:"bursts,omitempty"`
	Ready    []journalEntry `json:"ready,omitempty"`
}

type journalEntry struct {
	Key       string         `json:"key"`
	Peer      string         `json:"peer"`
	Actor     string         `json:"actor,omitempty"`
	ActorName string         `json:"actorName,omitempty"`
	Net       map[string]int `json:"net,omitempty"`   // bursts
	Users     []string       `json:"users,omitempty"` // ready reports
	Title     string         `json:"title,omitempty"`
}

// journal returns the room's journal; nil when it owes nothing. The
// caller holds r.mu.
func (r *room) journal() []byte {
	if len(r.bursts) == 0 && len(r.ready) == 0 {
		return nil
	}
	var j journalData
	for _, b := range r.bursts {
		j.Bursts = append(j.Bursts, journalEntry{Key: b.key, Peer: b.peer.ID(), Actor: b.actor, ActorName: b.name, Net: b.net})
		if r.pending != nil && b.peer == r.pending {
			j.Pending, j.Baseline = b.key, r.counts
		}
	}
	for _, m := range r.ready {
		j.Ready = append(j.Ready, journalEntry{Key: m.Key, Peer: m.PeerID, Actor: m.Actor, ActorName: m.ActorName, Users: m.Users, Title: m.Title})
	}
	data, err := json.Marshal(j)
	if err != nil {
		panic(err) // maps of strings and ints always marshal
	}
	return data
}

// Journal implements doc.Observer: if the journal changed, the journals
// a write must carry: this node's, empty when it owes nothing (deleted),
// and an empty one for each node whose journal was taken over.
func (r *room) Journal() map[string][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.dirty {
		return nil
	}
	node := r.t.cfg.NodeID
	w := map[string][]byte{node: r.journal()}
	if w[node] == nil {
		w[node] = []byte{}
	}
	for _, n := range r.drop {
		w[n] = []byte{}
	}
	r.drop, r.dirty = nil, false
	return w
}

// Wrote implements doc.Observer: a write that failed is written again.
func (r *room) Wrote(w map[string][]byte, ok bool) {
	if ok || w == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for n := range w {
		if n != r.t.cfg.NodeID {
			r.drop = append(r.drop, n)
		}
	}
	r.journalChanged()
}

// errGone tells a sweep that the room left memory before it took the
// journal over: the next sweep loads it again.
var errGone = errors.New("the room left memory")

// takeOver makes a dead node's journal of the document this room's: every
// report it owed, with the mentions its pending burst's stored changes
// inserted counted from the text as it is now (now, and title, read with
// the document held still). It reports how many reports it took.
func (r *room) takeOver(now map[string]int, title, node string, data []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gone {
		return 0, errGone
	}
	if r.takenBy[node] {
		return 0, nil
	}
	var j journalData
	if err := json.Unmarshal(data, &j); err != nil {
		return 0, fmt.Errorf("mention journal of node %s: %w", node, err)
	}
	r.takenBy[node] = true
	r.drop = append(r.drop, node)
	n := 0
	add := func(e journalEntry, users []string) {
		if len(users) == 0 {
			return
		}
		if e.Title == "" {
			e.Title = title
		}
		m := &Report{DocumentID: r.id, Key: e.Key, PeerID: e.Peer, Actor: e.Actor, ActorName: e.ActorName, Title: e.Title, Users: users}
		if m.Actor == "" {
			m.Actor = m.PeerID
		}
		r.ready = append(r.ready, m)
		n++
	}
	for _, e := range j.Ready {
		add(e, e.Users)
	}
	for _, e := range j.Bursts {
		net := e.Net
		if e.Key == j.Pending {
			net = make(map[string]int, len(e.Net)+len(now))
			for u, c := range e.Net {
				net[u] = c
			}
			for u, c := range now {
				net[u] += c - j.Baseline[u]
			}
			for u, c := range j.Baseline {
				if _, still := now[u]; !still {
					net[u] -= c
				}
			}
		}
		var users []string
		for u, c := range net {
			for ; c > 0; c-- {
				users = append(users, u)
			}
		}
		add(e, users)
	}
	r.journalChanged()
	return n, nil
}

// nodeAlive asks Config.NodeAlive; when it cannot tell, the node counts
// as alive, and the next sweep asks again.
func (t *Tracker) nodeAlive(ctx context.Context, node string) bool {
	if t.cfg.NodeAlive == nil {
		return false
	}
	alive, err := t.cfg.NodeAlive(ctx, node)
	if err != nil {
		t.log.Warn("cannot tell whether a node is alive; its mention journals wait", "node", node, "err", err)
		return true
	}
	return alive
}

// SweepJournals takes over every stored journal whose node is gone,
// loading its document if it is not in memory, and hands the reports
// over.
func (t *Tracker) SweepJournals(ctx context.Context) error {
	all, err := t.cfg.Journals.Journals(ctx)
	if err != nil {
		return fmt.Errorf("list mention journals: %w", err)
	}
	alive := map[string]bool{t.cfg.NodeID: true}
	for _, j := range all {
		ok, asked := alive[j.Node]
		if !asked {
			ok = t.nodeAlive(ctx, j.Node)
			alive[j.Node] = ok
		}
		if ok {
			continue
		}
		obs, err := t.cfg.Documents.Observer(ctx, j.DocumentID)
		if err != nil {
			return err
		}
		r, mine := obs.(*room)
		if !mine || r.t != t {
			return fmt.Errorf("document %s is not observed by this tracker", j.DocumentID)
		}
		var n int
		r.doc.Hold(func() {
			now, title := countMentions(r.text.mentionText()), r.text.title()
			n, err = r.takeOver(now, title, j.Node, j.Data)
		})
		if errors.Is(err, errGone) {
			continue // the next sweep loads it again
		}
		if err != nil {
			t.log.Error("taking over a mention journal", "document", j.DocumentID, "node", j.Node, "err", err)
			continue
		}
		t.taken.Add(float64(n))
		r.handOver(true)
	}
	return nil
}

// NodeGone tells the tracker that a node of the cluster is gone: its
// journals are swept now rather than at the next Config.Sweep.
func (t *Tracker) NodeGone(string) {
	select {
	case t.sweepNow <- struct{}{}:
	default: // a sweep is due already
	}
}

// sweepLoop sweeps the journals at start, every Config.Sweep and on
// NodeGone, until ctx ends.
func (t *Tracker) sweepLoop(ctx context.Context) {
	tick := time.NewTicker(t.cfg.Sweep)
	defer tick.Stop()
	for {
		if err := t.SweepJournals(ctx); err != nil && ctx.Err() == nil {
			t.log.Warn("sweeping mention journals", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-t.sweepNow:
		}
	}
}
