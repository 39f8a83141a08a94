package transport

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tandemhq/tandem/doc/store"
	"github.com/tandemhq/tandem/internal/testenv"

	"github.com/fxamacker/cbor/v2"
	"github.com/golang-jwt/jwt/v5"
	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/tandemhq/tandem/awareness"
	"github.com/tandemhq/tandem/doc"
	"github.com/tandemhq/tandem/transport/redisbus"
	"github.com/tandemhq/tandem/transport/wire"
)

var _ awareness.LastSeenStore = (*testenv.MemoryLastSeen)(nil)

// clusterNode is one node with tokens on: WebSocket server, documents,
// presence and the Redis bus.
type clusterNode struct {
	srv      *Server
	url      string
	presence *awareness.Hub
	seen     *testenv.MemoryLastSeen
}

func startClusterNode(t *testing.T, redisAddr, id string) *clusterNode {
	t.Helper()
	logger := testenv.QuietLogger()
	client := redis.NewClient(&redis.Options{Addr: redisAddr})
	// A long node TTL: nothing here waits for a beat, and no node is
	// expired while Redis is stopped.
	bus, err := redisbus.New(redisbus.Config{Client: client, NodeID: id, NodeTTL: 30 * time.Second, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.OpenBolt(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() }) // after the hub's Close: registered before it
	hub, err := doc.NewHub(doc.Config{Store: st, Logger: logger, Cluster: bus})
	if err != nil {
		t.Fatal(err)
	}
	go hub.Run(context.Background()) // until hub.Close
	seen := &testenv.MemoryLastSeen{}
	presence, err := awareness.New(awareness.Config{Logger: logger, Replicator: bus, Directory: bus, LastSeen: seen})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	bus.Attach(hub, presence)
	go func() { defer wg.Done(); bus.Run(ctx) }()
	go func() { defer wg.Done(); presence.Run(ctx) }()

	cfg := authConfig(t)
	cfg.Documents, cfg.Presence, cfg.Bus, cfg.Claims = hub, presence, bus, bus
	cfg.PeerID, cfg.StorageID, cfg.Logger = "tandem-"+id, storageID, logger
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s)
	t.Cleanup(func() {
		s.Close(context.Background())
		hs.Close()
		cancel()
		wg.Wait()
		hub.Close(context.Background())
		client.Close()
	})
	return &clusterNode{srv: s, url: "ws" + strings.TrimPrefix(hs.URL, "http"), presence: presence, seen: seen}
}

func (n *clusterNode) dial(t *testing.T, claims jwt.MapClaims) *websocket.Conn {
	t.Helper()
	ws, status := dialStatus(t, n.url+"?token="+token(t, claims), nil)
	if ws == nil {
		t.Fatalf("dial: status %d", status)
	}
	return ws
}

func user(sub, name, access string) jwt.MapClaims {
	return jwt.MapClaims{"sub": sub, "name": name, "docs": map[string]string{"*": access}}
}

// heard is one presence message a socket received.
type heard struct {
	sender  string
	typ     string
	channel string
	state   map[string]any // the channels it carries, decoded
}

// listen reads presence from ws until until returns true for one, and
// returns everything heard up to and including it.
func listen(t *testing.T, ws *websocket.Conn, what string, until func(heard) bool) []heard {
	t.Helper()
	var out []heard
	deadline := time.Now().Add(15 * time.Second)
	for {
		ws.SetReadDeadline(deadline)
		_, b, err := ws.ReadMessage()
		if err != nil {
			t.Fatalf("waiting for %s: %v (heard %+v)", what, err, out)
		}
		m, err := wire.Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		if m.Type == wire.TypeError {
			t.Fatalf("waiting for %s: error %q", what, m.ErrorMessage)
		}
		var env struct {
			P struct {
				Type    string                     `cbor:"type"`
				Channel string                     `cbor:"channel"`
				Value   cbor.RawMessage            `cbor:"value"`
				State   map[string]cbor.RawMessage `cbor:"state"`
			} `cbor:"__presence"`
		}
		if m.Type != wire.TypeEphemeral || cbor.Unmarshal(m.Data, &env) != nil || env.P.Type == "" {
			continue
		}
		h := heard{sender: m.SenderID, typ: env.P.Type, channel: env.P.Channel, state: map[string]any{}}
		raw := env.P.State
		if env.P.Type == "update" {
			raw = map[string]cbor.RawMessage{env.P.Channel: env.P.Value}
		}
		for ch, v := range raw {
			var x any
			if cbor.Unmarshal(v, &x) == nil {
				h.state[ch] = x
			}
		}
		out = append(out, h)
		if until(h) {
			return out
		}
	}
}

