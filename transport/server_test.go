package transport

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/automerge/automerge-go"
	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/tandemhq/tandem/doc"
	"github.com/tandemhq/tandem/doc/guard"
	"github.com/tandemhq/tandem/doc/store"
	"github.com/tandemhq/tandem/internal/testenv"
	"github.com/tandemhq/tandem/transport/wire"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const (
	testDoc   = "2gzyVEWRbEhwBcRvStKvD3gBE5pp"
	serverID  = "tandem-test"
	storageID = "8f1e4e1c-5a7e-4c1b-9a43-2c1f0d3b6a55"
)

type testServer struct {
	*Server
	url string
	hub *doc.Hub
}

func newTestServer(t *testing.T, cfg Config) *testServer {
	t.Helper()
	st, err := store.OpenBolt(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() }) // after the hub's Close: registered before it
	return newTestServerOn(t, cfg, st)
}

// newTestServerOn is newTestServer on a store of the test's choosing.
func newTestServerOn(t *testing.T, cfg Config, st store.Store) *testServer {
	t.Helper()
	return newTestServerHub(t, cfg, doc.Config{Store: st})
}

// newTestServerHub is newTestServerOn with a hub configured by the test.
func newTestServerHub(t *testing.T, cfg Config, hubCfg doc.Config) *testServer {
	t.Helper()
	logger := testenv.QuietLogger()
	hubCfg.Logger = logger
	hub, err := doc.NewHub(hubCfg)
	if err != nil {
		t.Fatal(err)
	}
	go hub.Run(context.Background()) // until hub.Close
	cfg.Documents = hub
	cfg.PeerID = serverID
	cfg.StorageID = storageID
	cfg.Logger = logger
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s)
	t.Cleanup(func() {
		s.Close(context.Background())
		hs.Close()
		hub.Close(context.Background())
	})
	return &testServer{Server: s, url: "ws" + strings.TrimPrefix(hs.URL, "http"), hub: hub}
}

