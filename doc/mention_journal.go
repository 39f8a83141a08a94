package doc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// The mention journal makes mentions as durable as the changes that
// insert them. Each room writes, per node, what its tracker still owes:
// the bursts of edits not yet settled (their mentions counted so far, and
// for the one whose changes are not counted yet, the counts they started
// from) and the settled reports not yet handed over. It is written in the
// same store transaction as the changes, so whatever moment a node is
// killed at, the store holds changes and journal that agree: the text
// minus the baseline is exactly what the pending author's stored changes
// inserted.
//
// A journal whose node is gone is taken over by whichever node loads the
// document or sweeps the store first (a node sweeps at start, every
// JournalSweep, and when the bus tells it a node is gone): its reports
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

// journal returns the tracker's journal; nil when it owes nothing.
func (t *mentionTracker) journal() []byte {
	if len(t.bursts) == 0 && len(t.ready) == 0 {
		return nil
	}
	var j journalData
	for _, b := range t.bursts {
		j.Bursts = append(j.Bursts, journalEntry{Key: b.key, Peer: b.peer.ID(), Actor: b.actor, ActorName: b.name, Net: b.net})
		if t.pending != nil && b.peer == t.pending {
			j.Pending, j.Baseline = b.key, t.counts
		}
	}
	for _, m := range t.ready {
		j.Ready = append(j.Ready, journalEntry{Key: m.Key, Peer: m.PeerID, Actor: m.Actor, ActorName: m.ActorName, Users: m.Users, Title: m.Title})
	}
	data, err := json.Marshal(j)
	if err != nil {
		panic(err) // maps of strings and ints always marshal
	}
	return data
}

// takeWrite returns the journals a write must carry, if the journal
// changed: this node's, empty when it owes nothing (deleted), and an empty
// one for each node whose journal was taken over. Called with r.mu held.
func (t *mentionTracker) takeWrite(node string) map[string][]byte {
	if !t.dirty {
		return nil
	}
	w := map[string][]byte{node: t.journal()}
	if w[node] == nil {
		w[node] = []byte{}
	}
	for _, n := range t.drop {
		w[n] = []byte{}
	}
	t.drop, t.dirty = nil, false
	return w
}

// unwritten records that a write carrying w failed: it is written again.
func (t *mentionTracker) unwritten(node string, w map[string][]byte) {
	if w == nil {
		return
	}
	for n := range w {
		if n != node {
			t.drop = append(t.drop, n)
		}
	}
	t.journalChanged()
}

// takeOver makes a dead node's journal of the document this room's: every
// report it owed, with the mentions its pending burst's stored changes
// inserted counted from the text as it is now (now, and title, read by
// readMentions). It reports how many reports it took. Called with r.mu
// held.
func (t *mentionTracker) takeOver(now map[string]int, title, docID, node string, data []byte) (int, error) {
	if t.takenBy[node] {
		return 0, nil
	}
	var j journalData
	if err := json.Unmarshal(data, &j); err != nil {
		return 0, fmt.Errorf("mention journal of node %s: %w", node, err)
	}
	t.takenBy[node] = true
	t.drop = append(t.drop, node)
	t.journalChanged()
	n := 0
	add := func(e journalEntry, users []string) {
		if len(users) == 0 {
			return
		}
		if e.Title == "" {
			e.Title = title
		}
		m := &Mention{DocumentID: docID, Key: e.Key, PeerID: e.Peer, Actor: e.Actor, ActorName: e.ActorName, Title: e.Title, Users: users}
		if m.Actor == "" {
			m.Actor = m.PeerID
		}
		t.ready = append(t.ready, m)
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
	return n, nil
}

// takeOverAtLoad takes over the journals stored with a document just
// loaded whose nodes are gone; this node's own is one of them (a room is
// loaded once, so its journal is of an earlier run under the same node
// id). Called before the room is shared, so the room is not queued for a
// write yet: acquire does that once it is loaded.
func (h *Hub) takeOverAtLoad(ctx context.Context, r *room, journals map[string][]byte) {
	mark := r.mentions.mark
	r.mentions.mark = func() {}
	defer func() { r.mentions.mark = mark }()
	var now map[string]int
	var title string
	for node, data := range journals {
		if node != h.cfg.NodeID && h.nodeAlive(ctx, node) {
			continue // its node reports it
		}
		if now == nil {
			now, title = countMentions(r.text.mentionText()), r.text.title()
		}
		n, err := r.mentions.takeOver(now, title, r.id, node, data)
		if err != nil {
			h.log.Error("taking over a mention journal", "document", r.id, "node", node, "err", err)
			continue
		}
		h.mentionsTaken.Add(float64(n))
	}
}

// nodeAlive asks Config.NodeAlive; when it cannot tell, the node counts
// as alive, and the next sweep asks again.
func (h *Hub) nodeAlive(ctx context.Context, node string) bool {
	if h.cfg.NodeAlive == nil {
		return false
	}
	alive, err := h.cfg.NodeAlive(ctx, node)
	if err != nil {
		h.log.Warn("cannot tell whether a node is alive; its mention journals wait", "node", node, "err", err)
		return true
	}
	return alive
}

// SweepJournals takes over every stored mention journal whose node is
// gone, loading its document if it is not in memory, and hands the
// reports over.
func (h *Hub) SweepJournals(ctx context.Context) error {
	all, err := h.cfg.Store.Journals(ctx)
	if err != nil {
		return fmt.Errorf("list mention journals: %w", err)
	}
	alive := map[string]bool{h.cfg.NodeID: true}
	for _, j := range all {
		ok, asked := alive[j.Node]
		if !asked {
			ok = h.nodeAlive(ctx, j.Node)
			alive[j.Node] = ok
		}
		if ok {
			continue
		}
		r, err := h.acquire(ctx, j.DocumentID)
		if err != nil {
			return err
		}
		r.applyMu.Lock()
		now, title := r.readMentions(h, func(*mentionTracker) bool { return true }, true)
		r.mu.Lock()
		n, err := 0, errEvicted
		if !r.evicted {
			n, err = r.mentions.takeOver(now, title, r.id, j.Node, j.Data)
		}
		r.mu.Unlock()
		r.applyMu.Unlock()
		if errors.Is(err, errEvicted) {
			continue // the next sweep loads it again
		}
		if err != nil {
			h.log.Error("taking over a mention journal", "document", j.DocumentID, "node", j.Node, "err", err)
			continue
		}
		h.mentionsTaken.Add(float64(n))
		h.handOver(r, true)
	}
	return nil
}

// NodeGone tells the hub that a node of the cluster is gone: its mention
// journals are swept now rather than at the next JournalSweep.
func (h *Hub) NodeGone(string) {
	select {
	case h.sweepNow <- struct{}{}:
	default: // a sweep is due already
	}
}

// sweepLoop sweeps the journals at start, every JournalSweep and on
// NodeGone, until ctx ends.
func (h *Hub) sweepLoop(ctx context.Context) {
	t := time.NewTicker(h.cfg.JournalSweep)
	defer t.Stop()
	for {
		if err := h.SweepJournals(ctx); err != nil && ctx.Err() == nil {
			h.log.Warn("sweeping mention journals", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-h.sweepNow:
		}
	}
}
