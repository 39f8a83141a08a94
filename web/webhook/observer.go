package webhook

import (
	"context"
	"iter"
	"slices"
	"time"

	"github.com/tandemhq/tandem/awareness"
	"github.com/tandemhq/tandem/doc"
	"github.com/tandemhq/tandem/doc/amcheck"
)

// Observe makes the observer of one room (doc.Config.Observe): it follows
// the document's heads from the changes the room's log takes, and notes
// each change of a local peer with the user behind it. It journals
// nothing and never keeps a room in memory.
func (h *Hooks) Observe(r doc.Room) doc.Observer { return &roomObserver{h: h, room: r} }

type roomObserver struct {
	h    *Hooks
	room doc.Room

	// Owned by Applied, which the room calls under its apply lock.
	heads     [][32]byte
	seen      bool      // the log took a change
	lastLocal time.Time // when a local peer's change was last noted
}

var _ doc.Observer = (*roomObserver)(nil)

func (o *roomObserver) Applying(doc.Peer) {}

func (o *roomObserver) Applied(by doc.Peer, changes iter.Seq[*amcheck.Change], elsewhere bool) {
	fresh := !o.seen
	for c := range changes {
		o.seen = true
		o.heads = slices.DeleteFunc(o.heads, func(h [32]byte) bool { return slices.Contains(c.Deps, h) })
		o.heads = append(o.heads, c.Hash)
	}
	if elsewhere {
		// The store's or another node's: their node tells them. While
		// this node's window may be open, the heads they make name it.
		if !o.lastLocal.IsZero() && o.h.cfg.Now().Sub(o.lastLocal) <= o.h.cfg.MaxWait {
			o.h.noteHeads(o.room.DocumentID(), o.heads)
		}
		return
	}
	o.lastLocal = o.h.cfg.Now()
	// A local peer's; by is nil for one that left before its change,
	// which waited for another, applied: its user is not known.
	user := ""
	var author interface{ ID() string }
	if by != nil {
		author = by
		if id, ok := by.(awareness.Identified); ok {
			user = id.Identity().UserID
		}
	}
	// A document is created where its first changes come from a peer:
	// the room had none, from the store or another node.
	o.h.noteChange(o.room.DocumentID(), user, author, o.heads, fresh)
}

func (o *roomObserver) Left(doc.Peer)                             {}
func (o *roomObserver) Loaded(context.Context, map[string][]byte) {}
func (o *roomObserver) Journal() map[string][]byte                { return nil }
func (o *roomObserver) Wrote(map[string][]byte, bool)             {}
func (o *roomObserver) Busy() bool                                { return false }