func dial(t *testing.T, url string) *websocket.Conn {
	t.Helper()
	ws, _, err := websocket.DefaultDialer.Dial(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	return ws
}

func send(t *testing.T, ws *websocket.Conn, m *wire.Message) {
	t.Helper()
	b, err := wire.Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := ws.WriteMessage(websocket.BinaryMessage, b); err != nil {
		t.Fatal(err)
	}
}

func recv(t *testing.T, ws *websocket.Conn) *wire.Message {
	t.Helper()
	ws.SetReadDeadline(time.Now().Add(5 * time.Second))
	mt, b, err := ws.ReadMessage()
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if mt != websocket.BinaryMessage {
		t.Fatalf("server sent frame type %d", mt)
	}
	m, err := wire.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// recvError reads one message and checks it is an error mentioning text.
func recvError(t *testing.T, ws *websocket.Conn, text string) {
	t.Helper()
	m := recv(t, ws)
	if m.Type != wire.TypeError || !strings.Contains(m.ErrorMessage, text) {
		t.Fatalf("got %s %q, want an error containing %q", m.Type, m.ErrorMessage, text)
	}
}

// expectClose reads until the server closes and checks the close code.
func expectClose(t *testing.T, ws *websocket.Conn, code int) {
	t.Helper()
	ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		_, _, err := ws.ReadMessage()
		if err == nil {
			continue
		}
		var ce *websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != code {
			t.Fatalf("connection ended with %v, want close code %d", err, code)
		}
		return
	}
}

func join(t *testing.T, ws *websocket.Conn, peerID string) {
	t.Helper()
	send(t, ws, &wire.Message{Type: wire.TypeJoin, SenderID: peerID,
		PeerMetadata: &wire.PeerMetadata{IsEphemeral: true}, SupportedProtocolVersions: []string{"1"}})
	m := recv(t, ws)
	if m.Type != wire.TypePeer {
		t.Fatalf("got %s %q, want peer", m.Type, m.ErrorMessage)
	}
}

func TestHandshake(t *testing.T) {
	s := newTestServer(t, Config{})
	ws := dial(t, s.url)
	send(t, ws, &wire.Message{Type: wire.TypeJoin, SenderID: "alice", SupportedProtocolVersions: []string{"1"}})
	m := recv(t, ws)
	if m.Type != wire.TypePeer || m.SenderID != serverID || m.TargetID != "alice" ||
		m.SelectedProtocolVersion != "1" || m.PeerMetadata == nil ||
		m.PeerMetadata.StorageID != storageID || m.PeerMetadata.IsEphemeral {
		t.Fatalf("unexpected peer message %+v (metadata %+v)", m, m.PeerMetadata)
	}
}

func TestUnsupportedVersionIsRefused(t *testing.T) {
	s := newTestServer(t, Config{})
	ws := dial(t, s.url)
	send(t, ws, &wire.Message{Type: wire.TypeJoin, SenderID: "alice", SupportedProtocolVersions: []string{"2"}})
	recvError(t, ws, "unsupported protocol version")
	expectClose(t, ws, ReasonUnsupported.Code)
}

// TestBadInputGetsErrorAndCloseCode sends each kind of bad frame on a
// connection of its own: the client is told why in an error message, and
// a frame that breaks the protocol then closes the connection with the code
// that names the fault; a fault scoped to one document leaves it open.
func TestBadInputGetsErrorAndCloseCode(t *testing.T) {
	s := newTestServer(t, Config{})
	deep := func() (int, []byte) {
		b := []byte{0xa2, 0x64, 't', 'y', 'p', 'e', 0x64, 's', 'y', 'n', 'c', 0x61, 'x'}
		return websocket.BinaryMessage, append(append(b, bytes.Repeat([]byte{0x81}, 5000)...), 0)
	}
	cases := []struct {
		name   string
		joined bool
		frame  func() (int, []byte)
		want   string
		code   int // 0: the connection stays open
		reason string
	}{
		{"sync before join", false, frame(&wire.Message{Type: wire.TypeSync, SenderID: "alice", DocumentID: testDoc, Data: []byte{0x42}}), "send join before", websocket.CloseProtocolError, errNotJoined},
		{"text frame", true, func() (int, []byte) { return websocket.TextMessage, []byte(`{"type":"sync"}`) }, "binary frames", websocket.CloseUnsupportedData, errTextFrame},
		{"text frame before join", false, func() (int, []byte) { return websocket.TextMessage, []byte("hello") }, "binary frames", websocket.CloseUnsupportedData, errTextFrame},
		{"garbage", true, func() (int, []byte) { return websocket.BinaryMessage, []byte{0xff, 0x13, 0x37} }, "malformed", websocket.CloseInvalidFramePayloadData, errMalformed},
		{"truncated CBOR", true, func() (int, []byte) {
			b, _ := wire.Encode(&wire.Message{Type: wire.TypeSync, SenderID: "alice", DocumentID: testDoc, Data: []byte{0x42, 1, 2, 3}})
			return websocket.BinaryMessage, b[:len(b)-3]
		}, "malformed", websocket.CloseInvalidFramePayloadData, errMalformed},
		{"empty frame", true, func() (int, []byte) { return websocket.BinaryMessage, nil }, "malformed", websocket.CloseInvalidFramePayloadData, errMalformed},
		{"deep nesting", true, deep, "malformed", websocket.CloseInvalidFramePayloadData, errMalformed},
		{"sync data that is not automerge", true, frame(&wire.Message{Type: wire.TypeSync, SenderID: "alice", DocumentID: testDoc, Data: []byte("hello")}), "not an automerge sync message", websocket.CloseInvalidFramePayloadData, errBadSync},
		{"sync without data", true, frame(&wire.Message{Type: wire.TypeSync, SenderID: "alice", DocumentID: testDoc}), "no data", websocket.CloseProtocolError, errInvalid},
		{"ephemeral without a clock", true, frame(&wire.Message{Type: wire.TypeEphemeral, SenderID: "alice", DocumentID: testDoc, Data: []byte{0xa0}}), "invalid ephemeral", websocket.CloseProtocolError, errInvalid},
		{"peer message from a client", true, frame(&wire.Message{Type: wire.TypePeer, SenderID: "alice"}), "invalid peer", websocket.CloseProtocolError, errInvalid},
		{"join as another peer", true, frame(&wire.Message{Type: wire.TypeJoin, SenderID: "mallory"}), "joined as", websocket.CloseProtocolError, errRejoin},
		{"forged sender", true, frame(&wire.Message{Type: wire.TypeSync, SenderID: "mallory", DocumentID: testDoc, Data: []byte{0x42}}), "does not match", websocket.ClosePolicyViolation, errWrongSender},
		{"unknown type", true, frame(&wire.Message{Type: "teleport", SenderID: "alice"}), "unknown message type", 0, errInvalid},
		{"invalid document id", true, frame(&wire.Message{Type: wire.TypeSync, SenderID: "alice", DocumentID: "../../etc", Data: []byte{0x42}}), "invalid document id", 0, errInvalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := testutil.ToFloat64(s.metrics.errors.WithLabelValues(c.reason))
			ws := dial(t, s.url)
			if c.joined {
				join(t, ws, "alice")
			}
			mt, b := c.frame()
			if err := ws.WriteMessage(mt, b); err != nil {
				t.Fatal(err)
			}
			recvError(t, ws, c.want)
			if n := testutil.ToFloat64(s.metrics.errors.WithLabelValues(c.reason)) - before; n != 1 {
				t.Errorf("tandem_protocol_errors_total{reason=%q} rose by %v, want 1", c.reason, n)
			}
			if c.code != 0 {
				expectClose(t, ws, c.code)
				return
			}
			// Still served: a repeated join is answered (and is the next message).
			join(t, ws, "alice")
		})
	}
	// Gossip of remote heads is accepted without an answer or an error.
	ws := dial(t, s.url)
	join(t, ws, "bob")
	send(t, ws, &wire.Message{Type: wire.TypeRemoteSubscriptionChange, SenderID: "bob", TargetID: serverID})
	send(t, ws, &wire.Message{Type: wire.TypeRemoteHeadsChanged, SenderID: "bob", TargetID: serverID, DocumentID: testDoc})
	join(t, ws, "bob")
}

