package amdoc

import (
	"context"
	"testing"
	"time"

	"github.com/tandemhq/tandem/doc/amcheck/amtest"
)

// A Saver paces its saves, but not one marked Urgent: after a save, the
// next waits about as long as it took (share 0.5), an urgent one does not.
func TestAnUrgentSaveIsNotPaced(t *testing.T) {
	s := NewSaver(0.5)
	changes := join(amtest.Typing(2000))
	get := func() ([]byte, error) { return changes, nil }
	if _, err := s.Save(context.Background(), get); err != nil {
		t.Fatal(err)
	}
	s.next = time.Now().Add(time.Hour) // as after a save that took an hour
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.Save(Urgent(ctx), get); err != nil {
		t.Fatalf("an urgent save waited for the pace: %v", err)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	if _, err := s.Save(short, get); err == nil {
		t.Fatal("a save that is not urgent did not wait for the pace")
	}
}
