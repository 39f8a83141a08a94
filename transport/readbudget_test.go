package transport

import (
	"bytes"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/tandemhq/tandem/internal/testenv"
	"github.com/tandemhq/tandem/transport/wire"
)

// startFrame writes the head of a masked binary frame of n bytes, then
// part of its payload; the rest never comes unless the test drips it.
func startFrame(t *testing.T, ws *websocket.Conn, n int, part []byte) {
	t.Helper()
	head := []byte{0x82, 0x80 | 127, 0, 0, 0, 0, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n), 0, 0, 0, 0}
	if _, err := ws.UnderlyingConn().Write(append(head, part...)); err != nil {
		t.Fatal(err)
	}
}

// heapInUse is the live heap after a collection.
func heapInUse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// Connections that each start a large frame and stop part way made the
// node hold what they sent outside every budget, up to the whole frame
// each. Their bytes are charged to the read budget as they arrive, before
// they are held: the node holds no more than the budget (and what they
// sent), the budget says what it holds, and a peer with a small message
// is served meanwhile.
func TestAFrameIsChargedToTheReadBudgetAsItArrives(t *testing.T) {
	const (
		budget  = 8 << 20
		drips   = 8
		partLen = 1<<20 + 512<<10 // 12 MiB in all: more than the budget
	)
	s := newTestServer(t, Config{MaxMessageBytes: 4 << 20, ReadBudgetBytes: budget, PingInterval: time.Minute})
	held := func() int64 { return s.metrics.readBuffers.Load() }
	peak := watchPeak(t, &s.metrics.readBuffers)
	part := bytes.Repeat([]byte{0x5a}, partLen)
	conns := dialJoined(t, s, drips)
	before := heapInUse()
	for _, ws := range conns {
		startFrame(t, ws, 4<<20, part)
	}
	// The readers fill the budget (a chunk's size short of it, at
	// most), and the rest of what was sent waits in the sockets.
	testenv.WaitFor(t, "the read budget charged with the frames' bytes", func() bool {
		return held() >= budget-maxChunk
	})
	slack := int64(drips * 2 * readChunk) // each message's first chunk and its socket's, which never wait
	if p := peak(); p > budget+slack {
		t.Errorf("the readers held %d bytes, over the budget of %d (+%d)", p, budget, slack)
	}
	grew := heapInUse() - before
	if grew > held()+1<<20 {
		t.Errorf("the heap grew by %d bytes while the budget counts %d held", grew, held())
	}
	t.Logf("%d connections sent %d bytes each of a 4 MiB frame: %d bytes held (peak %d, heap +%d), budget %d",
		drips, partLen, held(), peak(), grew, budget)

	// A peer with small messages is served meanwhile.
	w := newSyncer(t, s, dial(t, s.url), "honest")
	w.set("title", "served")
	w.sync(wire.TypeSync)
	if len(w.errs) > 0 {
		t.Fatalf("the honest peer got errors: %v", w.errs)
	}

	for _, ws := range conns {
		ws.Close()
	}
	testenv.WaitFor(t, "the frames' bytes given back", func() bool { return s.Connections() == 1 && held() == 0 })
}

// drip writes a byte of the frame ws started every 20 ms, the workload of
// a peer that keeps its socket alive, until the server closes it or the
// test ends.
func drip(t *testing.T, ws *websocket.Conn) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := ws.UnderlyingConn().Write([]byte{0}); err != nil {
					return
				}
			}
		}
	}()
	t.Cleanup(func() { close(stop); wg.Wait() })
}

// A frame dripped a byte at a time kept the node's bytes for as long as
// the drip went on: the ping saw it alive. It is cut off at its deadline
// and what it held is given back.
func TestAFrameDrippedPastItsDeadlineCloses(t *testing.T) {
	s := newTestServer(t, Config{MaxMessageBytes: 1 << 20, MessageReadTimeout: time.Second, PingInterval: time.Minute})
	ws := dial(t, s.url)
	join(t, ws, "drip")
	startFrame(t, ws, 1<<20, make([]byte, 64<<10))
	drip(t, ws)
	start := time.Now()
	expectClose(t, ws, ReasonReadTimeout.Code)
	t.Logf("closed %v after the frame began", time.Since(start).Round(time.Millisecond))
	testenv.WaitFor(t, "the connection finished and its bytes given back", func() bool {
		return s.Connections() == 0 && s.metrics.readBuffers.Load() == 0
	})
}

