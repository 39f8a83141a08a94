package mention

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemhq/tandem/doc"
	"github.com/tandemhq/tandem/doc/store"
)

// Config configures a Tracker. Zero fields take the documented defaults.
type Config struct {
	// Report receives the mentions (`@<userId>` in a document's text
	// field, Fields) that local peers insert, once each, after the peer's
	// edits have paused for Settle. Required. It is called on a goroutine
	// of its own, never with a room's lock held. Until it returns nil for
	// a report, the report stays in the document's journal, stored with
	// the changes (journal.go), and is offered again: after a backoff, or
	// by the node that takes the journal over if this one dies. A report
	// offered again keeps its Key. An error that says it is permanent (it,
	// or one it wraps, has a method Permanent() bool that returns true)
	// drops the report instead: offered again, it would fail again. A
	// failing report holds up no other (handover.go).
	Report func(Report) error
	// Settle is how long a peer's edits must pause before the mentions
	// they inserted count; default 1.5 s.
	Settle time.Duration
	// Fields names the fields mentions are read from; by default the root
	// "text" and "title".
	Fields Fields
	// Author names the user behind a peer whose edits mention someone,
	// for the report; by default the report names the peer id.
	Author func(documentID string, p doc.Peer) (userID, name string)
	// Documents loads the documents whose journals a sweep takes over:
	// the hub whose rooms this tracker observes (made first, its
	// doc.Config.Observe calling this tracker's Observe once it is made:
	// no room is made before the hub serves). Required.
	Documents Documents
	// Journals lists the journals stored, of every document and node:
	// the hub's store. Required.
	Journals JournalLister
	// NodeID names this node in the journals; default a random id.
	NodeID string
	// NodeAlive tells whether another node is alive, so that its journals
	// are left to it; by default every other node counts as gone (a node
	// alone: a journal of another node id is of an earlier run).
	NodeAlive func(ctx context.Context, node string) (bool, error)
	// Sweep is how often the stored journals are looked through for those
	// of gone nodes; default 15 s.
	Sweep time.Duration
	// Logger receives the tracker's logs; default slog.Default().
	Logger *slog.Logger
	// Registerer receives the tracker's metrics; nil registers none.
	Registerer prometheus.Registerer
}

// Documents is what a sweep needs of the document hub (*doc.Hub).
type Documents interface {
	// Observer loads a document if it is not in memory and returns its
	// room's observer.
	Observer(ctx context.Context, documentID string) (doc.Observer, error)
}

// JournalLister lists the stored journals (store.Store).
type JournalLister interface {
	Journals(ctx context.Context) ([]store.Journal, error)
}

// defaultSettle is how long a peer's edits must pause before the mentions
// they inserted count: typing "@ana" passes through "@a" and "@an", and
// only what is there when the typing pauses is a mention.
const defaultSettle = 1500 * time.Millisecond

func (c *Config) setDefaults() error {
	if c.Report == nil {
		return errors.New("mention: Config.Report is required")
	}
	if c.Documents == nil || c.Journals == nil {
		return errors.New("mention: Config.Documents and Config.Journals are required")
	}
	if c.Settle <= 0 {
		c.Settle = defaultSettle
	}
	c.Fields.setDefaults()
	if c.NodeID == "" {
		c.NodeID = newKey()
	}
	if c.Sweep <= 0 {
		c.Sweep = 15 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// newKey returns a random (version 4) UUID.
func newKey() string {
	var u [16]byte
	rand.Read(u[:])
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:])
}
