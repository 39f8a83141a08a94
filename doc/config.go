package doc

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemhq/tandem/doc/guard"
	"github.com/tandemhq/tandem/doc/store"
)

// Config configures a Hub. Zero fields take the documented defaults.
type Config struct {
	// Store keeps documents durable. Required.
	Store store.Store
	// Logger receives the hub's logs; default slog.Default().
	Logger *slog.Logger
	// FlushInterval is how often a failed write is tried again and idle
	// rooms are evicted; default 200ms. Accepted changes are written as
	// soon as the write before them is done, and nothing names them to
	// any peer or node before they are stored (durable.go).
	FlushInterval time.Duration
	// EvictAfter is how long a room stays in memory after its last peer
	// leaves; default 1 minute.
	EvictAfter time.Duration
	// CompactAfter is how many incremental chunks a document collects
	// before it is rewritten as one snapshot; default 64.
	CompactAfter int
	// Cluster, when set, carries this node's document messages to the
	// other nodes of a cluster (cluster.go): every change accepted from a
	// local peer, once it is stored, and the heads exchange that repairs
	// what a lost message missed.
	Cluster Cluster
	// Limits bound what a client's changes may add (package guard).
	Limits guard.Limits
	// RefusedChanges and RefusedChangeBytes bound the refused changes the
	// hub remembers by hash, node-wide, so that a client sending one
	// again is refused without its message being checked again
	// (guard.Refusals): default 10,000 entries and 4 MiB, counted as each
	// entry's document id, reason and a fixed 160 bytes.
	RefusedChanges     int
	RefusedChangeBytes int64
	// SyncStateBytes bounds the bytes of the sync states kept for one
	// connection, summed over its documents (syncstate.go); default 4
	// MiB. A message that would pass it is refused.
	SyncStateBytes int64
	// Registerer receives the hub's metrics; nil registers none.
	Registerer prometheus.Registerer
	// Observe, when set, makes the Observer of each room as the room is
	// made (observer.go): package doc/mention's tracker follows the
	// mentions in each document's text that way. It is called with the
	// hub's lock held, and must return at once.
	Observe func(Room) Observer
	// UnavailableGrace is how long a request for a document this node
	// does not have waits for it to arrive before the store and the other
	// nodes are asked and, if none has it, doc-unavailable is sent
	// (lookup.go); default 200ms.
	UnavailableGrace time.Duration
	// Finder, when set, asks the other nodes of a cluster for a requested
	// document before this node reports it unavailable.
	Finder Finder
	// SyncSpacing is the least time between two sync messages that bring
	// a peer changes of a document (fanout.go); each also waits for the
	// peer's answer to the one before. Zero sends each as soon as the
	// peer has answered the one before.
	SyncSpacing time.Duration
	// SyncGather is how long the first change after a quiet spell waits
	// for the changes that come with it before it goes to a reader, while
	// more than one peer writes the document (two peers' changes within
	// ten seconds; amsync.State.Gather,
	// fanout.go); zero sends it at once.
	SyncGather time.Duration
	// SaveDocument, when set, returns a document's changes (change chunks
	// one after another, which it calls changes for when it is ready to
	// take them) saved as automerge saves a document; a large document's
	// new readers are sent that (saved.go). doc/amdoc's Saver.Save does
	// it in Go. Nil: readers get changes.
	SaveDocument func(ctx context.Context, changes func() ([]byte, error)) ([]byte, error)
	// SaveQuiet is how long a document goes without a change before the
	// changes since its last save are saved too, when they are more than
	// a sixteenth of it (saved.go); default 500ms.
	SaveQuiet time.Duration
}

func (c *Config) setDefaults() error {
	if c.Store == nil {
		return errors.New("doc: Config.Store is required")
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.FlushInterval <= 0 {
		c.FlushInterval = 200 * time.Millisecond
	}
	if c.UnavailableGrace <= 0 {
		c.UnavailableGrace = 200 * time.Millisecond
	}
	if c.EvictAfter <= 0 {
		c.EvictAfter = time.Minute
	}
	if c.SaveQuiet <= 0 {
		c.SaveQuiet = 500 * time.Millisecond
	}
	if c.CompactAfter <= 0 {
		c.CompactAfter = 64
	}
	c.Limits.SetDefaults()
	if c.SyncStateBytes <= 0 {
		c.SyncStateBytes = defaultSyncStateBytes
	}
	if c.RefusedChanges <= 0 {
		c.RefusedChanges = guard.DefaultRefusedChanges
	}
	if c.RefusedChangeBytes <= 0 {
		c.RefusedChangeBytes = guard.DefaultRefusedChangeBytes
	}
	return nil
}
