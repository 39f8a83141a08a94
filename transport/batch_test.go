package transport

import (
	"bytes"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/gorilla/websocket"

	"github.com/tandemhq/tandem/awareness"
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
	deadline := time.Now().Add(5 * time.Second)
	for !hasCursor(stockGot) && time.Now().Before(deadline) {
		m := recv(t, stock)
		if m.Type == wire.TypePresenceBatch {
			t.Fatal("a stock client was sent a batch")
		}
		if m.Type == wire.TypeEphemeral && m.SenderID == "mover" {
			stockGot = append(stockGot, wire.BatchEntry{SenderID: m.SenderID, Count: m.Count, Data: m.Data})
		}
	}
	for !hasCursor(batchGot) && time.Now().Before(deadline) {
		m := recv(t, batched)
		if m.Type == wire.TypeEphemeral && m.SenderID == "mover" {
			t.Fatal("a client that asked for batches was sent presence alone")
		}
		if m.Type != wire.TypePresenceBatch {
			continue
		}
		if m.DocumentID != testDoc || m.SenderID != serverID || m.SessionID == "" || len(m.Batch) == 0 {
			t.Fatalf("malformed batch %+v", m)
		}
		for _, e := range m.Batch {
			if e.SenderID == "mover" {
				batchGot = append(batchGot, e)
			}
		}
	}
	if !hasCursor(stockGot) || !hasCursor(batchGot) {
		t.Fatalf("the cursor did not arrive: stock %d messages, batched %d", len(stockGot), len(batchGot))
	}
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

// A connection whose writer is stuck keeps at most maxPresenceBytes of
// presence: batches are large and never superseded, so the frame bound
// alone would let a slow reader hold a thousand of them. The newest
// stays.
func TestThePresenceLaneIsBoundedInBytes(t *testing.T) {
	s := newTestServer(t, Config{})
	c := &conn{srv: s.Server, writing: true} // a writer runs, and is stuck
	batch := bytes.Repeat([]byte{0xa0}, 100<<10)
	for i := range 50 {
		batch = append(batch[:0:0], batch...)
		batch[0] = byte(i)
		c.pushPresence(presKey{doc: testDoc}, false, batch)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	const mib = 1 << 20 // maxPresenceBytes
	if c.pres.bytes > mib {
		t.Fatalf("%d bytes of presence waiting, over the bound of 1 MiB", c.pres.bytes)
	}
	counted := c.pres.bytes
	live := c.pres.take()
	if len(live) == 0 || live[len(live)-1].payload[0] != 49 {
		t.Fatal("the newest batch was not kept")
	}
	sum := 0
	for _, f := range live {
		sum += len(f.payload)
	}
	if sum != counted {
		t.Fatalf("the live frames hold %d bytes, the lane counted %d", sum, counted)
	}
}
