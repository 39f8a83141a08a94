package testenv

import (
	"context"
	"sync"
	"time"
)

// MemoryLastSeen is an in-memory awareness.LastSeenStore, for tests of
// presence in more than one package. It keeps the last time saved per
// user, as it is given, and stores one user at a time: it is not a
// LastSeenBatcher. Its zero value is ready; it is safe for concurrent use.
//
// Its methods take only standard types, so that this package imports
// nothing of the module (internal/layout); each package that uses it
// checks at compile time that it still is a LastSeenStore.
type MemoryLastSeen struct {
	mu   sync.Mutex // guards seen
	seen map[string]time.Time
}

// SaveLastSeen records at as the time user was last seen.
func (s *MemoryLastSeen) SaveLastSeen(_ context.Context, user string, at time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil {
		s.seen = map[string]time.Time{}
	}
	s.seen[user] = at
	return nil
}

// LastSeen returns the time saved for user, if any.
func (s *MemoryLastSeen) LastSeen(_ context.Context, user string) (time.Time, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.seen[user]
	return at, ok, nil
}

// Has reports whether user has a time saved.
func (s *MemoryLastSeen) Has(user string) bool {
	_, ok, _ := s.LastSeen(context.Background(), user)
	return ok
}

// Len is how many users have a time saved.
func (s *MemoryLastSeen) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.seen)
}
