package transport

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tandemhq/tandem/internal/testenv"
	"github.com/tandemhq/tandem/transport/wire"
)

// clientFrame is one masked frame as a client sends it.
func clientFrame(op byte, fin bool, payload []byte) []byte {
	b0 := op
	if fin {
		b0 |= 0x80
	}
	out := []byte{b0}
	switch n := len(payload); {
	case n <= 125:
		out = append(out, 0x80|byte(n))
	case n <= 0xffff:
		out = append(out, 0x80|126, byte(n>>8), byte(n))
	default:
		out = append(out, 0x80|127, 0, 0, 0, 0, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	key := []byte{0x12, 0x34, 0x56, 0x78}
	out = append(out, key...)
	for i, c := range payload {
		out = append(out, c^key[i%4])
	}
	return out
}

func heartbeatFrame(t *testing.T, peer string, seq uint64) []byte {
	t.Helper()
	b, err := wire.Encode(&wire.Message{Type: wire.TypeHeartbeat, SenderID: peer, TargetID: serverID, Seq: seq})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// dialJoined opens n connections to s, joined as p0, p1, …
func dialJoined(t *testing.T, s *testServer, n int) []*websocket.Conn {
	t.Helper()
	conns := make([]*websocket.Conn, n)
	for i := range conns {
		conns[i] = dial(t, s.url)
		join(t, conns[i], fmt.Sprint("p", i))
	}
	return conns
}

// heartbeatEach sends a heartbeat numbered seq on each connection that
// dialJoined opened, and waits for its acknowledgement.
func heartbeatEach(t *testing.T, conns []*websocket.Conn, seq uint64) {
	t.Helper()
	for i, ws := range conns {
		send(t, ws, &wire.Message{Type: wire.TypeHeartbeat, SenderID: fmt.Sprint("p", i), TargetID: serverID, Seq: seq})
		if m := recv(t, ws); m.Type != wire.TypeHeartbeatAck || m.Seq != seq {
			t.Fatalf("p%d: got %s %d, want the ack of %d", i, m.Type, m.Seq, seq)
		}
	}
}

// Idle connections hold no goroutine: they park, and each wakes for what
// it is sent and parks again.
func TestIdleConnectionsParkWithoutAGoroutine(t *testing.T) {
	s := newTestServer(t, Config{})
	if s.poller == nil {
		t.Fatal("no poller: connections cannot park here")
	}
	const n = 50
	before := runtime.NumGoroutine()
	conns := dialJoined(t, s, n)
	parked := func() float64 { return testutil.ToFloat64(s.metrics.parked) }
	testenv.WaitFor(t, "every connection parked", func() bool { return parked() == n })
	if grown := runtime.NumGoroutine() - before; grown >= n/2 {
		t.Errorf("%d goroutines more for %d parked connections", grown, n)
	}
	for round := uint64(1); round <= 3; round++ {
		heartbeatEach(t, conns, round)
		testenv.WaitFor(t, "every connection parked again", func() bool { return parked() == n })
	}
	for _, ws := range conns {
		ws.Close()
	}
	testenv.WaitFor(t, "closed connections finished", func() bool { return s.Connections() == 0 })
	if p := parked(); p != 0 {
		t.Errorf("%v connections still counted parked after closing", p)
	}
}

// The reader sees frames as gorilla does however the bytes arrive: a
// message sent a byte at a time, a fragmented one with a ping and a pong
// between its fragments, and a ping answered with its payload.
func TestFramesArriveWholeHoweverTheBytesDo(t *testing.T) {
	s := newTestServer(t, Config{})
	ws := dial(t, s.url)
	join(t, ws, "a")
	pongs := make(chan string, 4)
	ws.SetPongHandler(func(p string) error { pongs <- p; return nil })
	raw := ws.UnderlyingConn()

	// One byte per write.
	for _, b := range clientFrame(0x2, true, heartbeatFrame(t, "a", 1)) {
		if _, err := raw.Write([]byte{b}); err != nil {
			t.Fatal(err)
		}
	}
	if m := recv(t, ws); m.Type != wire.TypeHeartbeatAck || m.Seq != 1 {
		t.Fatalf("got %s %d, want the ack of a message written a byte at a time", m.Type, m.Seq)
	}

	// Fragments, with control frames between them, in one write.
	msg := heartbeatFrame(t, "a", 2)
	var stream []byte
	stream = append(stream, clientFrame(0x2, false, msg[:3])...)
	stream = append(stream, clientFrame(0x9, true, []byte("between"))...)
	stream = append(stream, clientFrame(0xa, true, nil)...)
	stream = append(stream, clientFrame(0x0, false, msg[3:7])...)
	stream = append(stream, clientFrame(0x0, true, msg[7:])...)
	stream = append(stream, clientFrame(0x9, true, []byte("after"))...)
	if _, err := raw.Write(stream); err != nil {
		t.Fatal(err)
	}
	if m := recv(t, ws); m.Type != wire.TypeHeartbeatAck || m.Seq != 2 {
		t.Fatalf("got %s %d, want the ack of the fragmented message", m.Type, m.Seq)
	}
	// The pongs were queued before the answer to a later heartbeat, and
	// gorilla hands them to the handler while reading up to it.
	send(t, ws, &wire.Message{Type: wire.TypeHeartbeat, SenderID: "a", TargetID: serverID, Seq: 3})
	if m := recv(t, ws); m.Seq != 3 {
		t.Fatalf("got %s %d, want the ack of heartbeat 3", m.Type, m.Seq)
	}
	for _, want := range []string{"between", "after"} {
		select {
		case got := <-pongs:
			if got != want {
				t.Fatalf("pong %q, want %q", got, want)
			}
		default:
			t.Fatalf("no pong %q", want)
		}
	}
}

// The start of a frame that has not all come, the first bytes of a
// header or a ping without the rest of its payload, waits in the
// connection: no read buffer is held for it and, with parking, no reader,
// however long the rest takes. The frame is taken whole once it comes.
// Each cut comes alone (the poller reads it) and after a message (the
// reader started for the message finds it).
func TestTheStartOfAFrameHoldsNoBuffer(t *testing.T) {
	type cut struct {
		ping  bool // a ping with the largest payload, then a message; else a message
		at    int  // bytes sent first
		after bool // sent after a whole message
	}
	var cuts []cut
	for _, after := range []bool{false, true} {
		for _, at := range []int{1, 2, 4, 6, 60, 130} { // in the header, at its end, in the payload, a byte short
			cuts = append(cuts, cut{ping: true, at: at, after: after})
		}
		for _, at := range []int{1, 2} {
			cuts = append(cuts, cut{at: at, after: after})
		}
	}
	payload := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i%26)}, 125) }
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprint("KeepReaders=", keep), func(t *testing.T) {
			s := newTestServer(t, Config{KeepReaders: keep})
			conns := dialJoined(t, s, len(cuts))
			pongs := make([]chan string, len(cuts))
			rests := make([][]byte, len(cuts))
			before := monotonic()
			for i, ws := range conns {
				pongs[i] = make(chan string, 1)
				ws.SetPongHandler(func(p string) error { pongs[i] <- p; return nil })
				c := cuts[i]
				var frames []byte
				if c.after {
					frames = clientFrame(websocket.BinaryMessage, true, heartbeatFrame(t, fmt.Sprint("p", i), 1))
				}
				first := len(frames)
				if c.ping {
					frames = append(frames, clientFrame(websocket.PingMessage, true, payload(i))...)
				}
				frames = append(frames, clientFrame(websocket.BinaryMessage, true, heartbeatFrame(t, fmt.Sprint("p", i), 2))...)
				if _, err := ws.UnderlyingConn().Write(frames[:first+c.at]); err != nil {
					t.Fatal(err)
				}
				rests[i] = frames[first+c.at:]
			}
			testenv.WaitFor(t, "the first bytes read", func() bool {
				s.mu.Lock()
				defer s.mu.Unlock()
				for c := range s.conns {
					if c.fr.lastRead.Load() <= before {
						return false
					}
				}
				return true
			})
			for i, ws := range conns {
				if cuts[i].after {
					if m := recv(t, ws); m.Type != wire.TypeHeartbeatAck || m.Seq != 1 {
						t.Fatalf("%+v: got %s %d, want the ack of the message before the cut", cuts[i], m.Type, m.Seq)
					}
				}
			}
			testenv.WaitFor(t, "no read buffer held", func() bool { return s.metrics.readBuffers.Load() == 0 })
			if !keep {
				testenv.WaitFor(t, "every connection parked", func() bool { return testutil.ToFloat64(s.metrics.parked) == float64(len(cuts)) })
			}
			for i, ws := range conns {
				if _, err := ws.UnderlyingConn().Write(rests[i]); err != nil {
					t.Fatal(err)
				}
				if m := recv(t, ws); m.Type != wire.TypeHeartbeatAck || m.Seq != 2 {
					t.Fatalf("%+v: got %s %d, want the ack of the message after the cut", cuts[i], m.Type, m.Seq)
				}
				if !cuts[i].ping {
					continue
				}
				select {
				case got := <-pongs[i]:
					if got != string(payload(i)) {
						t.Fatalf("%+v: pong %q, want %q", cuts[i], got, payload(i))
					}
				default:
					t.Fatalf("%+v: no pong for the ping", cuts[i])
				}
			}
		})
	}
}

