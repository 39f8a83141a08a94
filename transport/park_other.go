//go:build !linux

package transport

import (
	"errors"
	"log/slog"
	"sync/atomic"
)

// poller is Linux's (park_linux.go). Elsewhere a connection never parks:
// its reader keeps its goroutine.
type poller struct{ dead atomic.Bool }

func newPoller(*slog.Logger) (*poller, error) { return nil, errors.ErrUnsupported }

func (p *poller) watch(*conn) error { return errors.ErrUnsupported }
func (p *poller) forget(*conn)      {}
func (p *poller) close()            {}
