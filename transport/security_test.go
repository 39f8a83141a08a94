package transport

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/automerge/automerge-go"
	"github.com/fxamacker/cbor/v2"
	"github.com/golang-jwt/jwt/v5"
	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tandemhq/tandem/awareness"
	"github.com/tandemhq/tandem/internal/auth"
	"github.com/tandemhq/tandem/internal/testenv"
	"github.com/tandemhq/tandem/transport/wire"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef")

func token(t *testing.T, claims jwt.MapClaims) string {
	t.Helper()
	if _, ok := claims["exp"]; !ok {
		claims["exp"] = time.Now().Add(time.Hour).Unix() // tokens must expire
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func authConfig(t *testing.T) Config {
	t.Helper()
	v, err := auth.NewVerifier(auth.Config{Secret: testSecret})
	if err != nil {
		t.Fatal(err)
	}
	return Config{Auth: v}
}

// dialStatus dials and returns the HTTP status of a refused upgrade.
func dialStatus(t *testing.T, url string, h http.Header) (*websocket.Conn, int) {
	t.Helper()
	ws, resp, err := websocket.DefaultDialer.Dial(url, h)
	if err != nil {
		if resp == nil {
			t.Fatal(err)
		}
		return nil, resp.StatusCode
	}
	t.Cleanup(func() { ws.Close() })
	return ws, http.StatusSwitchingProtocols
}

// syncer is a Go automerge peer over a raw socket.
type syncer struct {
	t     *testing.T
	ws    *websocket.Conn
	srv   *testServer
	peer  string
	doc   *automerge.Doc
	state *automerge.SyncState
	errs  []string
	gone  bool // got doc-unavailable
}

func newSyncer(t *testing.T, s *testServer, ws *websocket.Conn, peer string) *syncer {
	d := automerge.New()
	join(t, ws, peer)
	return &syncer{t: t, srv: s, ws: ws, peer: peer, doc: d, state: automerge.NewSyncState(d)}
}

func (s *syncer) set(key, value string) {
	s.t.Helper()
	if err := s.doc.RootMap().Set(key, value); err != nil {
		s.t.Fatal(err)
	}
	if _, err := s.doc.Commit(key); err != nil {
		s.t.Fatal(err)
	}
}

func (s *syncer) get(key string) string {
	v, err := s.doc.RootMap().Get(key)
	if err != nil || v.Kind() != automerge.KindStr {
		return ""
	}
	return v.Str()
}

// sync exchanges messages until neither side has more. A repeated join is
// the fence: the server answers it with peer after everything before it,
// once the hub's pending write (which holds the sync messages naming new
// changes) is done.
func (s *syncer) sync(typ string) {
	s.t.Helper()
	for round := 0; round < 50; round++ {
		sent := false
		if m, ok := s.state.GenerateMessage(); ok {
			send(s.t, s.ws, &wire.Message{Type: typ, SenderID: s.peer, TargetID: serverID, DocumentID: testDoc, Data: m.Bytes()})
			sent = true
		}
		got := sent && s.fence()
		send(s.t, s.ws, &wire.Message{Type: wire.TypeJoin, SenderID: s.peer})
		for {
			m := recv(s.t, s.ws)
			if m.Type == wire.TypePeer {
				break
			}
			switch m.Type {
			case wire.TypeSync:
				if _, err := s.state.ReceiveMessage(m.Data); err != nil {
					s.t.Fatal(err)
				}
				got = true
			case wire.TypeDocUnavailable:
				s.gone = true
			case wire.TypeError:
				s.errs = append(s.errs, m.ErrorMessage)
			}
		}
		if !sent && !got {
			return
		}
		typ = wire.TypeSync
	}
	s.t.Fatal("sync did not settle")
}

// fence waits until the server has handled what this peer sent (the
// heartbeat is answered in order), then for the hub's writes: what they
// held is then queued to the socket ahead of anything sent after.
func (s *syncer) fence() (got bool) {
	s.t.Helper()
	send(s.t, s.ws, &wire.Message{Type: wire.TypeHeartbeat, SenderID: s.peer, Seq: 1})
	for {
		m := recv(s.t, s.ws)
		switch m.Type {
		case wire.TypeHeartbeatAck:
			if err := s.srv.hub.Flush(context.Background()); err != nil {
				s.t.Fatal(err)
			}
			return got
		case wire.TypeSync:
			if _, err := s.state.ReceiveMessage(m.Data); err != nil {
				s.t.Fatal(err)
			}
			got = true
		case wire.TypeDocUnavailable:
			s.gone = true
		case wire.TypeError:
			s.errs = append(s.errs, m.ErrorMessage)
		}
	}
}

func TestAuthRefusesBeforeUpgrade(t *testing.T) {
	s := newTestServer(t, authConfig(t))
	for name, url := range map[string]string{
		"no token":      s.url,
		"garbage token": s.url + "?token=abc",
		"expired token": s.url + "?token=" + token(t, jwt.MapClaims{"sub": "a", "exp": time.Now().Add(-time.Hour).Unix()}),
	} {
		if _, status := dialStatus(t, url, nil); status != http.StatusUnauthorized {
			t.Errorf("%s: status %d, want 401", name, status)
		}
	}
	if n := testutil.ToFloat64(s.metrics.refused.WithLabelValues(refuseUnauthorized)); n != 3 {
		t.Errorf("refused metric = %v, want 3", n)
	}
	h := http.Header{"Authorization": {"Bearer " + token(t, jwt.MapClaims{"sub": "a"})}}
	if _, status := dialStatus(t, s.url, h); status != http.StatusSwitchingProtocols {
		t.Errorf("bearer header: status %d", status)
	}
}

func TestExpiredTokenEndsConnection(t *testing.T) {
	s := newTestServer(t, authConfig(t))
	tok := token(t, jwt.MapClaims{"sub": "a", "exp": time.Now().Add(1500 * time.Millisecond).Unix()})
	ws, _ := dialStatus(t, s.url+"?token="+tok, nil)
	join(t, ws, "a")
	expectClose(t, ws, ReasonExpired.Code)
}

func TestDocumentOutsideTokenLooksUnavailable(t *testing.T) {
	s := newTestServer(t, authConfig(t))
	writer, _ := dialStatus(t, s.url+"?token="+token(t, jwt.MapClaims{"sub": "w", "docs": map[string]string{testDoc: "write"}}), nil)
	w := newSyncer(t, s, writer, "w")
	w.set("secret", "plans")
	w.sync(wire.TypeSync)

	other, _ := dialStatus(t, s.url+"?token="+token(t, jwt.MapClaims{"sub": "o", "docs": map[string]string{"2NEpo7TZRRrLZSi2U": "write"}}), nil)
	o := newSyncer(t, s, other, "o")
	o.sync(wire.TypeRequest)
	if !o.gone || o.get("secret") != "" {
		t.Fatalf("an outsider got the document (unavailable=%v, secret=%q)", o.gone, o.get("secret"))
	}
	if len(o.errs) != 0 {
		t.Fatalf("the outsider got errors %v: unavailable must look like absent", o.errs)
	}
	// Its ephemerals do not reach the document's peers either.
	sendEphemeral(t, other, "o", 1, []byte{0xa0})
	testenv.WaitFor(t, "the ephemeral denied", func() bool { return testutil.ToFloat64(s.metrics.denied) == 2 })
}

// changesFor returns a sync message from doc carrying the changes that a
// peer holding ref lacks, found by syncing with a copy of ref in memory.
func changesFor(t *testing.T, doc, ref *automerge.Doc) []byte {
	t.Helper()
	mirror, err := automerge.Load(ref.Save())
	if err != nil {
		t.Fatal(err)
	}
	ours, theirs := automerge.NewSyncState(doc), automerge.NewSyncState(mirror)
	for range 10 {
		m, ok := ours.GenerateMessage()
		if !ok {
			break
		}
		if len(m.Changes()) > 0 {
			return m.Bytes()
		}
		if _, err := theirs.ReceiveMessage(m.Bytes()); err != nil {
			t.Fatal(err)
		}
		if reply, ok := theirs.GenerateMessage(); ok {
			if _, err := ours.ReceiveMessage(reply.Bytes()); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Fatal("no sync message with changes")
	return nil
}

func TestReadOnlyPeer(t *testing.T) {
	s := newTestServer(t, authConfig(t))
	writer, _ := dialStatus(t, s.url+"?token="+token(t, jwt.MapClaims{"sub": "w", "docs": map[string]string{"*": "write"}}), nil)
	w := newSyncer(t, s, writer, "w")
	w.set("title", "v1")
	w.sync(wire.TypeSync)

	reader, _ := dialStatus(t, s.url+"?token="+token(t, jwt.MapClaims{"sub": "r", "docs": map[string]string{"*": "read"}}), nil)
	r := newSyncer(t, s, reader, "r")
	r.sync(wire.TypeRequest)
	if r.get("title") != "v1" {
		t.Fatalf("reader sees %q", r.get("title"))
	}
	r.set("title", "defaced")
	// The change goes in a sync message of its own: r's sync state may
	// hold an exchange the server left unanswered (it had nothing to add),
	// and automerge sends nothing more while one is in flight.
	send(t, reader, &wire.Message{Type: wire.TypeSync, SenderID: "r", TargetID: serverID, DocumentID: testDoc, Data: changesFor(t, r.doc, w.doc)})
	r.sync(wire.TypeSync) // may send the change again, and be told again
	if len(r.errs) == 0 {
		t.Fatal("the reader's change was refused without an error")
	}
	for _, e := range r.errs {
		if !strings.Contains(e, "read-only") {
			t.Fatalf("reader errors %v, want read-only errors only", r.errs)
		}
	}
	w.sync(wire.TypeSync)
	if w.get("title") != "v1" {
		t.Fatalf("the writer sees %q: a read-only change was relayed", w.get("title"))
	}
	fresh, _ := dialStatus(t, s.url+"?token="+token(t, jwt.MapClaims{"sub": "f", "docs": map[string]string{"*": "read"}}), nil)
	f := newSyncer(t, s, fresh, "f")
	f.sync(wire.TypeRequest)
	if f.get("title") != "v1" {
		t.Fatalf("the server's copy says %q", f.get("title"))
	}
}

func TestPresenceIdentityComesFromToken(t *testing.T) {
	cfg := authConfig(t)
	presence, err := awareness.New(awareness.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Presence = presence
	s := newTestServer(t, cfg)
	all := map[string]string{"*": "write"}
	mallory, _ := dialStatus(t, s.url+"?token="+token(t, jwt.MapClaims{"sub": "mallory", "name": "Mallory", "docs": all}), nil)
	victim, _ := dialStatus(t, s.url+"?token="+token(t, jwt.MapClaims{"sub": "bo", "docs": all}), nil)
	join(t, mallory, "m")
	join(t, victim, "v")
	sendEphemeral(t, victim, "v", 1, presencePayload(t, map[string]any{"type": "heartbeat"}))
	join(t, victim, "v") // the fence: bo's heartbeat has been handled
	sendEphemeral(t, mallory, "m", 1, presencePayload(t, map[string]any{
		"type": "snapshot", "state": map[string]any{"user": map[string]any{"id": "ana", "name": "Ana"}},
	}))
	testenv.WaitWithin(t, "mallory's user channel at bo", 5*time.Second, func() bool {
		m := recv(t, victim)
		var env struct {
			P struct {
				Type    string                    `cbor:"type"`
				Channel string                    `cbor:"channel"`
				Value   any                       `cbor:"value"`
				State   map[string]map[string]any `cbor:"state"`
			} `cbor:"__presence"`
		}
		if m.Type != wire.TypeEphemeral || cbor.Unmarshal(m.Data, &env) != nil {
			return false
		}
		var u map[string]any
		if v, ok := env.P.State["user"]; ok {
			u = v
		}
		if vm, ok := env.P.Value.(map[any]any); ok && env.P.Channel == "user" {
			u = map[string]any{}
			for k, v := range vm {
				u[fmt.Sprint(k)] = v
			}
		}
		if u != nil && (fmt.Sprint(u["id"]) != "mallory" || fmt.Sprint(u["name"]) != "Mallory") {
			t.Fatalf("bo sees user %v: presence identity was spoofed", u)
		}
		return u != nil
	})
}

func presencePayload(t *testing.T, m map[string]any) []byte {
	t.Helper()
	b, err := cbor.Marshal(map[string]any{"__presence": m})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestPeerIDOfAnotherUserIsRefused(t *testing.T) {
	s := newTestServer(t, authConfig(t))
	ana, _ := dialStatus(t, s.url+"?token="+token(t, jwt.MapClaims{"sub": "ana"}), nil)
	join(t, ana, "tab-1")
	thief, _ := dialStatus(t, s.url+"?token="+token(t, jwt.MapClaims{"sub": "mallory"}), nil)
	send(t, thief, &wire.Message{Type: wire.TypeJoin, SenderID: "tab-1"})
	recvError(t, thief, "in use by another user")
	join(t, ana, "tab-1") // ana's socket is untouched
}

func TestLimits(t *testing.T) {
	t.Run("documents per connection", func(t *testing.T) {
		s := newTestServer(t, Config{MaxDocumentsPerConn: 1})
		ws := dial(t, s.url)
		join(t, ws, "a")
		sendEphemeral(t, ws, "a", 1, []byte{0xa0})
		send(t, ws, &wire.Message{Type: wire.TypeEphemeral, SenderID: "a", DocumentID: "jN3pd9agHvY1zVqDCHrDTE3fDh1", SessionID: "s", Count: 2, Data: []byte{0xa0}})
		recvError(t, ws, "limit")
	})
	t.Run("peers per document", func(t *testing.T) {
		s := newTestServer(t, Config{MaxPeersPerDocument: 1})
		a, b := dial(t, s.url), dial(t, s.url)
		join(t, a, "a")
		join(t, b, "b")
		sendEphemeral(t, a, "a", 1, []byte{0xa0})
		testenv.WaitFor(t, "a on the document", func() bool { return s.hub.Stats().Peers == 1 })
		sendEphemeral(t, b, "b", 1, []byte{0xa0})
		recvError(t, b, "the limit")
	})
	t.Run("connections per IP", func(t *testing.T) {
		s := newTestServer(t, Config{MaxConnsPerIP: 1})
		dial(t, s.url)
		if _, status := dialStatus(t, s.url, nil); status != http.StatusTooManyRequests {
			t.Fatalf("second connection: %d, want 429", status)
		}
	})
	t.Run("origins", func(t *testing.T) {
		s := newTestServer(t, Config{AllowedOrigins: []string{"https://app.example.com"}})
		if _, status := dialStatus(t, s.url, http.Header{"Origin": {"https://evil.example"}}); status != http.StatusForbidden {
			t.Fatalf("foreign origin: %d, want 403", status)
		}
		if _, status := dialStatus(t, s.url, http.Header{"Origin": {"https://app.example.com"}}); status != http.StatusSwitchingProtocols {
			t.Fatalf("allowed origin: %d", status)
		}
	})
	t.Run("same-host origins on an open node: DNS rebinding", func(t *testing.T) {
		s := newTestServer(t, Config{AllowedHosts: []string{"docs.example.com"}})
		for _, c := range []struct {
			host string
			want int
		}{
			{"evil.example:8080", http.StatusForbidden}, // a name rebound to this server
			{"127.0.0.1:8080", http.StatusSwitchingProtocols},
			{"localhost:8080", http.StatusSwitchingProtocols},
			{"[::1]:8080", http.StatusSwitchingProtocols},
			{"docs.example.com", http.StatusSwitchingProtocols},
		} {
			h := http.Header{"Origin": {"http://" + c.host}, "Host": {c.host}}
			if _, status := dialStatus(t, s.url, h); status != c.want {
				t.Errorf("Host and Origin %s: %d, want %d", c.host, status, c.want)
			}
		}
		authed := newTestServer(t, authConfig(t)) // a token is needed anyway: the name is not
		h := http.Header{"Origin": {"http://evil.example:8080"}, "Host": {"evil.example:8080"}}
		if _, status := dialStatus(t, authed.url+"?token="+token(t, jwt.MapClaims{"sub": "a"}), h); status != http.StatusSwitchingProtocols {
			t.Errorf("same-host origin with auth: %d", status)
		}
	})
	t.Run("huge ephemeral", func(t *testing.T) {
		s := newTestServer(t, Config{MaxEphemeralBytes: 1024})
		ws := dial(t, s.url)
		join(t, ws, "a")
		sendEphemeral(t, ws, "a", 1, bytes.Repeat([]byte{0x40}, 4096))
		recvError(t, ws, "over the limit")
	})
	t.Run("rate: excess ephemerals dropped, a flood closes", func(t *testing.T) {
		s := newTestServer(t, Config{MessageRate: 5, MessageBurst: 5})
		ws := dial(t, s.url)
		join(t, ws, "a")
		for i := uint64(1); i <= 8; i++ {
			sendEphemeral(t, ws, "a", i, []byte{0xa0})
		}
		recvError(t, ws, "dropped")
		for i := uint64(9); i <= 40; i++ {
			b, _ := wire.Encode(&wire.Message{Type: wire.TypeEphemeral, SenderID: "a", DocumentID: testDoc, SessionID: "session-a", Count: i, Data: []byte{0xa0}})
			if err := ws.WriteMessage(websocket.BinaryMessage, b); err != nil {
				break // already closed
			}
		}
		expectClose(t, ws, ReasonFlood.Code)
		if n := testutil.ToFloat64(s.metrics.dropped.WithLabelValues(dropRateLimited)); n < 1 {
			t.Errorf("rate-limited drops = %v", n)
		}
	})
}

// A peer id rides on every message relayed in its name and on every
// roster of a cluster, a sessionId on every ephemeral: one over
// wire.MaxIDBytes is refused with an error naming it, counted, and the
// socket closed, with nothing of it held.
func TestLongIDsAreRefused(t *testing.T) {
	s := newTestServer(t, Config{})
	long := strings.Repeat("p", wire.MaxIDBytes+1)

	ws := dial(t, s.url)
	send(t, ws, &wire.Message{Type: wire.TypeJoin, SenderID: long, SupportedProtocolVersions: []string{"1"}})
	recvError(t, ws, fmt.Sprintf("senderId of %d bytes", len(long)))
	expectClose(t, ws, ReasonIDTooLong.Code)

	ok := dial(t, s.url)
	join(t, ok, strings.Repeat("p", wire.MaxIDBytes)) // at the limit

	eph := dial(t, s.url)
	join(t, eph, "a")
	send(t, eph, &wire.Message{Type: wire.TypeEphemeral, SenderID: "a", TargetID: serverID,
		DocumentID: testDoc, SessionID: long, Count: 1, Data: []byte{0xa0}})
	recvError(t, eph, fmt.Sprintf("sessionId of %d bytes", len(long)))
	expectClose(t, eph, ReasonIDTooLong.Code)

	if n := testutil.ToFloat64(s.metrics.errors.WithLabelValues(errIDTooLong)); n != 2 {
		t.Errorf("protocol errors for long ids: %v, want 2", n)
	}
	testenv.WaitFor(t, "the refused sockets closed", func() bool { return s.Connections() == 1 })
	if n := s.hub.Stats().Peers; n != 0 {
		t.Errorf("the document has %d peers: the refused ephemeral opened it", n)
	}
}

// TestBadInputLeavesStoredDocumentIntact throws every kind of bad input at
// a document and checks that it still loads, unchanged, for a new peer.
func TestBadInputLeavesStoredDocumentIntact(t *testing.T) {
	s := newTestServer(t, Config{})
	w := newSyncer(t, s, dial(t, s.url), "w")
	w.set("title", "intact")
	w.sync(wire.TypeSync)

	frames := [][]byte{
		{0xff, 0xfe},
		nested(200),
		must(wire.Encode(&wire.Message{Type: wire.TypeSync, SenderID: "mallory", DocumentID: testDoc, Data: []byte("junk")})),
		must(wire.Encode(&wire.Message{Type: wire.TypeSync, SenderID: "w", DocumentID: testDoc, Data: []byte{0x42, 0}})),
		must(wire.Encode(&wire.Message{Type: wire.TypeSync, SenderID: "mallory", DocumentID: testDoc, Data: []byte{0x42, 0x05, 0xff}})),
		must(wire.Encode(&wire.Message{Type: wire.TypeRequest, SenderID: "mallory", DocumentID: "1111", Data: []byte{0x42}})),
	}
	for _, f := range frames { // each on a connection of its own: most close it
		bad := dial(t, s.url)
		join(t, bad, "mallory")
		if err := bad.WriteMessage(websocket.BinaryMessage, f); err != nil {
			t.Fatal(err)
		}
		recvError(t, bad, "")
	}
	bad := dial(t, s.url)
	join(t, bad, "mallory")
	if err := bad.WriteMessage(websocket.TextMessage, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	recvError(t, bad, "binary")

	fresh := newSyncer(t, s, dial(t, s.url), "fresh")
	fresh.sync(wire.TypeRequest)
	if fresh.get("title") != "intact" {
		t.Fatalf("after bad input the document reads %q", fresh.get("title"))
	}
}

func nested(depth int) []byte {
	b := []byte{0xa2, 0x64, 't', 'y', 'p', 'e', 0x64, 's', 'y', 'n', 'c', 0x61, 'x'}
	return append(append(b, bytes.Repeat([]byte{0x81}, depth)...), 0)
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// A client cannot join under the server's own peer id, which the server
// announces to every client: what it sent in that name no stock client
// would pass back.
func TestTheServersPeerIDIsRefused(t *testing.T) {
	s := newTestServer(t, Config{})
	ws := dial(t, s.url)
	send(t, ws, &wire.Message{Type: wire.TypeJoin, SenderID: serverID, SupportedProtocolVersions: []string{"1"}})
	expectClose(t, ws, ReasonPeerTaken.Code)
}
