package transport

import (
	"sync"
	"time"
)

// Turns: the goroutines that run connections' turns.
//
// A connection holds no goroutine while it is idle: its writer runs only
// while there is something to write (writer.go), and its reader, once
// parked, only when the socket has something (park.go). Each wake-up is
// a turn. A goroutine started afresh for each turn begins on the smallest
// stack and, as a write goes deep into the runtime, grows it on nearly
// every turn: under steady presence traffic that copy cost more than the
// turn's own work. So turns run on goroutines that stay, with the stack
// they grew, for turnIdle after their last turn, and take the next one
// that comes; past it they end, so a quiet node keeps none.

// turnIdle is how long a goroutine waits for another turn before it ends.
const turnIdle = time.Second

// turn is one turn of a connection: its writer's, or its reader's after
// the poller woke it.
type turn struct {
	c    *conn
	read bool
}

func (t turn) run() {
	if t.read {
		t.c.run(true)
	} else {
		t.c.write()
	}
}

// turns is the server's pool of goroutines for turns.
type turns struct {
	mu     sync.Mutex
	idle   []*turner // waiting for a turn, the most recently busy last
	closed bool
	quit   chan struct{} // closed by close: the idle end
}

// turner is one goroutine of the pool.
type turner struct {
	next chan turn
	at   int // its index in idle while there, else -1
}

func newTurns() *turns { return &turns{quit: make(chan struct{})} }

// run runs t on a waiting goroutine, or on a new one.
func (p *turns) run(t turn) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		w := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		w.at = -1
		p.mu.Unlock()
		w.next <- t
		return
	}
	p.mu.Unlock()
	go p.work(t)
}

// work runs turns until none comes for turnIdle, or the pool closes.
func (p *turns) work(t turn) {
	w := &turner{next: make(chan turn, 1), at: -1}
	var timer *time.Timer
	for {
		t.run()
		t = turn{}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return
		}
		w.at = len(p.idle)
		p.idle = append(p.idle, w)
		p.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(turnIdle)
		} else {
			timer.Reset(turnIdle)
		}
		select {
		case t = <-w.next:
			timer.Stop()
			continue
		case <-timer.C:
		case <-p.quit:
			timer.Stop()
		}
		p.mu.Lock()
		if w.at >= 0 { // still idle: it ends
			last := p.idle[len(p.idle)-1]
			p.idle[w.at], last.at = last, w.at
			p.idle[len(p.idle)-1] = nil
			p.idle = p.idle[:len(p.idle)-1]
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		t = <-w.next // given a turn meanwhile: it is on its way
	}
}

// close ends the waiting goroutines, and each busy one after its turn.
// Turns run after it each have a goroutine of their own.
func (p *turns) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.closed = true
		close(p.quit)
	}
}