// A frame sent after the one that broke the protocol is not handled: the
// connection ends at the violation.
func TestNothingIsHandledAfterAViolation(t *testing.T) {
	s := newTestServer(t, Config{})
	ws := dial(t, s.url)
	join(t, ws, "alice")
	if err := ws.WriteMessage(websocket.BinaryMessage, []byte{0xff}); err != nil {
		t.Fatal(err)
	}
	send(t, ws, &wire.Message{Type: wire.TypeJoin, SenderID: "alice", SupportedProtocolVersions: []string{"1"}})
	recvError(t, ws, "malformed")
	expectClose(t, ws, websocket.CloseInvalidFramePayloadData) // and no peer message before it
}

func frame(m *wire.Message) func() (int, []byte) {
	return func() (int, []byte) {
		b, err := wire.Encode(m)
		if err != nil {
			panic(err)
		}
		return websocket.BinaryMessage, b
	}
}

func TestRejoinReplacesOldSocket(t *testing.T) {
	s := newTestServer(t, Config{})
	old := dial(t, s.url)
	join(t, old, "alice")
	fresh := dial(t, s.url)
	join(t, fresh, "alice")
	expectClose(t, old, ReasonReplaced.Code)
	// The new socket is the peer now: its request is answered, as the
	// stock server answers it: its own empty sync, then doc-unavailable.
	send(t, fresh, &wire.Message{Type: wire.TypeRequest, SenderID: "alice", DocumentID: testDoc, Data: emptySyncMessage(t)})
	m := recv(t, fresh)
	if m.Type == wire.TypeSync && m.TargetID == "alice" {
		m = recv(t, fresh)
	}
	if m.Type != wire.TypeDocUnavailable || m.TargetID != "alice" {
		t.Fatalf("got %s for %s, want doc-unavailable", m.Type, m.TargetID)
	}
}

