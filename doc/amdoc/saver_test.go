package amdoc

import (
	"context"
	"testing"
	"time"

	"github.com/tandemhq/tandem/doc/amcheck/amtest"
)

// A Saver paces its saves, but a save in a hurry stops waiting for the
// pace: after a save, the next waits about as long as it took (share
// 0.5), one whose hurry is closed does not.
func TestASaveInAHurryIsNotPaced(t *testing.T) {
	s := NewSaver(0.5)
	changes := join(amtest.Typing(2000))
	get := func() ([]byte, error) { return changes, nil }
	if _, err := s.Save(context.Background(), get); err != nil {
		t.Fatal(err)
	}
	s.next = time.Now().Add(time.Hour) // as after a save that took an hour
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	now := make(chan struct{})
	close(now)
	if _, err := s.Save(Hurry(ctx, now), get); err != nil {
		t.Fatalf("a save in a hurry waited for the pace: %v", err)
	}
	s.next = time.Now().Add(time.Hour)
	later := make(chan struct{})
	time.AfterFunc(10*time.Millisecond, func() { close(later) })
	if _, err := s.Save(Hurry(ctx, later), get); err != nil {
		t.Fatalf("a save hurried while it waited for the pace waited on: %v", err)
	}
	s.next = time.Now().Add(time.Hour)
	short, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	if _, err := s.Save(short, get); err == nil {
		t.Fatal("a save not in a hurry did not wait for the pace")
	}
}