// userName is the name in a user channel value, if h carries one.
func (h heard) userName() (string, bool) {
	u, ok := h.state["user"].(map[any]any)
	if !ok {
		return "", false
	}
	return fmt.Sprint(u["name"]), true
}

// fence sends a repeated join and reads until the server answers it: the
// socket is still joined as peer and everything sent before was handled.
func fence(t *testing.T, ws *websocket.Conn, peer string) {
	t.Helper()
	send(t, ws, &wire.Message{Type: wire.TypeJoin, SenderID: peer})
	ws.SetReadDeadline(time.Now().Add(15 * time.Second))
	for {
		_, b, err := ws.ReadMessage()
		if err != nil {
			t.Fatalf("%s's socket: %v", peer, err)
		}
		m, err := wire.Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		switch m.Type {
		case wire.TypePeer:
			return
		case wire.TypeError:
			t.Fatalf("%s's socket got error %q", peer, m.ErrorMessage)
		}
	}
}

func cursorUpdate(t *testing.T, v string) []byte {
	return presencePayload(t, map[string]any{"type": "update", "channel": "cursor", "value": v})
}

// observe joins an observer to the document on n and waits until it sees
// peer with cursor.
func observe(t *testing.T, n *clusterNode, id, peer, cursor string) *websocket.Conn {
	t.Helper()
	ws := n.dial(t, user(id, id, "write"))
	join(t, ws, id)
	sendEphemeral(t, ws, id, 1, presencePayload(t, map[string]any{"type": "heartbeat"}))
	listen(t, ws, id+" seeing "+peer, func(h heard) bool { return h.sender == peer && h.state["cursor"] == cursor })
	return ws
}

// checkQuiet fails if, among what an observer heard, peer said goodbye or
// appeared under another name than want.
func checkQuiet(t *testing.T, who string, got []heard, peer, want string) {
	t.Helper()
	for _, h := range got {
		if h.sender != peer {
			continue
		}
		if h.typ == "goodbye" {
			t.Fatalf("%s heard a goodbye for %s: %+v", who, peer, got)
		}
		if name, ok := h.userName(); ok && name != want {
			t.Fatalf("%s saw %s named %q, want %q", who, peer, name, want)
		}
	}
}

// TestPeerIDTakeoverAcrossNodesIsRefused: a read-only user joining node B
// with the peer id of a user connected to node A is refused, as on one
// node, and the victim is untouched everywhere.
func TestPeerIDTakeoverAcrossNodesIsRefused(t *testing.T) {
	rds := testenv.StartRedis(t, 0)
	a, b := startClusterNode(t, rds.Addr(), "node-a"), startClusterNode(t, rds.Addr(), "node-b")

	victim := a.dial(t, user("victim", "Victim", "write"))
	join(t, victim, "P")
	sendEphemeral(t, victim, "P", 1, cursorUpdate(t, "1@v"))
	obsA := observe(t, a, "obs-a", "P", "1@v")
	obsB := observe(t, b, "obs-b", "P", "1@v")

	attacker := b.dial(t, user("attacker", "Mallory", "read"))
	send(t, attacker, &wire.Message{Type: wire.TypeJoin, SenderID: "P",
		PeerMetadata: &wire.PeerMetadata{IsEphemeral: true}, SupportedProtocolVersions: []string{"1"}})
	recvError(t, attacker, "in use by another user")
	if n := testutil.ToFloat64(b.srv.metrics.errors.WithLabelValues(errPeerTaken)); n != 1 {
		t.Fatalf("node B counted %v refusals, want 1", n)
	}
	expectClose(t, attacker, websocket.ClosePolicyViolation)
	attacker.Close()
	testenv.WaitFor(t, "node B done with the attacker", func() bool { return b.srv.Connections() == 1 })

	// The fence: the victim's next cursor reaches both observers after
	// anything the attacker's visit could have made either node say.
	sendEphemeral(t, victim, "P", 2, cursorUpdate(t, "2@v"))
	for who, ws := range map[string]*websocket.Conn{"obs-a": obsA, "obs-b": obsB} {
		got := listen(t, ws, who+" hearing the victim's next cursor", func(h heard) bool {
			return h.sender == "P" && h.state["cursor"] == "2@v"
		})
		checkQuiet(t, who, got, "P", "Victim")
	}
	for name, n := range map[string]*clusterNode{"A": a, "B": b} {
		if st := n.presence.UserPresence(t.Context(), "victim").Status; st != awareness.StatusOnline {
			t.Errorf("node %s sees the victim %s", name, st)
		}
		if n.seen.Has("victim") {
			t.Errorf("node %s stored a last-seen for the victim", name)
		}
		for _, v := range n.presence.DocumentPresence(testDoc) {
			if v.PeerID == "P" && (v.UserID != "victim" || v.Name != "Victim") {
				t.Errorf("node %s shows P as %s (%v)", name, v.UserID, v.Name)
			}
		}
	}
	fence(t, victim, "P") // the victim's socket is still joined as P
}