// A control frame the reader does not take (a ping over 125 bytes) is
// gorilla's to refuse, and the connection closes as broken.
func TestAnOversizedPingIsRefused(t *testing.T) {
	s := newTestServer(t, Config{})
	ws := dial(t, s.url)
	join(t, ws, "a")
	if _, err := ws.UnderlyingConn().Write(clientFrame(0x9, true, bytes.Repeat([]byte{1}, 200))); err != nil {
		t.Fatal(err)
	}
	expectClose(t, ws, websocket.CloseProtocolError)
}

// Connections that open, talk, park and close, many at once and many
// times over, all finish: none is left parked or open.
func TestParkingUnderChurn(t *testing.T) {
	s := newTestServer(t, Config{})
	for round := range 20 {
		done := make(chan struct{})
		for i := range 10 {
			go func() {
				defer func() { done <- struct{}{} }()
				ws := dial(t, s.url)
				defer ws.Close()
				peer := fmt.Sprintf("r%d-%d", round, i)
				join(t, ws, peer)
				send(t, ws, &wire.Message{Type: wire.TypeHeartbeat, SenderID: peer, TargetID: serverID, Seq: 1})
				recv(t, ws)
			}()
		}
		for range 10 {
			<-done
		}
	}
	testenv.WaitFor(t, "every connection finished", func() bool { return s.Connections() == 0 })
	if p := testutil.ToFloat64(s.metrics.parked); p != 0 {
		t.Errorf("%v connections counted parked after all closed", p)
	}
}