func TestOversizedFrameCloses(t *testing.T) {
	s := newTestServer(t, Config{MaxMessageBytes: 4096})
	ws := dial(t, s.url)
	join(t, ws, "alice")
	if err := ws.WriteMessage(websocket.BinaryMessage, make([]byte, 8192)); err != nil {
		t.Fatal(err)
	}
	expectClose(t, ws, websocket.CloseMessageTooBig)
}

func TestSilentPeerIsClosedAfterMissedPongs(t *testing.T) {
	// A silent peer goes after 3.5 intervals (700 ms here); a live one
	// whose pong is held up that long by a busy machine would be cut too,
	// so the interval leaves the live client a generous margin.
	s := newTestServer(t, Config{PingInterval: 200 * time.Millisecond})
	ws := dial(t, s.url)
	ws.SetPingHandler(func(string) error { return nil }) // a frozen client: no pongs
	join(t, ws, "frozen")
	expectClose(t, ws, ReasonPingTimeout.Code)

	// A client that answers pings stays connected across many intervals.
	live := dial(t, s.url)
	join(t, live, "live")
	done := make(chan error, 1)
	go func() {
		// Reading makes gorilla answer pings.
		live.SetReadDeadline(time.Now().Add(3 * time.Second))
		_, _, err := live.ReadMessage()
		done <- err
	}()
	var ne interface{ Timeout() bool }
	if err := <-done; !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("live client's connection ended: %v", err)
	}
}

// Document sync cannot drop a message: a peer that does not read what
// its documents send it is closed as a slow consumer once its lossless
// lane is full. (Ephemerals for it are dropped instead: ephemeral_test.go.)
func TestSlowConsumerIsDisconnected(t *testing.T) {
	s := newTestServer(t, Config{SendQueue: 4})
	slow := dial(t, s.url)
	join(t, slow, "slow")
	fast := dial(t, s.url)
	join(t, fast, "fast")
	c := serverConn(t, s, "slow")
	big := bytes.Repeat([]byte{0x40}, 256<<10)
	// slow never reads: the kernel buffers fill, then the queue.
	for range 200 {
		c.SendSync(testDoc, big)
		if c.closed.Load() {
			break
		}
	}
	testenv.WaitFor(t, "slow consumer disconnect", func() bool {
		return testutil.ToFloat64(s.metrics.disconnects.WithLabelValues(ReasonSlow.Name)) == 1
	})
	// The fast peer is unaffected.
	join(t, fast, "fast")
}

