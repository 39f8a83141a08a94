package transport

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"golang.org/x/sys/unix"

	"github.com/tandemhq/tandem/awareness"
	"github.com/tandemhq/tandem/internal/testenv"
	"github.com/tandemhq/tandem/transport/wire"
)

// A room for the pacing tests: a listener in the document and movers
// that each move once. The server pings once an hour, so that the only
// bytes a client is sent are what the tests make.
type paceRoom struct {
	t        *testing.T
	s        *testServer
	listener *websocket.Conn
	movers   []*websocket.Conn
	seq      uint64
	unpassed []*wire.Message // what the listener was sent and has not passed back
	moved    map[string]bool // the movers whose move the listener was sent
}

func newPaceRoom(t *testing.T, movers int, cfg Config) *paceRoom {
	presence, err := awareness.New(awareness.Config{Logger: testenv.QuietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); presence.Run(ctx) }() // its ticks send what a tick held back
	t.Cleanup(func() {
		cancel()
		<-ran
		presence.Close(context.Background())
	})
	cfg.Presence, cfg.PingInterval = presence, time.Hour
	r := &paceRoom{t: t, s: newTestServer(t, cfg), moved: map[string]bool{}}
	r.listener = dial(t, r.s.url)
	join(t, r.listener, "l")
	sendEphemeral(t, r.listener, "l", 1, presencePayload(t, map[string]any{"type": "heartbeat"}))
	rejoin(t, r.listener, "l") // the fence: the listener is in the document
	for i := range movers {
		ws := dial(t, r.s.url)
		join(t, ws, fmt.Sprint("m", i))
		r.movers = append(r.movers, ws)
	}
	return r
}

// newPacedRoom is newPaceRoom with a listener that has passed back the
// first mover's move: a client that passes back, paced from now on.
func newPacedRoom(t *testing.T, movers int, cfg Config) *paceRoom {
	r := newPaceRoom(t, movers, cfg)
	r.move(0)
	r.readMoves(0)
	r.passBack()
	return r
}

// move has mover i move, and returns once the server has posted the move
// to the document's peers: it has answered a heartbeat sent after it.
// The move comes when the listener's writer is idle: what the listener
// is sent of it is then the poster's to write at once, or held.
func (r *paceRoom) move(i int) {
	r.t.Helper()
	r.s.mu.Lock()
	c := r.s.peers["l"]
	r.s.mu.Unlock()
	testenv.WaitFor(r.t, "the listener's writer idle", func() bool {
		c.wmu.Lock()
		defer c.wmu.Unlock()
		return !c.writing
	})
	peer := fmt.Sprint("m", i)
	sendEphemeral(r.t, r.movers[i], peer, 1, presencePayload(r.t, map[string]any{"type": "update", "channel": "cursor", "value": i}))
	r.fence(r.movers[i], peer)
}

// fence sends a heartbeat on ws and reads until its acknowledgement: the
// server has handled all that ws sent before. What the listener is sent
// meanwhile is kept (listened).
func (r *paceRoom) fence(ws *websocket.Conn, peer string) {
	r.t.Helper()
	r.seq++
	send(r.t, ws, &wire.Message{Type: wire.TypeHeartbeat, SenderID: peer, TargetID: serverID, Seq: r.seq})
	for {
		m := recv(r.t, ws)
		if m.Type == wire.TypeHeartbeatAck && m.Seq == r.seq {
			return
		}
		if ws == r.listener {
			r.listened(m)
		}
	}
}

// listened keeps what the listener was sent: an ephemeral to pass back,
// and whose move it brought.
func (r *paceRoom) listened(m *wire.Message) {
	if m.Type != wire.TypeEphemeral {
		return
	}
	r.unpassed = append(r.unpassed, m)
	if _, ok := decodeUpdate(m.Data); ok {
		r.moved[m.SenderID] = true
	}
}

// readMoves reads what the listener is sent until it has had the moves
// of the movers named, then until the answer to a heartbeat sent after
// them: so all the server wrote to it before is read.
func (r *paceRoom) readMoves(movers ...int) {
	r.t.Helper()
	for _, i := range movers {
		for !r.moved[fmt.Sprint("m", i)] {
			r.listened(recv(r.t, r.listener))
		}
	}
	r.fence(r.listener, "l")
}

// passBack passes back all the listener was sent, as a stock client does,
// and returns once the server has read it.
func (r *paceRoom) passBack() {
	r.t.Helper()
	unpassed := r.unpassed
	r.unpassed = nil
	for _, m := range unpassed {
		passBack(r.t, r.listener, m)
	}
	r.fence(r.listener, "l")
}

// waiting is what the listener's socket holds unread. The server writes a
// move to the listener, if it does, before it answers the heartbeat that
// fenced the move: once the fence is back, the move is in the socket.
func (r *paceRoom) waiting() int {
	r.t.Helper()
	raw, err := r.listener.UnderlyingConn().(*net.TCPConn).SyscallConn()
	if err != nil {
		r.t.Fatal(err)
	}
	var n int
	var ioErr error
	if err := raw.Control(func(fd uintptr) { n, ioErr = unix.IoctlGetInt(int(fd), unix.SIOCINQ) }); err != nil {
		r.t.Fatal(err)
	}
	if ioErr != nil {
		r.t.Fatal(ioErr)
	}
	return n
}