// A reader waiting on a quiet socket holds no read buffer, even one that
// keeps its goroutine: the buffer is taken when bytes arrive and given
// back once they are read.
func TestAQuietReaderHoldsNoBuffer(t *testing.T) {
	s := newTestServer(t, Config{KeepReaders: true})
	const n = 20
	conns := dialJoined(t, s, n)
	held := func() int64 { return s.metrics.readBuffers.Load() }
	for round := uint64(1); round <= 3; round++ {
		heartbeatEach(t, conns, round)
		testenv.WaitFor(t, "no reader holding a buffer", func() bool { return held() == 0 })
	}
	for _, ws := range conns {
		ws.Close()
	}
	testenv.WaitFor(t, "closed connections finished", func() bool { return s.Connections() == 0 })
	if b := held(); b != 0 {
		t.Errorf("%d bytes of read buffers held after every connection closed", b)
	}
}

// A connection that ends with bytes it will never read, a frame cut short
// or frames sent after what closed it, gives its read buffer back.
func TestAConnectionEndingMidFrameGivesBackItsBuffer(t *testing.T) {
	s := newTestServer(t, Config{MessageRate: 5, MessageBurst: 5})
	cut := dial(t, s.url)
	join(t, cut, "cut")
	if _, err := cut.UnderlyingConn().Write([]byte{0x82}); err != nil { // one byte of a header
		t.Fatal(err)
	}
	flood := dial(t, s.url)
	join(t, flood, "flood")
	var frames []byte
	for i := range 200 {
		frames = append(frames, clientFrame(websocket.BinaryMessage, true, heartbeatFrame(t, "flood", uint64(i+1)))...)
	}
	if _, err := flood.UnderlyingConn().Write(frames); err != nil {
		t.Fatal(err)
	}
	expectClose(t, flood, ReasonFlood.Code)
	cut.UnderlyingConn().Close()
	testenv.WaitFor(t, "both connections finished", func() bool { return s.Connections() == 0 })
	if b := s.metrics.readBuffers.Load(); b != 0 {
		t.Errorf("%d bytes of read buffers held after every connection finished", b)
	}
}