// A peer that never reads and asks for a large document again and again
// had the server queue a whole copy of it for each request. It is sent
// one copy until it answers; one that answers without reading (it knows
// the heads from elsewhere) is closed as a slow consumer once its
// lossless lane passes SendQueueBytes, the node holding no more than that
// for it, while another peer of the document syncs on.
func TestRepeatedRequestsAreBoundedInBytes(t *testing.T) {
	const bound = 8 << 20
	s := newTestServer(t, Config{SendQueueBytes: bound, WriteTimeout: time.Minute})
	w := newSyncer(t, s, dial(t, s.url), "w")
	random := make([]byte, 2<<20)
	rand.Read(random)
	blob := base64.StdEncoding.EncodeToString(random) // a reply of about 2.7 MB
	w.set("blob", blob)
	w.sync(wire.TypeSync)
	r := newSyncer(t, s, dial(t, s.url), "r")
	r.sync(wire.TypeRequest)
	if r.get("blob") == "" {
		t.Fatal("the reader did not get the document")
	}

	// The attacker's socket takes little into its kernel buffer, so the
	// server's writer is soon blocked and the lane fills.
	dialer := websocket.Dialer{NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err == nil {
			err = nc.(*net.TCPConn).SetReadBuffer(16 << 10)
		}
		return nc, err
	}}
	greedy, _, err := dialer.Dial(s.url, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { greedy.Close() })
	join(t, greedy, "greedy")
	sendRaw := func(m *wire.Message) bool {
		b, _ := wire.Encode(m)
		return greedy.WriteMessage(websocket.BinaryMessage, b) == nil
	}
	request := &wire.Message{Type: wire.TypeRequest, SenderID: "greedy", TargetID: serverID, DocumentID: testDoc, Data: emptySyncMessage(t)}
	slow := func() bool { return testutil.ToFloat64(s.metrics.disconnects.WithLabelValues(ReasonSlow.Name)) == 1 }
	peak := watchPeak(t, &s.metrics.queuedBytes)
	sentBytes := func() float64 { return testutil.ToFloat64(s.metrics.syncBytes.WithLabelValues("out")) }

	// Requests alone: one copy, however many.
	before, acks := sentBytes(), testutil.ToFloat64(s.metrics.sent.WithLabelValues(wire.TypeHeartbeatAck))
	for range 20 {
		if !sendRaw(request) {
			t.Fatal("the greedy peer was closed for asking")
		}
	}
	sendRaw(&wire.Message{Type: wire.TypeHeartbeat, SenderID: "greedy", TargetID: serverID, Seq: 1})
	testenv.WaitFor(t, "the requests handled", func() bool {
		return testutil.ToFloat64(s.metrics.sent.WithLabelValues(wire.TypeHeartbeatAck)) > acks || slow()
	})
	if copies := (sentBytes() - before) / float64(len(blob)); copies > 1.5 {
		t.Errorf("20 unanswered requests were sent %.1f copies of the document, want 1", copies)
	}
	if slow() {
		t.Fatal("requests alone closed the peer: they queued more than one copy")
	}

	// After each request the attacker names the document's heads as if
	// it had read the reply, so the next request is answered in whole.
	answer, _ := automerge.NewSyncState(w.doc).GenerateMessage()
	for i := 0; i < 40 && !slow(); i++ {
		if !sendRaw(&wire.Message{Type: wire.TypeSync, SenderID: "greedy", TargetID: serverID, DocumentID: testDoc, Data: answer.Bytes()}) ||
			!sendRaw(request) {
			break // closed already
		}
	}
	testenv.WaitFor(t, "the greedy peer closed, or the bound passed", func() bool { return slow() || peak() > bound })
	if p := peak(); p > bound {
		t.Errorf("the node held %d bytes in lossless lanes, over the bound of %d", p, bound)
	}
	if !slow() {
		t.Fatal("the greedy peer was not closed as a slow consumer")
	}

	// The reader syncs on: it gets a change made after the attack.
	w.set("title", "after")
	w.sync(wire.TypeSync)
	r.sync(wire.TypeSync)
	if r.get("title") != "after" {
		t.Fatalf("the reader sees title %q", r.get("title"))
	}
	testenv.WaitFor(t, "the lanes empty", func() bool { return s.metrics.queuedBytes.Load() == 0 })
}

