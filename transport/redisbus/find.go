package redisbus

import (
	"fmt"
	"time"
)

// Finding a document across the cluster (doc.Finder). A node that lacks a
// requested document, once its grace window has passed, asks every node
// at once on the nodes channel ("ask", with a question number). Each node
// answers in the asker's inbox channel ("answer"): found once it holds
// the document and has written it to the shared store, not found when it
// does not hold it. The first "found" ends the question; so does the last
// "not found" of the nodes alive when it was asked, or AskTimeout. A node
// that stops (bye, or silent past its TTL) counts as not found.

// pendingAsk is a question of this node waiting for answers.
type pendingAsk struct {
	doc     string
	waiting map[string]bool // nodes yet to answer
	done    func(found bool)
	timer   *time.Timer
}

// FindDocument implements doc.Finder.
func (b *Bus) FindDocument(documentID string, done func(found bool)) {
	b.mu.Lock()
	waiting := make(map[string]bool, len(b.nodes))
	for n := range b.nodes {
		waiting[n] = true
	}
	b.mu.Unlock()
	if len(waiting) == 0 {
		done(false)
		return
	}
	b.amu.Lock()
	b.askSeq++
	id := b.askSeq
	p := &pendingAsk{doc: documentID, waiting: waiting, done: done}
	b.asks[id] = p
	p.timer = time.AfterFunc(b.cfg.AskTimeout, func() { b.endAsk(id, false) })
	b.amu.Unlock()
	payload, err := b.encode(busMsg{Kind: kindAsk, Doc: documentID, Ask: id})
	if err != nil {
		b.endAsk(id, false)
		return
	}
	b.toNodes(payload)
}

// answer answers another node's question, when this node knows; once,
// though on a Redis Cluster it comes on every shard.
func (b *Bus) answer(m busMsg) {
	if m.Doc == "" || m.Ask == 0 {
		return
	}
	key := fmt.Sprint(m.Node, "/", m.Run, "/", m.Ask)
	b.mu.Lock()
	_, seen := b.asked[key]
	b.asked[key] = time.Now()
	b.mu.Unlock()
	if seen {
		return
	}
	b.docs.Holds(m.Doc, func(held bool) {
		payload, err := b.encode(busMsg{Kind: kindAnswer, Doc: m.Doc, Ask: m.Ask, Found: held})
		if err == nil {
			for _, ch := range b.sub.onEvery(inboxChannel(m.Node)) {
				b.enqueue(busOut{channel: ch, payload: payload})
			}
		}
	})
}

// answered records node's answer to question id about the document doc.
// An answer about another document is to an earlier run of this node
// (question numbers start afresh at random): it is ignored.
func (b *Bus) answered(node string, id uint64, doc string, found bool) {
	b.amu.Lock()
	p := b.asks[id]
	if p == nil || p.doc != doc {
		b.amu.Unlock()
		return
	}
	delete(p.waiting, node)
	last := len(p.waiting) == 0
	b.amu.Unlock()
	if found || last {
		b.endAsk(id, found)
	}
}

// endAsk ends question id, once, telling its asker found.
func (b *Bus) endAsk(id uint64, found bool) {
	b.amu.Lock()
	p := b.asks[id]
	delete(b.asks, id)
	b.amu.Unlock()
	if p == nil {
		return
	}
	p.timer.Stop()
	p.done(found)
}

// nodeGone removes a stopped node's peers, and its part in this node's
// questions.
func (b *Bus) nodeGone(node string) {
	b.presence.NodeGone(node)
	if w, ok := b.docs.(NodeWatcher); ok {
		w.NodeGone(node)
	}
	var ended []uint64
	b.amu.Lock()
	for id, p := range b.asks {
		if p.waiting[node] {
			delete(p.waiting, node)
			if len(p.waiting) == 0 {
				ended = append(ended, id)
			}
		}
	}
	b.amu.Unlock()
	for _, id := range ended {
		b.endAsk(id, false)
	}
}
