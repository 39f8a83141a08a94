package transport

import (
	"sync"
	"time"
)

// Turns: the goroutines that run connections' writers.
//
// A connection holds no goroutine while it is idle: its writer runs only
// while there is something to write (writer.go). Each run is a turn. A
// goroutine started afresh for each turn begins on the smallest stack
// and, as a write goes deep into the runtime, grows it on nearly every
// turn: under steady presence traffic that copy cost more than the turn's
// own work. So turns run on goroutines that stay, with the stack they
// grew, for about turnIdle after their last turn (one to two), and take
// the next turn that comes; then they end, so a quiet node keeps none.
// The readers the poller starts for what it read (park.go) take turns
// here too.

// turnIdle is how long a goroutine waits for another turn, at least.
const turnIdle = time.Second

// turn is one turn: a connection's writer or reader. The nil turn ends
// the goroutine that gets it.
type turn interface{ runTurn() }

// turns is the server's pool of goroutines for turns.
type turns struct {
	idleFor time.Duration // turnIdle; shorter in tests

	mu      sync.Mutex
	idle    []*turner // waiting for a turn, the longest waiting first
	sweeper bool      // a goroutine ends those waiting past idleFor
	closed  bool
}

// turner is one goroutine of the pool.
type turner struct {
	next  chan turn
	since time.Time // when it began to wait
}

func newTurns() *turns { return &turns{idleFor: turnIdle} }

// run runs t on a waiting goroutine, the one that waited least, or on a
// new one.
func (p *turns) run(t turn) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		w := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		w.next <- t
		return
	}
	p.mu.Unlock()
	go p.work(t)
}

// work runs turns until it is given the nil turn.
func (p *turns) work(t turn) {
	w := &turner{next: make(chan turn, 1)}
	for t != nil {
		t.runTurn()
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return
		}
		w.since = time.Now()
		p.idle = append(p.idle, w)
		if !p.sweeper {
			p.sweeper = true
			time.AfterFunc(p.idleFor, p.sweep)
		}
		p.mu.Unlock()
		t = <-w.next
	}
}

// sweep ends the goroutines that have waited idleFor or longer, and
// comes again while any waits.
func (p *turns) sweep() {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	n := 0
	for n < len(p.idle) && (p.closed || now.Sub(p.idle[n].since) >= p.idleFor) {
		p.idle[n].next <- nil
		p.idle[n] = nil
		n++
	}
	p.idle = p.idle[n:]
	if len(p.idle) == 0 {
		p.idle = nil
		p.sweeper = false
		return
	}
	time.AfterFunc(p.idleFor, p.sweep)
}

// close ends the waiting goroutines, and each busy one after its turn.
// Turns run after it each have a goroutine of their own.
func (p *turns) close() {
	p.mu.Lock()
	p.closed = true
	for _, w := range p.idle {
		w.next <- nil
	}
	p.idle = nil
	p.mu.Unlock()
}