// A document larger than the lane's byte bound still reaches a peer that
// has nothing else queued: the bound cuts off peers that let messages pile
// up, not one large reply.
func TestOneReplyLargerThanTheByteBoundGoesOut(t *testing.T) {
	s := newTestServer(t, Config{SendQueueBytes: 1 << 20})
	w := newSyncer(t, s, dial(t, s.url), "w")
	random := make([]byte, 2<<20)
	rand.Read(random)
	w.set("blob", base64.StdEncoding.EncodeToString(random))
	w.sync(wire.TypeSync)
	ws := dial(t, s.url)
	join(t, ws, "r")
	// A request with no flags section: the reply is then version 1, which
	// automerge-go, reading it below, takes.
	request := emptySyncMessage(t)[:7]
	send(t, ws, &wire.Message{Type: wire.TypeRequest, SenderID: "r", TargetID: serverID, DocumentID: testDoc, Data: request})
	m := recv(t, ws)
	if m.Type != wire.TypeSync || len(m.Data) < 2<<20 {
		t.Fatalf("got %s of %d bytes, want the document", m.Type, len(m.Data))
	}
	d := automerge.New()
	if _, err := automerge.NewSyncState(d).ReceiveMessage(m.Data); err != nil {
		t.Fatal(err)
	}
	if v, err := d.RootMap().Get("blob"); err != nil || v.Kind() != automerge.KindStr {
		t.Fatalf("the reply does not hold the document: %v", err)
	}
	if n := testutil.ToFloat64(s.metrics.disconnects.WithLabelValues(ReasonSlow.Name)); n != 0 {
		t.Fatal("a peer was closed as a slow consumer")
	}
}

// watchPeak samples n until the test ends; the returned function reports
// the highest value seen so far.
func watchPeak(t *testing.T, n *atomic.Int64) func() int64 {
	var peak atomic.Int64
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			if v := n.Load(); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	return func() int64 {
		if v := n.Load(); v > peak.Load() {
			peak.Store(v)
		}
		return peak.Load()
	}
}

func TestEphemeralRelay(t *testing.T) {
	s := newTestServer(t, Config{})
	a, b := dial(t, s.url), dial(t, s.url)
	join(t, a, "a")
	join(t, b, "b")
	sendEphemeral(t, b, "b", 1, []byte{0xa0}) // b joins the room; a is not in it yet
	testenv.WaitFor(t, "b in the room", func() bool { return s.hub.Stats().Peers == 1 })
	sendEphemeral(t, a, "a", 5, []byte{0x01})
	m := recv(t, b)
	if m.Type != wire.TypeEphemeral || m.SenderID != "a" || m.TargetID != "b" ||
		m.SessionID != "session-a" || m.Count != 5 || !bytes.Equal(m.Data, []byte{0x01}) {
		t.Fatalf("b got %+v", m)
	}
	// A repeated or older count is dropped, a newer one relayed.
	sendEphemeral(t, a, "a", 5, []byte{0x02})
	sendEphemeral(t, a, "a", 3, []byte{0x03})
	sendEphemeral(t, a, "a", 6, []byte{0x04})
	if m := recv(t, b); m.Count != 6 {
		t.Fatalf("b got count %d, want 6 (5 repeated and 3 stale are dropped)", m.Count)
	}
	// b passing a's message back (as stock clients do) is dropped quietly.
	send(t, b, &wire.Message{Type: wire.TypeEphemeral, SenderID: "a", TargetID: serverID,
		DocumentID: testDoc, SessionID: "session-a", Count: 7, Data: []byte{0x05}})
	sendEphemeral(t, b, "b", 2, []byte{0x06})
	if m := recv(t, a); m.SenderID != "b" || m.Count != 2 {
		t.Fatalf("a got %+v, want b's own message and nothing echoed", m)
	}
	if n := testutil.ToFloat64(s.metrics.dropped.WithLabelValues(dropStale)); n != 2 {
		t.Errorf("stale drops = %v, want 2", n)
	}
}

func TestShutdownClosesConnections(t *testing.T) {
	s := newTestServer(t, Config{})
	ws := dial(t, s.url)
	join(t, ws, "alice")
	go s.Close(context.Background())
	expectClose(t, ws, websocket.CloseGoingAway)
	testenv.WaitFor(t, "no connections", func() bool { return s.Connections() == 0 })
}