// A reader that needs more than the budget has left waits, and is closed
// with 1013 (try again later) if none comes back in time; the connections
// holding the budget are not the ones closed. The wait is three ping
// intervals; the holders, which drip a byte every 20 ms and answer no
// ping, are silent only past three and a half: the interval is long
// enough that a loaded machine's pauses do not make them so, and so free
// the budget before the late reader gives up. The late reader comes once
// the holders hold all they will for what they sent (the chunks their
// parts fill, the last with room for 35 KiB of drip): had it come sooner
// it could take the room a holder's last chunk needed, and the holder,
// not it, would wait and be closed.
func TestAReaderTheBudgetCannotServeIsToldToComeBack(t *testing.T) {
	const part = 1<<20 - 64<<10
	s := newTestServer(t, Config{MaxMessageBytes: 1 << 20, ReadBudgetBytes: 2 << 20, MaxEphemeralBytes: 1 << 20, PingInterval: time.Second})
	var each int64 // what a holder's chunks come to
	for total := int64(0); total < part; {
		n := chunkSize(total, 1<<20-total, 1<<20)
		each, total = each+n, total+n
	}
	holders := dialJoined(t, s, 2)
	for _, ws := range holders {
		startFrame(t, ws, 1<<20, make([]byte, part))
		drip(t, ws)
	}
	testenv.WaitFor(t, "the holders' chunks charged", func() bool { return s.metrics.readBuffers.Load() >= 2*each })
	late := dial(t, s.url)
	join(t, late, "late")
	sendEphemeral(t, late, "late", 1, make([]byte, 512<<10))
	expectClose(t, late, ReasonReadBusy.Code)
	// The server counts the late connection until its close is done,
	// which may be just after the client read the close frame.
	testenv.WaitFor(t, "the late connection gone", func() bool { return s.Connections() <= 2 })
	if n := s.Connections(); n != 2 {
		t.Fatalf("%d connections open, want the two holding the budget", n)
	}
	for _, ws := range holders {
		ws.Close()
	}
	testenv.WaitFor(t, "every connection finished, the budget given back", func() bool {
		return s.Connections() == 0 && s.metrics.readBuffers.Load() == 0
	})
}

// A chunk late in a long message waits for room as long as the first
// does: each wait is timed from its own start. It was timed from the
// message's, so a message older than three ping intervals whose next
// chunk found the budget full for a moment was closed at once (1013).
func TestALateChunkOfALongMessageWaitsForRoom(t *testing.T) {
	const interval = 200 * time.Millisecond
	s := newTestServer(t, Config{MaxMessageBytes: 256 << 10, ReadBudgetBytes: 1 << 20, MessageReadTimeout: time.Minute, PingInterval: interval})
	held := func() int64 { return s.metrics.readBuffers.Load() }
	long := dialJoined(t, s, 1)[0]
	msg, err := wire.Encode(&wire.Message{Type: wire.TypeEphemeral, SenderID: "p0", TargetID: serverID,
		DocumentID: testDoc, SessionID: "session-p0", Count: 1, Data: make([]byte, 16<<10)})
	if err != nil {
		t.Fatal(err)
	}
	write := func(b []byte) {
		t.Helper()
		if _, err := long.UnderlyingConn().Write(b); err != nil {
			t.Fatal(err)
		}
	}
	// A masked binary frame (its key zero) and 8 KiB of the message: two
	// 4 KiB chunks filled and a third made.
	write(append([]byte{0x82, 0x80 | 126, byte(len(msg) >> 8), byte(len(msg)), 0, 0, 0, 0}, msg[:8<<10]...))
	testenv.WaitFor(t, "the three chunks charged, the socket's buffer given back", func() bool { return held() == 12<<10 })
	// The message goes on, a byte every 20 ms, for four ping intervals.
	sent := 8 << 10
	for start := time.Now(); time.Since(start) < 4*interval; sent++ {
		write(msg[sent : sent+1])
		time.Sleep(20 * time.Millisecond)
	}
	// Other readers hold the rest of the budget; the message's next chunk
	// must wait for it.
	others := s.budget.limit - held()
	s.budget.charge(others)
	write(msg[sent : 12<<10+1])
	sent = 12<<10 + 1
	testenv.WaitFor(t, "the next chunk waiting for room", func() bool { return s.budget.waiting.Load() == 1 })
	s.budget.release(others)
	write(msg[sent:])
	send(t, long, &wire.Message{Type: wire.TypeHeartbeat, SenderID: "p0", TargetID: serverID, Seq: 7})
	long.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		_, b, err := long.ReadMessage()
		if err != nil {
			t.Fatalf("the long message's connection ended (%v), want it served", err)
		}
		if m, err := wire.Decode(b); err == nil && m.Type == wire.TypeHeartbeatAck && m.Seq == 7 {
			return
		}
	}
}
