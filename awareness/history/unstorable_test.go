package history

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"

	"github.com/tandemhq/tandem/awareness"
	"github.com/tandemhq/tandem/internal/testenv"
)

// PostgreSQL's text cannot hold a NUL: a batch with one fails whole, with
// awareness.ErrUnstorable, which the recorder tells from a store out of
// reach. (SQLite holds it.) A cancelled write is not ErrUnstorable.
func TestPostgresSaysWhatItCannotHold(t *testing.T) {
	s := openPostgres(t, testenv.PostgresSchema(t))
	for _, iv := range []awareness.HistoryInterval{
		open(5, 2, "d", "bad\x00", awareness.StatusOnline, 0),
		{Run: 5, Seq: 2, Doc: "d", User: "ana", Name: "A\x00na", Status: awareness.StatusOnline, From: at(0)},
	} {
		err := s.WriteHistory(context.Background(), []awareness.HistoryInterval{open(5, 1, "d", "ana", awareness.StatusOnline, 0), iv}, nil)
		if !errors.Is(err, awareness.ErrUnstorable) {
			t.Errorf("a batch holding %q named %q: %v, want ErrUnstorable", iv.User, iv.Name, err)
		}
	}
	wantDoc(t, s, "d", 0, 60)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.WriteHistory(ctx, []awareness.HistoryInterval{open(5, 1, "d", "ana", awareness.StatusOnline, 0)}, nil); err == nil || errors.Is(err, awareness.ErrUnstorable) {
		t.Errorf("a cancelled write: %v, want an error that is not ErrUnstorable", err)
	}
}

type peer string

func (p peer) ID() string                    { return string(p) }
func (peer) PresenceReady(f *awareness.Feed) {}

// A peer whose user id holds a NUL (its own peer id, on a node running
// open) is present beside ana: ana's presence and status are stored all
// the same. PostgreSQL once refused the batch for the NUL, the interval
// stayed first in every later batch, and no one's history was stored
// again.
func TestAUserTheStoreCannotHoldKeepsNoOneElsesHistoryOut(t *testing.T) {
	eachStore(t, func(t *testing.T, s store) {
		h, err := awareness.New(awareness.Config{History: s, HistoryNode: "n1", Logger: testenv.QuietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		ran := make(chan struct{})
		go func() { h.Run(context.Background()); close(ran) }()
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			h.Close(ctx)
			<-ran
		}()
		const doc = "2gzyVEWRbEhwBcRvStKvD3gBE5pp"
		heartbeat, err := cbor.Marshal(map[string]any{"__presence": map[string]any{"type": awareness.TypeHeartbeat}})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		for _, id := range []string{"bad\x00", "ana"} {
			if ok, err := h.Receive(peer(id), doc, awareness.Message{SenderID: id, SessionID: "s", Count: 1, Data: heartbeat}); !ok || err != nil {
				t.Fatalf("%q's heartbeat: %v %v", id, ok, err)
			}
		}
		testenv.WaitFor(t, "ana's presence and status stored", func() bool {
			ctx := context.Background()
			from, to := start.Add(-time.Minute), time.Now().Add(time.Minute)
			docs, err1 := s.DocIntervals(ctx, doc, from, to, 10)
			status, err2 := s.UserIntervals(ctx, "ana", from, to, 10)
			return err1 == nil && err2 == nil && len(status) == 1 && slices.ContainsFunc(docs, func(iv awareness.HistoryInterval) bool { return iv.User == "ana" })
		})
	})
}