func sendEphemeral(t *testing.T, ws *websocket.Conn, peer string, count uint64, data []byte) {
	t.Helper()
	send(t, ws, &wire.Message{Type: wire.TypeEphemeral, SenderID: peer, TargetID: serverID,
		DocumentID: testDoc, SessionID: "session-" + peer, Count: count, Data: data})
}

func emptySyncMessage(t *testing.T) []byte {
	t.Helper()
	// The first sync message of an empty automerge document, as a stock
	// client sends it in a request (captured).
	return []byte{0x42, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x02, 0x02, 0x84}
}

// TestHeartbeatIsAcknowledged: Tandem's client heartbeat gets an ack with
// the same sequence number at once; stock clients never send one.
func TestHeartbeatIsAcknowledged(t *testing.T) {
	s := newTestServer(t, Config{})
	early := dial(t, s.url)
	send(t, early, &wire.Message{Type: wire.TypeHeartbeat, SenderID: "a", Seq: 1})
	recvError(t, early, "send join before")
	expectClose(t, early, websocket.CloseProtocolError)
	ws := dial(t, s.url)
	join(t, ws, "a")
	for seq := uint64(1); seq <= 3; seq++ {
		before := time.Now().UnixMilli()
		send(t, ws, &wire.Message{Type: wire.TypeHeartbeat, SenderID: "a", TargetID: serverID, Seq: seq})
		m := recv(t, ws)
		if m.Type != wire.TypeHeartbeatAck || m.Seq != seq || m.TargetID != "a" || m.ServerTime < before {
			t.Fatalf("got %+v, want an ack of heartbeat %d", m, seq)
		}
	}
}

// TestFramesOfEveryLengthForm: the writer frames messages itself, joining
// what is queued into one write; each length form (7-bit, 16-bit, 64-bit)
// arrives whole and in order.
func TestFramesOfEveryLengthForm(t *testing.T) {
	s := newTestServer(t, Config{MaxEphemeralBytes: 1 << 20, MaxMessageBytes: 2 << 20})
	a, b := dial(t, s.url), dial(t, s.url)
	join(t, a, "a")
	join(t, b, "b")
	sendEphemeral(t, b, "b", 1, []byte{0xa0})
	testenv.WaitFor(t, "b in the room", func() bool { return s.hub.Stats().Peers == 1 })
	sizes := []int{1, 125, 126, 65535, 65536, 200000, 3}
	for i, n := range sizes {
		sendEphemeral(t, a, "a", uint64(i+1), bytes.Repeat([]byte{byte(i)}, n))
	}
	for i, n := range sizes {
		m := recv(t, b)
		if m.Count != uint64(i+1) || !bytes.Equal(m.Data, bytes.Repeat([]byte{byte(i)}, n)) {
			t.Fatalf("message %d: got count %d with %d bytes, want count %d with %d", i, m.Count, len(m.Data), i+1, n)
		}
	}
}

// serverConn returns the server's side of a joined peer's connection.
func serverConn(t *testing.T, s *testServer, peer string) *conn {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.peers[peer]
	if c == nil {
		t.Fatalf("no connection for %s", peer)
	}
	return c
}

// Sync messages large and small, sent alone or shared by several peers,
// arrive whole and in order: a large one is written from its own bytes
// (its frame's head, then the data), which must frame exactly as a
// copied one.
func TestLargeSyncMessagesArriveWhole(t *testing.T) {
	s := newTestServer(t, Config{})
	a, b := dial(t, s.url), dial(t, s.url)
	join(t, a, "a")
	join(t, b, "b")
	ca, cb := serverConn(t, s, "a"), serverConn(t, s, "b")
	sizes := []int{1, largeData - 1, largeData, 65535, 65536, maxBatch + 1, 3 << 20, 2}
	var want [][]byte
	for i, n := range sizes {
		data := bytes.Repeat([]byte{byte(i + 1)}, n)
		data[n-1] = 0xff // the last byte arrives too
		want = append(want, data)
		if i%2 == 0 {
			ca.SendSync(testDoc, data)
			cb.SendSync(testDoc, data)
		} else {
			shared := &doc.SharedSync{Data: data}
			ca.SendSharedSync(testDoc, shared)
			cb.SendSharedSync(testDoc, shared)
		}
	}
	for _, ws := range []*websocket.Conn{a, b} {
		for i, w := range want {
			m := recv(t, ws)
			if m.Type != wire.TypeSync || m.DocumentID != testDoc || !bytes.Equal(m.Data, w) {
				t.Fatalf("message %d: a %s of %d bytes, want the sync of %d", i, m.Type, len(m.Data), len(w))
			}
		}
	}
}

