package amdoc

import (
	"context"
	"fmt"
	"time"
)

// Saver runs saves one at a time, paced: a save holds a few times its
// document's ops while it runs (Save), so one at a time bounds what the
// process holds for them; and a document written fast would otherwise be
// saved again and again while it grows, so after a save that took d the
// next starts no sooner than d × (1/share − 1) after it.
type Saver struct {
	share float64
	turn  chan struct{}
	next  time.Time // the next save starts no sooner; its turn's holder's
}

// NewSaver returns a Saver whose saves take at most share of one core's
// time (0 < share ≤ 1; 1: one after another).
func NewSaver(share float64) *Saver {
	if share <= 0 || share > 1 {
		share = 1
	}
	return &Saver{share: share, turn: make(chan struct{}, 1)}
}

// Save waits for its turn, then calls changes for the document's changes
// (change chunks one after another, each after what it depends on; the
// caller copies them only now, when they are to be saved) and returns
// them saved. ctx ends the wait. A save that fails, even by a fault in
// it (a panic), returns an error and leaves the process as it was.
func (s *Saver) Save(ctx context.Context, changes func() ([]byte, error)) ([]byte, error) {
	select {
	case s.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-s.turn }()
	if wait := time.Until(s.next); wait > 0 {
		hurry, _ := ctx.Value(hurryKey{}).(<-chan struct{})
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-hurry:
			t.Stop()
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
	}
	b, err := changes()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	defer func() { s.next = time.Now().Add(time.Duration(float64(time.Since(start)) * (1/s.share - 1))) }()
	return safeSave(ctx, b)
}

type hurryKey struct{}

// Hurry returns ctx for a save that stops waiting for the pace once hurry
// is closed: someone (a new reader) came to wait for it. It still waits
// its turn. A save made for someone waiting already has hurry closed.
func Hurry(ctx context.Context, hurry <-chan struct{}) context.Context {
	return context.WithValue(ctx, hurryKey{}, hurry)
}

// safeSave is Save, a panic in it returned as an error: the changes were
// checked when they were taken, so a panic is a fault of Save's own,
// which must not take the node down with every document it serves.
func safeSave(ctx context.Context, b []byte) (doc []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			doc, err = nil, fmt.Errorf("amdoc: saving failed: %v", p)
		}
	}()
	return save(ctx, b, maxOps)
}
