package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/tandemhq/tandem/awareness/lastseen"
	"github.com/tandemhq/tandem/doc"
)

// stores are what a node keeps on disk, each owned by its layer: the
// documents (doc) and when each user was last seen (presence).
type stores struct {
	docs      doc.Store
	lastSeen  lastSeenStore
	storageID string                          // announced to clients
	ping      func(ctx context.Context) error // PostgreSQL's, for /readyz; nil when embedded
}

type lastSeenStore interface {
	lastseen.Store
	Close() error
}

// close closes both stores; the documents' after their hub has flushed.
func (s *stores) close() {
	s.lastSeen.Close()
	s.docs.Close()
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
		s, err := doc.OpenBoltStore(cfg.DataDir)
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
		log.Info("store: embedded", "data_dir", cfg.DataDir)
		return &stores{docs: s, lastSeen: seen, storageID: id}, nil
	}
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s, err := doc.OpenPostgresStore(octx, cfg.PostgresURL)
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
	log.Info("store: PostgreSQL")
	return &stores{docs: s, lastSeen: seen, storageID: id, ping: s.Ping}, nil
}
