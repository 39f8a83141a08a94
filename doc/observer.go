package doc

import (
	"context"
	"iter"

	"github.com/tandemhq/tandem/doc/amcheck"
	"github.com/tandemhq/tandem/doc/guard"
)

// Observer follows one room's document as it changes, for a layer that
// reads what the changes do (package doc/mention: who mentioned whom).
// Config.Observe makes one for each room as the room is made; the room
// calls it at the points where it changes, in the order the changes
// happen. No method may call back into the hub or the room, except
// Room.Write.
//
// A room has two locks, taken in this order: its apply lock, held by
// whoever changes the document, and its main lock (the log, the members
// and their sync states), which every acknowledgement and fan-out takes
// too. A method called under the main lock must be quick and must not
// block. Applying and Applied are called under the apply lock alone, so
// that what they take (reading a large text, say) holds up the next
// change to the document, not the acknowledgements and fan-outs of the
// others; Loaded is part of the load, which those who want the document
// wait for.
type Observer interface {
	// Applying is called before changes apply, under the room's apply
	// lock and not its main lock: p's (a local peer's), or, for p nil,
	// changes from the store or another node. Until Applied, nothing else
	// changes the document.
	Applying(p Peer)
	// Applied is called, under the room's apply lock and not its main
	// lock (or while a loading room is not shared yet), after the log
	// took changes, with them, in its order, once for each run of one
	// author's: by is the local peer
	// that sent them, and elsewhere says that they came from the store or
	// another node (by nil). A peer's message may release changes another
	// peer sent before what they depend on, and so may stored changes:
	// those are their sender's (by nil, elsewhere false, if it has left).
	// The changes may be read only during the call.
	Applied(by Peer, changes iter.Seq[*amcheck.Change], elsewhere bool)
	// Left is called, under the room's main lock, when p leaves the room.
	Left(p Peer)
	// Loaded is called once the room loaded its document from the store,
	// before the room is shared, with the journals stored with the
	// document by node (store.Stored.Journals). It may ask for a write
	// (Room.Write).
	Loaded(ctx context.Context, journals map[string][]byte)
	// Journal returns, under the room's main lock, what the room's next
	// write is to store in its transaction, by node (store.Write.Journals: an
	// empty one deletes the node's); nil if nothing changed since the
	// last. Wrote tells, under the same lock, whether that write was
	// stored.
	Journal() map[string][]byte
	Wrote(journal map[string][]byte, ok bool)
	// Busy is asked, under the room's main lock, when nothing else keeps
	// the room in memory: true keeps it. On false the room leaves memory
	// at once, and its observer with it: the room calls nothing more.
	Busy() bool
}

// Room is what a room offers its Observer. Its methods are safe for
// concurrent use.
type Room interface {
	// DocumentID names the room's document.
	DocumentID() string
	// Hold runs f with the document held still: under the room's apply
	// lock, so that no change applies until f returns. The caller must
	// hold no lock of the room's, nor be in an Observer method.
	Hold(f func())
	// Write queues the room for a write: what Observer.Journal returns
	// changed.
	Write()
}

// observed is the Room of r's observer.
type observed struct {
	h *Hub
	r *room
}

func (o observed) DocumentID() string { return o.r.id }

func (o observed) Hold(f func()) {
	o.r.applyMu.Lock()
	defer o.r.unlockApply()
	f()
}

func (o observed) Write() { o.h.markDirty(o.r) }

// Observer loads a document if it is not in memory and returns its room's
// observer; nil if Config.Observe is not set.
func (h *Hub) Observer(ctx context.Context, documentID string) (Observer, error) {
	r, err := h.acquire(ctx, documentID)
	if err != nil {
		return nil, err
	}
	return r.obs, nil
}

// changesOf returns the changes as an Observer reads them.
func changesOf(cs []guard.Change) iter.Seq[*amcheck.Change] {
	return func(yield func(*amcheck.Change) bool) {
		for i := range cs {
			if !yield(&cs[i].Change) {
				return
			}
		}
	}
}
