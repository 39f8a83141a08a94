package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/tandemhq/tandem/awareness"
	"github.com/tandemhq/tandem/doc"
)

// durable is the store a node runs on: documents and last-seen times.
type durable interface {
	doc.Store
	awareness.LastSeenStore
}

var (
	_ durable = (*doc.BoltStore)(nil)
	_ durable = (*doc.PostgresStore)(nil)
)

// openStore opens PostgreSQL when configured, the embedded store otherwise,
// and returns the storage id announced to clients.
func openStore(ctx context.Context, cfg config, log *slog.Logger) (durable, string, func(context.Context) error, error) {
	if cfg.PostgresURL == "" {
		s, err := doc.OpenBoltStore(cfg.DataDir)
		if err != nil {
			return nil, "", nil, err
		}
		id, err := s.StorageID()
		if err != nil {
			s.Close()
			return nil, "", nil, fmt.Errorf("read storage id: %w", err)
		}
		log.Info("store: embedded", "data_dir", cfg.DataDir)
		return s, id, nil, nil
	}
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s, err := doc.OpenPostgresStore(octx, cfg.PostgresURL)
	if err != nil {
		return nil, "", nil, err
	}
	id, err := s.StorageID(octx)
	if err != nil {
		s.Close()
		return nil, "", nil, fmt.Errorf("read storage id: %w", err)
	}
	log.Info("store: PostgreSQL")
	return s, id, s.Ping, nil
}
