package transport

import (
	"context"
	"fmt"
	"testing"

	"github.com/fxamacker/cbor/v2"
	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tandemhq/tandem/awareness"
	"github.com/tandemhq/tandem/internal/testenv"
	"github.com/tandemhq/tandem/transport/wire"
)

// passBack sends m back to the server as a stock client passes on what it
// receives: under its sender, to the server.
func passBack(t *testing.T, ws *websocket.Conn, m *wire.Message) {
	t.Helper()
	send(t, ws, &wire.Message{Type: wire.TypeEphemeral, SenderID: m.SenderID, TargetID: serverID,
		DocumentID: m.DocumentID, SessionID: m.SessionID, Count: m.Count, Data: m.Data})
}

// A client that passes back every ephemeral it is sent, as stock clients
// do, is not charged for it: at 5 messages a second (a burst of 5), a
// listener sent 16 relayed ephemerals passes all 16 back, then speaks, and
// is heard, neither dropped nor closed. Past what it was sent, messages in
// other peers' names count as any other, and a flood of them closes.
func TestWhatAClientPassesBackCostsItNoRate(t *testing.T) {
	s := newTestServer(t, Config{MessageRate: 5, MessageBurst: 5})
	listener := dial(t, s.url)
	join(t, listener, "l")
	sendEphemeral(t, listener, "l", 1, []byte{0xa0}) // in the document
	testenv.WaitFor(t, "the listener in the document", func() bool { return s.hub.Stats().Peers == 1 })
	movers := make([]*websocket.Conn, 4)
	for i := range movers {
		movers[i] = dial(t, s.url)
		join(t, movers[i], fmt.Sprintf("m%d", i))
		for n := uint64(1); n <= 4; n++ {
			sendEphemeral(t, movers[i], fmt.Sprintf("m%d", i), n, []byte{0x01})
		}
	}
	for range 4 * len(movers) {
		m := recv(t, listener)
		if m.Type != wire.TypeEphemeral {
			t.Fatalf("the listener got %+v", m)
		}
		passBack(t, listener, m)
	}
	sendEphemeral(t, listener, "l", 2, []byte{0x02})
	for {
		m := recv(t, movers[0])
		if m.Type == wire.TypeError {
			t.Fatalf("a mover got an error: %s", m.ErrorMessage)
		}
		if m.SenderID == "l" {
			break
		}
	}
	if n := testutil.ToFloat64(s.metrics.dropped.WithLabelValues(dropForeignSender)); n != 16 {
		t.Errorf("%v passed back dropped, want 16", n)
	}
	if n := testutil.ToFloat64(s.metrics.dropped.WithLabelValues(dropRateLimited)); n != 0 {
		t.Errorf("%v rate limited, want none", n)
	}

	for n := uint64(100); n < 120; n++ { // owed nothing more: a flood
		b, _ := wire.Encode(&wire.Message{Type: wire.TypeEphemeral, SenderID: "m0", DocumentID: testDoc, SessionID: "session-m0", Count: n, Data: []byte{0x03}})
		if err := listener.WriteMessage(websocket.BinaryMessage, b); err != nil {
			break // closed already
		}
	}
	expectClose(t, listener, ReasonFlood.Code)
}

// The same holds for presence: a client in a busy room passes back every
// presence message it is sent, far past its rate, and keeps its own voice.
func TestPresencePassedBackCostsNoRate(t *testing.T) {
	presence, err := awareness.New(awareness.Config{Logger: testenv.QuietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { presence.Close(context.Background()) })
	s := newTestServer(t, Config{Presence: presence, MessageRate: 5, MessageBurst: 5})
	listener := dial(t, s.url)
	join(t, listener, "l")
	sendEphemeral(t, listener, "l", 1, presencePayload(t, map[string]any{"type": "heartbeat"}))
	rejoin(t, listener, "l")              // the fence: the listener is in the document
	movers := make([]*websocket.Conn, 16) // each moves once: its leading edge goes at once
	for i := range movers {
		movers[i] = dial(t, s.url)
		join(t, movers[i], fmt.Sprintf("m%d", i))
		sendEphemeral(t, movers[i], fmt.Sprintf("m%d", i), 1, presencePayload(t, map[string]any{"type": "update", "channel": "cursor", "value": 1}))
	}
	last := map[string]bool{} // the movers whose cursor arrived
	passed := 0
	testenv.WaitFor(t, "every mover's cursor at the listener", func() bool {
		m := recv(t, listener)
		if m.Type == wire.TypeError {
			t.Fatalf("the listener got an error: %s", m.ErrorMessage)
		}
		if m.Type != wire.TypeEphemeral {
			return false
		}
		passBack(t, listener, m)
		passed++
		if u, ok := decodeUpdate(m.Data); ok && u == 1 {
			last[m.SenderID] = true
		}
		return len(last) == len(movers)
	})
	if passed <= 10 {
		t.Fatalf("the listener passed back %d messages: no more than its flood bound, the test shows nothing", passed)
	}
	sendEphemeral(t, listener, "l", 2, presencePayload(t, map[string]any{"type": "update", "channel": "cursor", "value": 99}))
	testenv.WaitFor(t, "the listener's cursor at a mover", func() bool {
		m := recv(t, movers[0])
		if m.Type == wire.TypeError {
			t.Fatalf("a mover got an error: %s", m.ErrorMessage)
		}
		u, ok := decodeUpdate(m.Data)
		return m.SenderID == "l" && ok && u == 99
	})
}

// decodeUpdate reads the value of a presence update whose value is a
// number.
func decodeUpdate(data []byte) (uint64, bool) {
	var env struct {
		P struct {
			Type  string `cbor:"type"`
			Value any    `cbor:"value"`
		} `cbor:"__presence"`
	}
	if cbor.Unmarshal(data, &env) != nil || env.P.Type != "update" {
		return 0, false
	}
	v, ok := env.P.Value.(uint64)
	return v, ok
}
