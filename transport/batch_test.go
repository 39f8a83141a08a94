package transport

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tandemhq/tandem/awareness"
	"github.com/tandemhq/tandem/internal/testenv"
	"github.com/tandemhq/tandem/transport/wire"
)

// A client that asks for presence batches in its join gets the same
// presence in tandem-presence-batch frames that a stock client in the same
// document gets as one ephemeral message each.
func TestPresenceBatchesGoOnlyToClientsThatAsk(t *testing.T) {
	presence, err := awareness.New(awareness.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s := newTestServer(t, Config{Presence: presence})
	stock, batched, mover := dial(t, s.url), dial(t, s.url), dial(t, s.url)
	join(t, stock, "stock")
	send(t, batched, &wire.Message{Type: wire.TypeJoin, SenderID: "batched",
		PeerMetadata: &wire.PeerMetadata{IsEphemeral: true, PresenceBatch: true}, SupportedProtocolVersions: []string{"1"}})
	if m := recv(t, batched); m.Type != wire.TypePeer {
		t.Fatalf("got %s, want peer", m.Type)
	}
	join(t, mover, "mover")
	heartbeat := presencePayload(t, map[string]any{"type": "heartbeat"})
	sendEphemeral(t, stock, "stock", 1, heartbeat)
	sendEphemeral(t, batched, "batched", 1, heartbeat)
	rejoin(t, stock, "stock") // fences: both are in the document
	rejoin(t, batched, "batched")
	sendEphemeral(t, mover, "mover", 1, presencePayload(t, map[string]any{"type": "update", "channel": "cursor", "value": "7@abc"}))

	// What each got from mover, until the cursor.
	var stockGot, batchGot []wire.BatchEntry
	testenv.WaitWithin(t, "the cursor at the stock client", 5*time.Second, func() bool {
		m := recv(t, stock)
		if m.Type == wire.TypePresenceBatch {
			t.Fatal("a stock client was sent a batch")
		}
		if m.Type == wire.TypeEphemeral && m.SenderID == "mover" {
			stockGot = append(stockGot, wire.BatchEntry{SenderID: m.SenderID, Count: m.Count, Data: m.Data})
		}
		return hasCursor(stockGot)
	})
	testenv.WaitWithin(t, "the cursor at the client that takes batches", 5*time.Second, func() bool {
		m := recv(t, batched)
		if m.Type == wire.TypeEphemeral && m.SenderID == "mover" {
			t.Fatal("a client that asked for batches was sent presence alone")
		}
		if m.Type != wire.TypePresenceBatch {
			return false
		}
		if m.DocumentID != testDoc || m.SenderID != serverID || m.SessionID == "" || len(m.Batch) == 0 {
			t.Fatalf("malformed batch %+v", m)
		}
		for _, e := range m.Batch {
			if e.SenderID == "mover" {
				batchGot = append(batchGot, e)
			}
		}
		return hasCursor(batchGot)
	})
	for i := range batchGot { // what came with the cursor in its batch, after it, is not compared
		if hasCursor(batchGot[i : i+1]) {
			batchGot = batchGot[:i+1]
			break
		}
	}
	if len(stockGot) != len(batchGot) {
		t.Fatalf("stock got %d messages from mover, batched %d", len(stockGot), len(batchGot))
	}
	for i := range stockGot {
		if stockGot[i].Count != batchGot[i].Count || !bytes.Equal(stockGot[i].Data, batchGot[i].Data) {
			t.Errorf("message %d differs: stock #%d, batched #%d", i, stockGot[i].Count, batchGot[i].Count)
		}
	}
}

// rejoin sends a repeated join and reads up to its answer.
func rejoin(t *testing.T, ws *websocket.Conn, peer string) {
	t.Helper()
	send(t, ws, &wire.Message{Type: wire.TypeJoin, SenderID: peer, SupportedProtocolVersions: []string{"1"}})
	for recv(t, ws).Type != wire.TypePeer {
	}
}

// hasCursor reports whether got holds the cursor update "7@abc".
func hasCursor(got []wire.BatchEntry) bool {
	for _, e := range got {
		var env struct {
			P struct {
				Type, Channel string
				Value         any
			} `cbor:"__presence"`
		}
		if cbor.Unmarshal(e.Data, &env) == nil && env.P.Type == "update" && env.P.Channel == "cursor" && env.P.Value == "7@abc" {
			return true
		}
	}
	return false
}

// A client cannot send a batch: it is the server's to send.
func TestAClientCannotSendABatch(t *testing.T) {
	s := newTestServer(t, Config{})
	ws := dial(t, s.url)
	join(t, ws, "alice")
	b, err := cbor.Marshal(map[string]any{"type": wire.TypePresenceBatch, "senderId": "alice", "documentId": testDoc,
		"batch": []any{[]any{"bob", 1, []byte{0xa0}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := ws.WriteMessage(websocket.BinaryMessage, b); err != nil {
		t.Fatal(err)
	}
	recvError(t, ws, "invalid")
	expectClose(t, ws, ReasonInvalid.Code)
}

// presenceSender is a peer that speaks presence to a hub directly, with no
// socket: it takes nothing.
type presenceSender struct{ id string }

func (p *presenceSender) ID() string                    { return p.id }
func (p *presenceSender) PresenceReady(*awareness.Feed) {}

// joinPresence makes the client peer a member of testDoc's presence (a
// heartbeat, fenced by a repeated join).
func joinPresence(t *testing.T, ws *websocket.Conn, peer string, batches bool) {
	t.Helper()
	send(t, ws, &wire.Message{Type: wire.TypeJoin, SenderID: peer,
		PeerMetadata: &wire.PeerMetadata{PresenceBatch: batches}, SupportedProtocolVersions: []string{"1"}})
	for recv(t, ws).Type != wire.TypePeer {
	}
	sendEphemeral(t, ws, peer, 1, presencePayload(t, map[string]any{"type": "heartbeat"}))
	rejoin(t, ws, peer)
}

// flood sends rounds of cursor updates of a and b, each with the value
// "i" and pad, through the hub: a tick after each round forwards it.
func flood(t *testing.T, presence *awareness.Hub, rounds int, pad string, between func(i int)) {
	t.Helper()
	senders := []*presenceSender{{"a"}, {"b"}}
	for i := 1; i <= rounds; i++ {
		for _, p := range senders {
			data := presencePayload(t, map[string]any{"type": "update", "channel": "cursor", "value": fmt.Sprint(i, pad)})
			if _, err := presence.Receive(p, testDoc, awareness.Message{SenderID: p.id, SessionID: "s-" + p.id, Count: uint64(i), Data: data}); err != nil {
				t.Fatal(err)
			}
		}
		presence.Tick()
		if between != nil {
			between(i)
		}
	}
}

// cursorOf returns the sender and the number in a presence payload's
// cursor (an update's value, or a snapshot's cursor channel), ok false for
// any other presence.
func cursorOf(t *testing.T, data []byte, pad string) (int, bool) {
	t.Helper()
	var env struct {
		P struct {
			Type  string
			Value string
			State map[string]any
		} `cbor:"__presence"`
	}
	if err := cbor.Unmarshal(data, &env); err != nil {
		t.Fatal(err)
	}
	v := env.P.Value
	if env.P.Type == "snapshot" {
		s, _ := env.P.State["cursor"].(string)
		v = s
	}
	n, err := strconv.Atoi(strings.TrimSuffix(v, pad))
	return n, err == nil && v != ""
}

// A client that reads slowly, with batches or without, is sent far more
// presence than its socket takes: it gets every peer's final value, never
// an older value after a newer one, under counts that rise, and far fewer
// values than were sent; its connection is not closed for it, and sync
// messages sent meanwhile all arrive, in order.
func TestALaggingReaderGetsTheNewestValues(t *testing.T) {
	for _, batches := range []bool{false, true} {
		t.Run(fmt.Sprint("batches=", batches), func(t *testing.T) {
			presence, err := awareness.New(awareness.Config{Logger: testenv.QuietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			s := newTestServer(t, Config{Presence: presence, SendQueue: 8})
			ws := dial(t, s.url)
			joinPresence(t, ws, "slow", batches)
			c := serverConn(t, s, "slow")
			pad := strings.Repeat("x", 32<<10) // enough to fill the socket's buffers many times over
			const rounds = 400
			flood(t, presence, rounds, pad, func(i int) {
				if i%100 == 0 {
					c.SendSync(testDoc, []byte{0x42, byte(i / 100)})
				}
			})
			if n := testutil.ToFloat64(s.metrics.disconnects.WithLabelValues(ReasonSlow.Name)); n != 0 {
				t.Fatalf("presence closed the connection as a slow consumer")
			}
			last := map[string]int{}
			var lastCount uint64
			var syncs []byte
			values := 0
			got := func(sender string, count uint64, data []byte) {
				v, ok := cursorOf(t, data, pad)
				if !ok {
					return
				}
				if count <= lastCount || v < last[sender] {
					t.Fatalf("%s's value %d (count %d) after %d (count %d)", sender, v, count, last[sender], lastCount)
				}
				lastCount, last[sender] = count, v
				values++
			}
			for last["a"] != rounds || last["b"] != rounds {
				m := recv(t, ws)
				switch m.Type {
				case wire.TypeSync:
					syncs = append(syncs, m.Data[1])
				case wire.TypeEphemeral:
					if batches {
						t.Fatal("a client that takes batches was sent presence alone")
					}
					got(m.SenderID, m.Count, m.Data)
				case wire.TypePresenceBatch:
					if !batches {
						t.Fatal("a stock client was sent a batch")
					}
					for _, e := range m.Batch {
						got(e.SenderID, e.Count, e.Data)
					}
				}
			}
			if string(syncs) != "\x01\x02\x03\x04" {
				t.Fatalf("sync messages arrived as %v, want all four in order", syncs)
			}
			if values >= 2*rounds {
				t.Fatalf("%d values arrived for %d sent: the reader was sent the backlog", values, 2*rounds)
			}
			t.Logf("%d values arrived for %d sent", values, 2*rounds)
		})
	}
}

// A client far behind is sent a goodbye for a peer that left meanwhile:
// no ghost stays however far behind it was.
func TestALaggingReaderIsToldWhoLeft(t *testing.T) {
	presence, err := awareness.New(awareness.Config{Logger: testenv.QuietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	s := newTestServer(t, Config{Presence: presence})
	ws := dial(t, s.url)
	joinPresence(t, ws, "slow", true)
	gone := &presenceSender{"gone"}
	if _, err := presence.Receive(gone, testDoc, awareness.Message{SenderID: "gone", SessionID: "s", Count: 1,
		Data: presencePayload(t, map[string]any{"type": "update", "channel": "user", "value": "Gus"})}); err != nil {
		t.Fatal(err)
	}
	pad := strings.Repeat("x", 32<<10)
	flood(t, presence, 50, pad, func(i int) {
		if i == 25 {
			presence.Leave(gone)
		}
	})
	const rounds = 50
	last := map[string]int{}
	left := false
	for last["a"] != rounds || last["b"] != rounds {
		m := recv(t, ws)
		if m.Type != wire.TypePresenceBatch {
			continue
		}
		for _, e := range m.Batch {
			var env struct {
				P struct{ Type string } `cbor:"__presence"`
			}
			if err := cbor.Unmarshal(e.Data, &env); err != nil {
				t.Fatal(err)
			}
			if e.SenderID == "gone" && env.P.Type == "goodbye" {
				left = true
			}
			if v, ok := cursorOf(t, e.Data, pad); ok {
				last[e.SenderID] = v
			}
		}
	}
	if !left {
		t.Fatal("the reader was never told that gone left")
	}
}

// A room of more peers than a batch may hold (a cluster's nodes together)
// reaches a client that takes batches as several, each one Decode reads.
func TestARoomLargerThanABatchComesInSeveral(t *testing.T) {
	presence, err := awareness.New(awareness.Config{Logger: testenv.QuietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	s := newTestServer(t, Config{Presence: presence})
	presence.Join(&presenceSender{"here"}, testDoc) // the room exists while remote peers come
	const peers = wire.MaxBatchEntries + 500
	for i := range peers {
		presence.ApplyRemote("node-2", testDoc, awareness.Delta{Peer: fmt.Sprint("remote-", i), Registers: map[string]awareness.Register{
			"cursor": {Clock: awareness.Clock{Era: 1, Count: 1, Session: "s"}, Value: []byte{0x01}},
		}})
	}
	ws := dial(t, s.url)
	// Joined as joinPresence does, less its fence (a second join waited
	// for): the room's batches may come before the fence's answer, and
	// the fence would throw them away.
	send(t, ws, &wire.Message{Type: wire.TypeJoin, SenderID: "late",
		PeerMetadata: &wire.PeerMetadata{PresenceBatch: true}, SupportedProtocolVersions: []string{"1"}})
	for recv(t, ws).Type != wire.TypePeer {
	}
	sendEphemeral(t, ws, "late", 1, presencePayload(t, map[string]any{"type": "heartbeat"})) // sent the room: every remote peer
	seen, batches := map[string]bool{}, 0
	for len(seen) < peers {
		m := recv(t, ws) // fails on a frame Decode refuses
		if m.Type != wire.TypePresenceBatch {
			continue
		}
		batches++
		if len(m.Batch) > wire.MaxBatchEntries {
			t.Fatalf("a batch of %d entries", len(m.Batch))
		}
		for _, e := range m.Batch {
			seen[e.SenderID] = true
		}
	}
	if batches < 2 {
		t.Fatalf("%d peers came in %d batch", peers, batches)
	}
}