// A client that passes back what it is sent is sent presence at its own
// pace: what comes before it has passed back the last it was sent waits,
// and goes in one write once it has.
func TestPresenceWaitsForTheClientToPassBack(t *testing.T) {
	r := newPacedRoom(t, 4, Config{})
	r.move(1)
	if r.waiting() == 0 {
		t.Fatal("a move to a client that owes nothing was not written at once")
	}
	r.readMoves(1)
	r.move(2)
	r.move(3)
	if n := r.waiting(); n != 0 {
		t.Fatalf("%d bytes written to a client that has not passed back what it was sent", n)
	}
	r.passBack()
	r.readMoves(2, 3)
}

// A client that passes nothing back is written each move at once.
func TestAClientThatPassesNothingBackIsNotHeld(t *testing.T) {
	r := newPaceRoom(t, 3, Config{})
	for i := range 3 {
		r.move(i)
		if r.waiting() == 0 {
			t.Fatalf("move %d not written at once to a client that passes nothing back", i)
		}
		r.readMoves(i)
	}
}

// A client that stops passing back is sent what waited for it once the
// hold's bound has passed, and from then on each move at once.
func TestAHoldEndsWhenTheClientStopsPassingBack(t *testing.T) {
	r := newPacedRoom(t, 4, Config{maxHold: 100 * time.Millisecond})
	r.move(1)
	r.readMoves(1) // not passed back
	r.move(2)
	if n := r.waiting(); n != 0 {
		t.Fatalf("%d bytes written to a client that has not passed back what it was sent", n)
	}
	r.readMoves(2) // after the bound
	r.move(3)
	if r.waiting() == 0 {
		t.Fatal("a move to a client that stopped passing back was not written at once")
	}
	r.readMoves(3)
}

// A pass-back that comes while the server decides to hold does not leave
// the client held: the client has passed back all it was sent by the time
// the hold is set, and the move goes at once.
func TestAPassBackDuringTheHoldDecisionIsNotLost(t *testing.T) {
	r := newPacedRoom(t, 3, Config{maxHold: time.Hour}) // only a pass-back ends a hold
	r.move(1)
	r.readMoves(1) // owed: the server is to hold the next move
	unpassed := r.unpassed
	r.unpassed = nil
	hook := func(c *conn) {
		if c.peerID != "l" {
			return
		}
		r.s.holdHook.Store(nil)
		for _, m := range unpassed {
			passBack(t, r.listener, m)
		}
		testenv.WaitFor(t, "the pass-backs read", func() bool { return c.presOwed.Load() <= c.releaseAt.Load() })
	}
	r.s.holdHook.Store(&hook)
	r.move(2)
	r.readMoves(2)
}

// Only presence counts in a client's pace: an ephemeral of a peer's own
// that a stock client does not pass back (one whose count it has seen, or
// one in the server's name) does not hold the presence that comes after it.
func TestAnEphemeralNotPassedBackDoesNotHoldPresence(t *testing.T) {
	r := newPacedRoom(t, 3, Config{maxHold: time.Hour}) // only a pass-back ends a hold
	// {"x": 1}, not presence: relayed to the document's peers, the
	// listener one once it has sent one itself.
	sendEphemeral(t, r.listener, "l", 2, []byte{0xa1, 0x61, 0x78, 0x01})
	r.fence(r.listener, "l")
	sendEphemeral(t, r.movers[1], "m1", 1, []byte{0xa1, 0x61, 0x78, 0x01})
	r.fence(r.movers[1], "m1")
	for {
		m := recv(t, r.listener)
		if m.Type == wire.TypeEphemeral && m.SenderID == "m1" {
			break // not passed back
		}
	}
	r.move(2)
	if r.waiting() == 0 {
		t.Fatal("a move held for an ephemeral the client does not pass back")
	}
	r.readMoves(2)
}

// Pass-backs racing moves never leave presence held: a listener that
// passes back all it reads as it reads it gets every mover's last move,
// though only a pass-back ends a hold.
func TestPassBacksRacingMovesLeaveNothingHeld(t *testing.T) {
	const moves = 300
	r := newPaceRoom(t, 4, Config{maxHold: time.Hour, MessageRate: 1e5, MessageBurst: 1e5})
	var mu sync.Mutex
	last := map[string]uint64{}
	go func() {
		for {
			_, b, err := r.listener.ReadMessage()
			if err != nil {
				return
			}
			m, err := wire.Decode(b)
			if err != nil || m.Type != wire.TypeEphemeral {
				continue
			}
			if err := r.listener.WriteMessage(websocket.BinaryMessage, mustEncode(t, &wire.Message{Type: wire.TypeEphemeral,
				SenderID: m.SenderID, TargetID: serverID, DocumentID: m.DocumentID, SessionID: m.SessionID, Count: m.Count, Data: m.Data})); err != nil {
				return
			}
			if v, ok := decodeUpdate(m.Data); ok {
				mu.Lock()
				last[m.SenderID] = v
				mu.Unlock()
			}
		}
	}()
	var wg sync.WaitGroup
	for i, ws := range r.movers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			peer := fmt.Sprint("m", i)
			for v := uint64(1); v <= moves; v++ {
				b := mustEncode(t, &wire.Message{Type: wire.TypeEphemeral, SenderID: peer, TargetID: serverID, DocumentID: testDoc,
					SessionID: "session-" + peer, Count: v, Data: presencePayload(t, map[string]any{"type": "update", "channel": "cursor", "value": v})})
				if err := ws.WriteMessage(websocket.BinaryMessage, b); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	testenv.WaitFor(t, "every mover's last move at the listener", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for i := range r.movers {
			if last[fmt.Sprint("m", i)] != moves {
				return false
			}
		}
		return true
	})
}

func mustEncode(t *testing.T, m *wire.Message) []byte {
	b, err := wire.Encode(m)
	if err != nil {
		t.Error(err)
	}
	return b
}
