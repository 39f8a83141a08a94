package lastseen

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tandemhq/tandem/awareness"
	"github.com/tandemhq/tandem/internal/testenv"
)

// A user id the store cannot hold fails a write with
// awareness.ErrUnstorable, which the hub's writer tells from a store out
// of reach: PostgreSQL's text refuses a NUL, its index a key of
// kilobytes, bbolt a key over 32 KiB.
func TestStoresSayWhatTheyCannotHold(t *testing.T) {
	ctx := context.Background()
	at := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	p := prefix(t)
	pg := openPostgres(t)
	for _, id := range []string{p + "\x00", p + longID(10000)} {
		if err := pg.SaveLastSeenBatch(ctx, map[string]time.Time{p + "-ana": at, id: at}); !errors.Is(err, awareness.ErrUnstorable) {
			t.Errorf("Postgres, a batch with an id of %d bytes, NUL %v: %v, want ErrUnstorable", len(id), strings.Contains(id, "\x00"), err)
		}
		if err := pg.SaveLastSeen(ctx, id, at); !errors.Is(err, awareness.ErrUnstorable) {
			t.Errorf("Postgres, an id of %d bytes, NUL %v: %v, want ErrUnstorable", len(id), strings.Contains(id, "\x00"), err)
		}
	}
	b := openBolt(t, t.TempDir())
	if err := b.SaveLastSeenBatch(ctx, map[string]time.Time{"ana": at, strings.Repeat("u", 40<<10): at}); !errors.Is(err, awareness.ErrUnstorable) {
		t.Errorf("Bolt, a batch with an id of 40 KiB: %v, want ErrUnstorable", err)
	}
	pg.Close()
	if err := pg.SaveLastSeen(ctx, p+"-ana", at); err == nil || errors.Is(err, awareness.ErrUnstorable) {
		t.Errorf("Postgres closed: %v, want an error that is not ErrUnstorable", err)
	}
}

// longID is n bytes of random hex: text PostgreSQL cannot compress to fit
// an index row.
func longID(n int) string {
	b := make([]byte, n/2)
	rand.Read(b)
	return hex.EncodeToString(b)
}

type peer string

func (p peer) ID() string                    { return string(p) }
func (peer) PresenceReady(f *awareness.Feed) {}

// runKey marks the context the test runs a hub with: the hub's last-seen
// writer passes it on to the store, a write made inline (before the
// writer runs) does not.
type runKey struct{}

// fromWriter is a store that notes the users whose times came from the
// hub's running writer, which queues and batches them.
type fromWriter struct {
	store
	mu    sync.Mutex // guards byRun
	byRun map[string]bool
}

func (s *fromWriter) note(ctx context.Context, users ...string) {
	if ctx.Value(runKey{}) == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, u := range users {
		s.byRun[u] = true
	}
}

func (s *fromWriter) SaveLastSeen(ctx context.Context, u string, at time.Time) error {
	s.note(ctx, u)
	return s.store.SaveLastSeen(ctx, u, at)
}

func (s *fromWriter) SaveLastSeenBatch(ctx context.Context, at map[string]time.Time) error {
	for u := range at {
		s.note(ctx, u)
	}
	return s.store.SaveLastSeenBatch(ctx, at)
}

func (s *fromWriter) written(u string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byRun[u]
}

// One user whose id the store cannot hold goes offline before another:
// the other's last-seen is stored all the same. Both stores once failed
// the whole batch, kept the bad id in every later one, and so stored no
// one's last-seen again (PostgreSQL logging "invalid byte sequence for
// encoding UTF8: 0x00" for ever). The bad id is a peer's own (open mode:
// a peer without a user channel is its own user).
func TestAUserTheStoreCannotHoldKeepsNoOneElseOut(t *testing.T) {
	p := prefix(t)
	const doc = "2gzyVEWRbEhwBcRvStKvD3gBE5pp"
	for _, c := range []struct {
		name  string
		store store
		bad   string
	}{
		{"Postgres", openPostgres(t), p + "-bad\x00"},
		{"PostgresLong", openPostgres(t), p + longID(10000)},
		{"Bolt", openBolt(t, t.TempDir()), longID(40 << 10)},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := &fromWriter{store: c.store, byRun: map[string]bool{}}
			h, err := awareness.New(awareness.Config{LastSeen: s, Logger: testenv.QuietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			ran := make(chan struct{})
			go func() { h.Run(context.WithValue(context.Background(), runKey{}, true)); close(ran) }()
			defer func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				h.Close(ctx)
				<-ran
			}()
			stored := func(u string) func() bool {
				return func() bool {
					_, ok, _ := c.store.LastSeen(context.Background(), u)
					return ok
				}
			}
			// Until the writer runs, a hub writes each time at once, alone.
			for i := 0; ; i++ {
				probe := fmt.Sprint(p, "-probe-", c.name, i)
				h.Join(peer(probe), doc)
				h.Leave(peer(probe))
				testenv.WaitFor(t, "a probe's last-seen stored", stored(probe))
				if s.written(probe) {
					break
				}
			}
			ana := p + "-ana-" + c.name
			for _, id := range []string{c.bad, ana} {
				h.Join(peer(id), doc)
			}
			for _, id := range []string{c.bad, ana} {
				h.Leave(peer(id))
			}
			testenv.WaitFor(t, "ana's last-seen stored", stored(ana))
		})
	}
}
