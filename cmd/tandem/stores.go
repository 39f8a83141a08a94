package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/tandemhq/tandem/awareness"
	"github.com/tandemhq/tandem/awareness/history"
	"github.com/tandemhq/tandem/awareness/lastseen"
	"github.com/tandemhq/tandem/doc/store"
	"github.com/tandemhq/tandem/web"
)

// stores are what a node keeps on disk, each owned by its layer: the
// documents (doc), when each user was last seen and presence history
// (presence).
type stores struct {
	docs      store.Store
	lastSeen  lastSeenStore
	history   historyStore                    // nil with --presence-history 0
	storageID string                          // announced to clients
	ping      func(ctx context.Context) error // PostgreSQL's, for /readyz; nil when embedded
}

type lastSeenStore interface {
	lastseen.Store
	Close() error
}

type historyStore interface {
	awareness.HistoryStore
	web.History
	Close() error
}

// close closes the stores; the documents' after their hub has flushed.
func (s *stores) close() {
	if s.history != nil {
		s.history.Close()
	}
	s.lastSeen.Close()
	s.docs.Close()
}

// openHistory opens presence history's store beside the others: in
// PostgreSQL when the node has one, else an SQLite file in the data
// directory. With --presence-history 0 there is none.
func (s *stores) openHistory(ctx context.Context, cfg config) error {
	if cfg.PresenceHistory == 0 {
		return nil
	}
	// Set only once open: a nil store in the interface is not nil.
	if cfg.PostgresURL == "" {
		h, err := history.OpenSQLite(cfg.DataDir)
		if err != nil {
			return err
		}
		s.history = h
		return nil
	}
	h, err := history.OpenPostgres(ctx, cfg.PostgresURL)
	if err != nil {
		return err
	}
	s.history = h
	return nil
}

// openStores opens PostgreSQL when configured, the embedded files
// otherwise.
func openStores(ctx context.Context, cfg config, log *slog.Logger) (*stores, error) {
	if cfg.PostgresURL == "" {
		// Presence's file first: a new one takes the last-seen times the
		// documents' file held before presence had its own.
		seen, err := lastseen.OpenBolt(cfg.DataDir)
		if err != nil {
			return nil, err
		}
		s, err := store.OpenBolt(cfg.DataDir)
		if err != nil {
			seen.Close()
			return nil, err
		}
		id, err := s.StorageID()
		if err != nil {
			s.Close()
			seen.Close()
			return nil, fmt.Errorf("read storage id: %w", err)
		}
		st := &stores{docs: s, lastSeen: seen, storageID: id}
		if err := st.openHistory(ctx, cfg); err != nil {
			st.close()
			return nil, err
		}
		log.Info("store: embedded", "data_dir", cfg.DataDir)
		return st, nil
	}
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s, err := store.OpenPostgres(octx, cfg.PostgresURL)
	if err != nil {
		return nil, err
	}
	seen, err := lastseen.OpenPostgres(octx, cfg.PostgresURL)
	if err != nil {
		s.Close()
		return nil, err
	}
	id, err := s.StorageID(octx)
	if err != nil {
		s.Close()
		seen.Close()
		return nil, fmt.Errorf("read storage id: %w", err)
	}
	st := &stores{docs: s, lastSeen: seen, storageID: id, ping: s.Ping}
	if err := st.openHistory(octx, cfg); err != nil {
		st.close()
		return nil, err
	}
	log.Info("store: PostgreSQL")
	return st, nil
}
