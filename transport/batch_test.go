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
// presence: batches are large and never superseded as they are queued, so the frame bound
// alone would let a slow reader hold a thousand of them. The newest
// stays.
func TestThePresenceLaneIsBoundedInBytes(t *testing.T) {
	s := newTestServer(t, Config{})
	c := &conn{srv: s.Server, writing: true} // a writer runs, and is stuck
	batch := bytes.Repeat([]byte{0xa0}, 100<<10)
	for i := range 50 {
		batch = append(batch[:0:0], batch...)
		batch[0] = byte(i)
		c.pushPresence(presKey{doc: testDoc}, presMeta{}, batch, nil)
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

// presMsg is a presence update as the hub hands it to a connection, its
// payload naming its channel and value.
func presMsg(sender string, count uint64, channel string, value string) awareness.Message {
	return presOf(sender, count, awareness.Message{Channel: channel}, channel, value)
}

// presOf is a presence message with what m says it replaces; its payload
// names label and value.
func presOf(sender string, count uint64, m awareness.Message, label, value string) awareness.Message {
	data, err := cbor.Marshal(map[string]any{"__presence": map[string]any{"type": "update", "channel": label, "value": value}})
	if err != nil {
		panic(err)
	}
	m.SenderID, m.SessionID, m.Count, m.Data, m.Shared = sender, "relay", count, data, &awareness.Shared{}
	return m
}

var (
	goodbye  = awareness.Message{Whole: true, Goodbye: true}
	wholeOf  = awareness.Message{Whole: true}
	caretOf  = awareness.Message{Channels: []string{"cursor", "selection"}}
	caretTag = "cursor+selection"
)

// written decodes what freshen left of frames into sender:channel=value
// strings, in order, failing on a count that does not rise.
func written(t *testing.T, frames []outFrame) []string {
	t.Helper()
	var got []string
	var last uint64
	add := func(sender string, count uint64, data []byte) {
		var env struct {
			P struct{ Channel, Value string } `cbor:"__presence"`
		}
		if err := cbor.Unmarshal(data, &env); err != nil {
			t.Fatal(err)
		}
		if count <= last {
			t.Fatalf("count %d after %d", count, last)
		}
		last = count
		got = append(got, sender+":"+env.P.Channel+"="+env.P.Value)
	}
	for _, f := range frames {
		m, err := wire.Decode(f.payload)
		if err != nil {
			t.Fatal(err)
		}
		if m.Type == wire.TypePresenceBatch {
			for _, e := range m.Batch {
				add(e.SenderID, e.Count, e.Data)
			}
			continue
		}
		add(m.SenderID, m.Count, m.Data)
	}
	return got
}

// What a lagging connection's writer takes at once holds each peer's
// newest value per channel once: older ones are cut out of their batches,
// a snapshot or goodbye ends what its sender sent before it, a batch left
// empty goes, and the recipient's own messages go from a batch that is
// encoded again. Single frames and batches supersede each other.
func TestALaggingWriterSendsTheNewestValuesOnce(t *testing.T) {
	s := newTestServer(t, Config{})
	c := &conn{srv: s.Server, peerID: "me", writing: true} // a writer runs, and is stuck
	batch := func(msgs ...awareness.Message) {
		b := &awareness.Batch{Messages: msgs, Shared: &awareness.Shared{}}
		c.SendPresenceBatch(testDoc, b)
	}
	single := func(m awareness.Message) { c.SendPresence(testDoc, m) }
	batch(presMsg("a", 1, "user", "Anna"), presMsg("a", 2, "cursor", "a1"), presMsg("b", 3, "cursor", "b1"), presMsg("me", 4, "cursor", "m1"))
	batch(presMsg("a", 5, "cursor", "a2"), presMsg("a", 6, "typing", "t"))
	single(presMsg("b", 7, "cursor", "b2"))
	batch(presMsg("c", 8, "cursor", "c1"), presMsg("me", 9, "cursor", "m2"))
	batch(presOf("c", 10, goodbye, "", "goodbye"), presOf("a", 11, caretOf, caretTag, "a3"))
	batch(presOf("d", 12, goodbye, "", "goodbye"), presOf("d", 13, wholeOf, "", "d1"))
	batch(presMsg("me", 14, "cursor", "m3")) // all its own: kept as it is, nothing in it is old

	before := testutil.ToFloat64(s.metrics.presLane.WithLabelValues("superseded"))
	c.wmu.Lock()
	frames := c.pres.take()
	c.wmu.Unlock()
	got := written(t, c.freshen(frames))
	want := []string{
		"a:user=Anna",           // the first batch: a's cursor and b's cut out, a's name kept
		"a:typing=t",            // the second batch, a's older cursor cut out
		"b:cursor=b2",           // the single frame, which ended b1
		"c:=goodbye",            // c's goodbye ended c1, and the fourth batch with it
		"a:cursor+selection=a3", // a snapshot of some channels replaces only those
		"d:=goodbye", "d:=d1",   // d left and came back: a snapshot never replaces a goodbye
		"me:cursor=m3", // the last batch, as it came
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("written %v\nwant    %v", got, want)
	}
	if n := testutil.ToFloat64(s.metrics.presLane.WithLabelValues("superseded")) - before; n != 4 {
		t.Errorf("superseded rose by %v, want 4 (a1, b1, a2 and c1)", n)
	}
}

// The presence lane of a connection taking single frames applies the same
// rules as they are queued: an update replaces its channel's older one, a
// snapshot of some channels only theirs and an older snapshot of the same
// channels, a whole snapshot all of its sender's but a goodbye, a goodbye
// everything.
func TestThePresenceLaneReplacesWhatEachMessageReplaces(t *testing.T) {
	s := newTestServer(t, Config{})
	c := &conn{srv: s.Server, peerID: "me", writing: true} // a writer runs, and is stuck
	for _, m := range []awareness.Message{
		presMsg("a", 1, "user", "Anna"),
		presMsg("a", 2, "cursor", "a1"),
		presOf("a", 3, caretOf, caretTag, "a2"),
		presMsg("a", 4, "typing", "t1"),
		presOf("a", 5, caretOf, caretTag, "a3"),
		presMsg("a", 6, "typing", "t2"),
		presOf("d", 7, goodbye, "", "goodbye"),
		presOf("d", 8, wholeOf, "", "d1"),
		presMsg("d", 9, "cursor", "d2"),
		presMsg("e", 10, "cursor", "e1"),
		presOf("e", 11, wholeOf, "", "e2"),
		presMsg("f", 12, "cursor", "f1"),
		presOf("f", 13, goodbye, "", "goodbye"),
	} {
		c.SendPresence(testDoc, m)
	}
	c.wmu.Lock()
	frames := c.pres.take()
	c.wmu.Unlock()
	got := written(t, frames)
	want := []string{"a:user=Anna", "a:cursor+selection=a3", "a:typing=t2", "d:=goodbye", "d:=d1", "d:cursor=d2", "e:=e2", "f:=goodbye"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("queued %v\nwant   %v", got, want)
	}
}

// A client taking batches that reads slowly is sent far more presence
// than its socket takes: it gets every peer's final value, never an older
// value after a newer one, and far fewer values than were sent, the old
// ones cut out of the batches that waited.
func TestALaggingReaderOfBatchesGetsTheNewestValues(t *testing.T) {
	s := newTestServer(t, Config{})
	s.freshenAfter = 0 // however briefly the backlog waited here
	ws := dial(t, s.url)
	send(t, ws, &wire.Message{Type: wire.TypeJoin, SenderID: "slow",
		PeerMetadata: &wire.PeerMetadata{PresenceBatch: true}, SupportedProtocolVersions: []string{"1"}})
	if m := recv(t, ws); m.Type != wire.TypePeer {
		t.Fatalf("got %s, want peer", m.Type)
	}
	c := serverConn(t, s, "slow")
	pad := strings.Repeat("x", 32<<10) // enough to fill the socket's buffers many times over
	const rounds = 400
	count := uint64(0)
	for i := 1; i <= rounds; i++ {
		var msgs []awareness.Message
		for _, peer := range []string{"a", "b"} {
			count++
			msgs = append(msgs, presMsg(peer, count, "cursor", fmt.Sprint(i, pad)))
		}
		c.SendPresenceBatch(testDoc, &awareness.Batch{Messages: msgs, Shared: &awareness.Shared{}})
	}
	last := map[string]int{}
	var lastCount uint64
	values := 0
	for last["a"] != rounds || last["b"] != rounds {
		m := recv(t, ws)
		if m.Type != wire.TypePresenceBatch {
			continue
		}
		for _, e := range m.Batch {
			var env struct {
				P struct{ Value string } `cbor:"__presence"`
			}
			if err := cbor.Unmarshal(e.Data, &env); err != nil {
				t.Fatal(err)
			}
			v, err := strconv.Atoi(strings.TrimSuffix(env.P.Value, pad))
			if err != nil {
				t.Fatal(err)
			}
			if e.Count <= lastCount || v <= last[e.SenderID] {
				t.Fatalf("%s's value %d (count %d) after %d (count %d)", e.SenderID, v, e.Count, last[e.SenderID], lastCount)
			}
			lastCount, last[e.SenderID] = e.Count, v
			values++
		}
	}
	if superseded := testutil.ToFloat64(s.metrics.presLane.WithLabelValues("superseded")); superseded == 0 || values >= 2*rounds {
		t.Fatalf("%d values arrived for %d sent, %v superseded: nothing was cut out of a waiting batch", values, 2*rounds, superseded)
	}
	t.Logf("%d values arrived for %d sent", values, 2*rounds)
}

// A presence lane past its bound drops its oldest frames, but goodbyes and
// whole snapshots last: losing one would leave a ghost, or a peer without
// its name, until that peer spoke again.
func TestAFullPresenceLaneDropsGoodbyesLast(t *testing.T) {
	s := newTestServer(t, Config{})
	c := &conn{srv: s.Server, peerID: "me", writing: true} // a writer runs, and is stuck
	c.SendPresence(testDoc, presOf("gone", 1, goodbye, "", "goodbye"))
	c.SendPresence(testDoc, presOf("named", 2, wholeOf, "", "Anna"))
	const n = 1500 // over maxPresence, all of different peers: nothing superseded
	for i := range n {
		c.SendPresence(testDoc, presMsg(fmt.Sprint("p", i), uint64(3+i), "cursor", "x"))
	}
	c.wmu.Lock()
	frames := c.pres.take()
	c.wmu.Unlock()
	got := written(t, frames)
	if len(got) > 1024 || got[0] != "gone:=goodbye" || got[1] != "named:=Anna" || got[len(got)-1] != fmt.Sprint("p", n-1, ":cursor=x") {
		t.Fatalf("%d frames kept, starting %v and ending %v: want at most 1,024, the goodbye and the whole snapshot first, the newest last", len(got), got[:2], got[len(got)-1])
	}
	if d := testutil.ToFloat64(s.metrics.presLane.WithLabelValues("dropped")); d != float64(n+2-len(got)) {
		t.Errorf("dropped %v, want %d", d, n+2-len(got))
	}
}