// TestPeerIDMovesAcrossNodesForSameUser: the same user joining node B with
// a peer id its connection holds on node A replaces that connection, as
// on one node: A closes it (4000) without a goodbye in the peer's name,
// and the peer goes on from B.
func TestPeerIDMovesAcrossNodesForSameUser(t *testing.T) {
	rds := testenv.StartRedis(t, 0)
	a, b := startClusterNode(t, rds.Addr(), "node-a"), startClusterNode(t, rds.Addr(), "node-b")

	old := a.dial(t, user("ana", "Ana", "write"))
	join(t, old, "P")
	sendEphemeral(t, old, "P", 1, cursorUpdate(t, "1@a"))
	obsA := observe(t, a, "obs-a", "P", "1@a")
	obsB := observe(t, b, "obs-b", "P", "1@a")

	fresh := b.dial(t, user("ana", "Ana", "write"))
	join(t, fresh, "P")
	expectClose(t, old, ReasonReplaced.Code)
	testenv.WaitFor(t, "node A done with the old socket", func() bool { return a.srv.Connections() == 1 })

	sendEphemeral(t, fresh, "P", 2, cursorUpdate(t, "2@a")) // the client's session goes on
	for who, ws := range map[string]*websocket.Conn{"obs-a": obsA, "obs-b": obsB} {
		got := listen(t, ws, who+" hearing P from node B", func(h heard) bool {
			return h.sender == "P" && h.state["cursor"] == "2@a"
		})
		checkQuiet(t, who, got, "P", "Ana")
	}
	for name, n := range map[string]*clusterNode{"A": a, "B": b} {
		if st := n.presence.UserPresence(t.Context(), "ana").Status; st != awareness.StatusOnline {
			t.Errorf("node %s sees ana %s", name, st)
		}
		if n.seen.Has("ana") {
			t.Errorf("node %s stored a last-seen for ana, who only moved", name)
		}
	}

	// When the peer leaves node B, everyone hears its goodbye.
	fresh.Close()
	for who, ws := range map[string]*websocket.Conn{"obs-a": obsA, "obs-b": obsB} {
		listen(t, ws, who+" hearing P's goodbye", func(h heard) bool { return h.sender == "P" && h.typ == "goodbye" })
	}
	testenv.WaitFor(t, "node B storing ana's last-seen", func() bool { return b.seen.Has("ana") })
}

// TestPeerIDWhileRedisIsDown: with Redis away a node still refuses a peer
// id it knows to be another user's, and accepts the rest.
func TestPeerIDWhileRedisIsDown(t *testing.T) {
	rds := testenv.StartRedis(t, 0)
	a, b := startClusterNode(t, rds.Addr(), "node-a"), startClusterNode(t, rds.Addr(), "node-b")
	victim := a.dial(t, user("victim", "Victim", "write"))
	join(t, victim, "P")
	sendEphemeral(t, victim, "P", 1, cursorUpdate(t, "1@v"))
	observe(t, b, "obs-b", "P", "1@v")

	rds.Stop()
	attacker := b.dial(t, user("attacker", "Mallory", "read"))
	send(t, attacker, &wire.Message{Type: wire.TypeJoin, SenderID: "P",
		PeerMetadata: &wire.PeerMetadata{IsEphemeral: true}, SupportedProtocolVersions: []string{"1"}})
	recvError(t, attacker, "in use by another user")
	other := b.dial(t, user("victim", "Victim", "write"))
	join(t, other, "Q") // availability: a peer id no one is known to hold
	fence(t, victim, "P")
}
