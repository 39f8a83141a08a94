package transport

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tandemhq/tandem/internal/testenv"
)

// gateTurn is a turn that reports it ran, and waits for its gate if it
// has one.
type gateTurn struct {
	ran  chan struct{}
	gate chan struct{}
}

func (t *gateTurn) runTurn() {
	if t.gate != nil {
		<-t.gate
	}
	t.ran <- struct{}{}
}

// idleTurners is how many goroutines of p wait for a turn.
func idleTurners(p *turns) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}

// waitIdleTurners waits until n goroutines of p wait.
func waitIdleTurners(t *testing.T, p *turns, n int) {
	t.Helper()
	testenv.WaitFor(t, fmt.Sprintf("%d goroutines waiting for a turn", n), func() bool { return idleTurners(p) == n })
}

// Turns one after another run on one goroutine, turns at once on as many;
// close ends those that wait.
func TestTurnsReuseTheirGoroutines(t *testing.T) {
	p := newTurns()
	p.idleFor = time.Hour // nothing ends before the test says so
	one := &gateTurn{ran: make(chan struct{}, 1)}
	for range 200 {
		p.run(one)
		<-one.ran
		waitIdleTurners(t, p, 1) // back to wait: the next turn takes it
	}

	const n = 50
	gate := make(chan struct{})
	busy := &gateTurn{ran: make(chan struct{}, n), gate: gate}
	for range n {
		p.run(busy)
	}
	waitIdleTurners(t, p, 0) // the one that waited took the first
	close(gate)
	for range n {
		<-busy.ran
	}
	waitIdleTurners(t, p, n)
	p.run(one)
	<-one.ran
	waitIdleTurners(t, p, n) // one of them took it, and waits again
	p.close()
	waitIdleTurners(t, p, 0)
	p.run(one) // after close a turn still runs, on a goroutine of its own
	<-one.ran
}

// Goroutines that waited idleFor for a turn end.
func TestIdleTurnersEnd(t *testing.T) {
	p := newTurns()
	p.idleFor = time.Millisecond
	const n = 20
	gate := make(chan struct{})
	busy := &gateTurn{ran: make(chan struct{}, n), gate: gate}
	for range n {
		p.run(busy)
	}
	close(gate)
	for range n {
		<-busy.ran
	}
	waitIdleTurners(t, p, 0)
}

// Turns given from many goroutines at once all run, each once.
func TestEveryTurnRuns(t *testing.T) {
	p := newTurns()
	p.idleFor = time.Millisecond
	defer p.close()
	const goroutines, each = 8, 500
	var wg sync.WaitGroup
	ran := make(chan struct{}, goroutines*each)
	turn := &gateTurn{ran: ran}
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				p.run(turn)
			}
		}()
	}
	wg.Wait()
	for range goroutines * each {
		select {
		case <-ran:
		case <-time.After(10 * time.Second):
			t.Fatal("a turn never ran")
		}
	}
}