// While the store is down a peer may keep typing only so far: past the
// room's bound of unstored changes, its next change gets an error and the
// connection closes with 1013 (try again later), so that its client comes
// back later and sends it again.
func TestStoreFarBehindClosesTryAgainLater(t *testing.T) {
	st, err := store.OpenBolt(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() }) // after the hub's Close: registered before it
	ds := &store.Down{Store: st}
	s := newTestServerOn(t, Config{MessageRate: 1e6, MessageBurst: 1e6}, ds)
	w := newSyncer(t, s, dial(t, s.url), "w")
	w.set("n", "0")
	w.sync(wire.TypeSync) // level, with the store up
	ds.SetDown(true)
	for i := 1; i <= 1100; i++ {
		w.set("n", fmt.Sprint(i)) // each change goes at once: its answer is held
		m, ok := w.state.GenerateMessage()
		if !ok {
			t.Fatalf("change %d: nothing to send", i)
		}
		b, _ := wire.Encode(&wire.Message{Type: wire.TypeSync, SenderID: "w", TargetID: serverID, DocumentID: testDoc, Data: m.Bytes()})
		if err := w.ws.WriteMessage(websocket.BinaryMessage, b); err != nil {
			break // closed already
		}
	}
	for {
		m := recv(t, w.ws)
		if m.Type == wire.TypeError {
			if !strings.Contains(m.ErrorMessage, "store is behind") {
				t.Fatalf("error %q", m.ErrorMessage)
			}
			break
		}
	}
	expectClose(t, w.ws, websocket.CloseTryAgainLater)
}

// A change that would wait for a dependency while the node holds all the
// waiting changes it may is not taken now: the client is told so and
// closed with 1013 (try again later), to send it again when it reconnects.
func TestAFullWaitingQueueClosesTryAgainLater(t *testing.T) {
	// A change whose dependency the node never gets: the second of two.
	d := automerge.New()
	var second []byte
	for i := range 2 {
		if err := d.RootMap().Set("n", int64(i)); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Commit("edit"); err != nil {
			t.Fatal(err)
		}
	}
	cs, err := d.Changes()
	if err != nil {
		t.Fatal(err)
	}
	second = cs[1].Save()
	msg := append([]byte{0x42, 0, 0, 0, 1}, binary.AppendUvarint(nil, uint64(len(second)))...)
	msg = append(msg, second...)

	s := newTestServerHub(t, Config{}, doc.Config{Store: openTestStore(t), Limits: guard.Limits{WaitingBytes: 1}})
	ws := dial(t, s.url)
	join(t, ws, "w")
	send(t, ws, &wire.Message{Type: wire.TypeSync, SenderID: "w", TargetID: serverID, DocumentID: testDoc, Data: msg})
	for {
		m := recv(t, ws)
		if m.Type == wire.TypeError {
			if !strings.Contains(m.ErrorMessage, testDoc) || !strings.Contains(m.ErrorMessage, "reconnect later") {
				t.Fatalf("error %q, want one naming the document and saying to come back", m.ErrorMessage)
			}
			break
		}
	}
	expectClose(t, ws, websocket.CloseTryAgainLater)
}
