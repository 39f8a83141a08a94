package transport

import (
	"bytes"
	"context"
	"net"
	"testing"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tandemhq/tandem/internal/testenv"
	"github.com/tandemhq/tandem/transport/wire"
)

// dialSlowReader dials with a small socket receive buffer: a client that
// does not read soon stops the server's writes to it.
func dialSlowReader(t *testing.T, url string) *websocket.Conn {
	t.Helper()
	dialer := websocket.Dialer{NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err == nil {
			err = nc.(*net.TCPConn).SetReadBuffer(16 << 10)
		}
		return nc, err
	}}
	ws, _, err := dialer.Dial(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	return ws
}

// Application ephemerals relayed at the allowed rate to a member that
// reads slower than they come filled its lossless lane, and it was closed
// as a slow consumer, its own change never acknowledged. An ephemeral is
// lossy: for a reader whose lane is backed up it is dropped and counted,
// and the reader stays, its sync answered.
func TestEphemeralsForASlowReaderAreDroppedNotItsConnection(t *testing.T) {
	s := newTestServer(t, Config{SendQueue: 32, MessageRate: 1000, MessageBurst: 1000})
	slow := newSyncer(t, s, dialSlowReader(t, s.url), "slow")
	slow.set("before", "flood")
	slow.sync(wire.TypeSync) // slow is in the document
	flood := dial(t, s.url)
	join(t, flood, "flood")

	// slow reads nothing while 12 MB of ephemerals come for it.
	payload := bytes.Repeat([]byte{0x40}, 60<<10)
	for i := uint64(1); i <= 200; i++ {
		sendEphemeral(t, flood, "flood", i, payload)
	}
	send(t, flood, &wire.Message{Type: wire.TypeHeartbeat, SenderID: "flood", TargetID: serverID, Seq: 1})
	if m := recv(t, flood); m.Type != wire.TypeHeartbeatAck {
		t.Fatalf("the flooding peer got %s, want its heartbeat's ack", m.Type)
	}
	if n := testutil.ToFloat64(s.metrics.disconnects.WithLabelValues(ReasonSlow.Name)); n != 0 {
		t.Fatal("the slow reader was closed as a slow consumer for others' ephemerals")
	}
	dropped := testutil.ToFloat64(s.metrics.dropped.WithLabelValues(dropSlowReader))
	if dropped == 0 {
		t.Fatal("no ephemeral counted dropped for the slow reader")
	}
	t.Logf("%v of 200 ephemerals dropped for the slow reader", dropped)

	// slow reads again: its change is taken and acknowledged.
	slow.set("after", "flood")
	slow.sync(wire.TypeSync)
	if len(slow.errs) > 0 {
		t.Fatalf("the slow reader got errors: %v", slow.errs)
	}
	r := newSyncer(t, s, dial(t, s.url), "r")
	r.sync(wire.TypeRequest)
	if r.get("after") != "flood" {
		t.Fatal("the slow reader's change did not reach another peer")
	}
	testenv.WaitFor(t, "the lanes empty", func() bool { return s.metrics.queuedBytes.Load() == 0 })
}