// What a client passes back to a parked connection, and its pongs, the
// poller reads and drops itself: no reader starts for them. A message of
// the client's own starts one.
func TestWhatAParkedConnectionIsPassedBackStartsNoReader(t *testing.T) {
	s := newTestServer(t, Config{})
	listener := dial(t, s.url)
	join(t, listener, "l")
	sendEphemeral(t, listener, "l", 1, []byte{0xa0}) // in the document
	testenv.WaitFor(t, "the listener in the document", func() bool { return s.hub.Stats().Peers == 1 })
	movers := dialJoined(t, s, 4)
	for i, ws := range movers {
		for n := uint64(1); n <= 4; n++ {
			sendEphemeral(t, ws, fmt.Sprint("p", i), n, []byte{0x01})
		}
	}
	var got []*wire.Message
	for range 4 * len(movers) {
		m := recv(t, listener)
		if m.Type != wire.TypeEphemeral {
			t.Fatalf("the listener got %+v", m)
		}
		got = append(got, m)
	}
	parked := func() float64 { return testutil.ToFloat64(s.metrics.parked) }
	testenv.WaitFor(t, "every connection parked", func() bool { return parked() == float64(1+len(movers)) })
	started := testutil.ToFloat64(s.metrics.woken)
	for _, m := range got {
		passBack(t, listener, m)
	}
	if err := listener.WriteControl(websocket.PongMessage, nil, time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	dropped := func() float64 { return testutil.ToFloat64(s.metrics.droppedForeign) }
	testenv.WaitFor(t, "all passed back dropped", func() bool { return dropped() == float64(len(got)) })
	if n := testutil.ToFloat64(s.metrics.woken) - started; n != 0 {
		t.Errorf("%v readers started for what was passed back", n)
	}
	heartbeatEach(t, []*websocket.Conn{listener}, 1)
	if n := testutil.ToFloat64(s.metrics.woken) - started; n != 1 {
		t.Errorf("%v readers started for a heartbeat, want 1", n)
	}
}

// A parked connection sent more than the poller reads at once is read to
// the end: it parks again only with nothing left on its socket. Its frames
// end where the chunks it is read in end, so that the reader empties its
// buffer at each chunk's end with the rest still on the socket.
func TestAParkedConnectionReadsAllThatArrivesAtOnce(t *testing.T) {
	s := newTestServer(t, Config{MessageRate: 1e6, MessageBurst: 1e6, SendQueue: 4096})
	// A peer id and seqs of one width that make each heartbeat's frame
	// 128 bytes: 32 of them a chunk.
	const frameSize = 128
	peer, base := "", uint64(0)
	for _, b := range []uint64{300, 70000} { // seqs of 3 bytes of CBOR, or 5
		for p := "a"; len(p) < 100 && base == 0; p += "a" {
			if len(clientFrame(0x2, true, heartbeatFrame(t, p, b))) == frameSize {
				peer, base = p, b
			}
		}
	}
	if base == 0 || readChunk%frameSize != 0 {
		t.Fatalf("no heartbeat frame of %d bytes, or a read chunk of %d not a multiple of it", frameSize, readChunk)
	}
	ws := dial(t, s.url)
	join(t, ws, peer)
	for round := range 3 {
		testenv.WaitFor(t, "the connection parked", func() bool { return testutil.ToFloat64(s.metrics.parked) == 1 })
		const n = 4 * maxDrainReads * readChunk / frameSize
		first := base + uint64(round*n) // the same size for every seq
		var stream []byte
		for i := range uint64(n) {
			stream = append(stream, clientFrame(0x2, true, heartbeatFrame(t, peer, first+i))...)
		}
		if _, err := ws.UnderlyingConn().Write(stream); err != nil {
			t.Fatal(err)
		}
		for i := range uint64(n) {
			if m := recv(t, ws); m.Type != wire.TypeHeartbeatAck || m.Seq != first+i {
				t.Fatalf("round %d: got %s %d, want the ack of %d", round, m.Type, m.Seq, first+i)
			}
		}
	}
}

// Messages that arrive while a reader runs, each in a write of its own,
// are read before it parks: many connections sending at once, none
// waiting for its answers, all answered.
func TestWhatArrivesWhileAReaderRunsIsRead(t *testing.T) {
	s := newTestServer(t, Config{MessageRate: 1e6, MessageBurst: 1e6, SendQueue: 1024})
	conns := dialJoined(t, s, 8)
	const n = 300
	errs := make(chan error, 2*len(conns))
	for i, ws := range conns {
		peer := fmt.Sprint("p", i)
		go func() {
			for seq := uint64(1); seq <= n; seq++ {
				b, _ := wire.Encode(&wire.Message{Type: wire.TypeHeartbeat, SenderID: peer, TargetID: serverID, Seq: seq})
				if err := ws.WriteMessage(websocket.BinaryMessage, b); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
		go func() {
			for seq := uint64(1); seq <= n; seq++ {
				ws.SetReadDeadline(time.Now().Add(10 * time.Second))
				_, b, err := ws.ReadMessage()
				if err != nil {
					errs <- fmt.Errorf("%s: %w", peer, err)
					return
				}
				if m, err := wire.Decode(b); err != nil || m.Type != wire.TypeHeartbeatAck || m.Seq != seq {
					errs <- fmt.Errorf("%s: got %+v (%v), want the ack of %d", peer, m, err, seq)
					return
				}
			}
			errs <- nil
		}()
	}
	for range 2 * len(conns) {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
