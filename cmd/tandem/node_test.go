package main

// Tests that run the tandem binary as a process and speak the protocol to
// it over real sockets: what only a whole node shows (a SIGKILL, a fault
// that would abort the process).

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/automerge/automerge-go"
	"github.com/gorilla/websocket"

	"github.com/tandemhq/tandem/internal/testenv"
	"github.com/tandemhq/tandem/transport/wire"
)

const nodeTestDoc = "2gzyVEWRbEhwBcRvStKvD3gBE5pp"

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// tandemBinary returns $TANDEM_BIN if set, or else builds cmd/tandem once
// per test process.
func tandemBinary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("TANDEM_BIN"); bin != "" {
		return bin
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "tandem-bin-")
		if err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "tandem")
		out, err := exec.Command("go", "build", "-o", builtBin, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

// node is a tandem process.
type node struct {
	cmd  *exec.Cmd
	addr string
	done chan struct{}
}

// startNode runs tandem on a free port with the data directory and extra
// flags, and returns once it serves.
func startNode(t *testing.T, dataDir string, args ...string) *node {
	t.Helper()
	cmd := exec.Command(tandemBinary(t), append([]string{"--addr", "127.0.0.1:0", "--data-dir", dataDir}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n := &node{cmd: cmd, done: make(chan struct{})}
	addr := make(chan string, 1)
	go func() {
		defer close(n.done)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var rec struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "tandem serving" {
				addr <- rec.Addr
			}
		}
		cmd.Wait()
	}()
	t.Cleanup(func() { n.kill() })
	select {
	case n.addr = <-addr:
	case <-n.done:
		t.Fatal("tandem exited before serving")
	case <-time.After(30 * time.Second):
		t.Fatal("tandem did not serve within 30 s")
	}
	return n
}

// kill ends the process with SIGKILL and waits for it.
func (n *node) kill() {
	n.cmd.Process.Kill()
	<-n.done
}

// alive reports whether the process is still running.
func (n *node) alive() bool {
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

// rawPeer speaks the automerge-repo protocol to a node with its own
// automerge document, as a stock client does.
type rawPeer struct {
	t     *testing.T
	id    string
	ws    *websocket.Conn
	doc   *automerge.Doc
	state *automerge.SyncState
}

func dialPeer(t *testing.T, n *node, id string, d *automerge.Doc) *rawPeer {
	t.Helper()
	return dialPeerQuery(t, n, "", id, d)
}

// dialPeerQuery is dialPeer with a query on the socket's URL (?token=…).
func dialPeerQuery(t *testing.T, n *node, query, id string, d *automerge.Doc) *rawPeer {
	t.Helper()
	ws, _, err := websocket.DefaultDialer.Dial("ws://"+n.addr+"/ws"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	p := &rawPeer{t: t, id: id, ws: ws, doc: d, state: automerge.NewSyncState(d)}
	p.send(&wire.Message{Type: wire.TypeJoin, SenderID: id, SupportedProtocolVersions: []string{wire.ProtocolV1}})
	if m := p.recv(); m.Type != wire.TypePeer {
		t.Fatalf("%s: got %s, want peer", id, m.Type)
	}
	return p
}

func (p *rawPeer) send(m *wire.Message) {
	p.t.Helper()
	b, err := wire.Encode(m)
	if err != nil {
		p.t.Fatal(err)
	}
	if err := p.ws.WriteMessage(websocket.BinaryMessage, b); err != nil {
		p.t.Fatal(err)
	}
}

// recv reads the next message; a closed socket is fatal.
func (p *rawPeer) recv() *wire.Message {
	p.t.Helper()
	m, err := p.next()
	if err != nil {
		p.t.Fatalf("%s: %v", p.id, err)
	}
	return m
}

func (p *rawPeer) next() (*wire.Message, error) {
	p.ws.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, b, err := p.ws.ReadMessage()
	if err != nil {
		return nil, err
	}
	return wire.Decode(b)
}

// sendSync sends what automerge has for the server, if anything.
func (p *rawPeer) sendSync(typ string) bool {
	m, ok := p.state.GenerateMessage()
	if ok {
		p.send(&wire.Message{Type: typ, SenderID: p.id, DocumentID: nodeTestDoc, Data: m.Bytes()})
	}
	return ok
}

// syncUntil runs the sync loop until done holds after a server message,
// answering every sync message as automerge-repo does.
func (p *rawPeer) syncUntil(typ string, done func(serverHeads []automerge.ChangeHash) bool) {
	p.t.Helper()
	p.sendSync(typ)
	for {
		m := p.recv()
		switch m.Type {
		case wire.TypeSync:
			sm, err := p.state.ReceiveMessage(m.Data)
			if err != nil {
				p.t.Fatal(err)
			}
			if done(sm.Heads()) {
				return
			}
			p.sendSync(wire.TypeSync)
		case wire.TypeError:
			p.t.Fatalf("%s: error from the server: %s", p.id, m.ErrorMessage)
		case wire.TypeDocUnavailable:
			p.t.Fatalf("%s: the server does not have the document", p.id)
		}
	}
}

func hasHead(heads []automerge.ChangeHash, h automerge.ChangeHash) bool {
	for _, x := range heads {
		if x == h {
			return true
		}
	}
	return false
}

// TestAcknowledgedChangeSurvivesKill: the moment the server's reply names
// a change as one of its heads, the change is on disk. 100 rounds: edit,
// wait for that reply, SIGKILL at once, restart, and find every change
// acknowledged so far.
func TestAcknowledgedChangeSurvivesKill(t *testing.T) {
	rounds := 100
	if testing.Short() {
		rounds = 10
	}
	dir := t.TempDir()
	writer := automerge.New()
	for round := range rounds {
		n := startNode(t, dir)
		if round > 0 {
			checkStored(t, n, round)
		}
		p := dialPeer(t, n, "writer", writer)
		if err := writer.RootMap().Set(fmt.Sprintf("k%d", round), int64(round)); err != nil {
			t.Fatal(err)
		}
		head, err := writer.Commit(fmt.Sprintf("round %d", round))
		if err != nil {
			t.Fatal(err)
		}
		p.syncUntil(wire.TypeSync, func(heads []automerge.ChangeHash) bool { return hasHead(heads, head) })
		n.kill()
	}
	checkStored(t, startNode(t, dir), rounds)
}

// checkStored reads the document from a node with a fresh peer and checks
// it holds keys k0 … k<want-1>.
func checkStored(t *testing.T, n *node, want int) {
	t.Helper()
	r := dialPeer(t, n, fmt.Sprintf("reader-%d", want), automerge.New())
	has := func() bool {
		v, err := r.doc.RootMap().Get(fmt.Sprintf("k%d", want-1))
		return err == nil && v.Kind() == automerge.KindInt64
	}
	r.syncUntil(wire.TypeRequest, func([]automerge.ChangeHash) bool { return has() })
	for i := range want {
		v, err := r.doc.RootMap().Get(fmt.Sprintf("k%d", i))
		if err != nil || v.Kind() != automerge.KindInt64 || v.Int64() != int64(i) {
			t.Fatalf("after %d kills, k%d is %v (%v): an acknowledged change was lost", want, i, v, err)
		}
	}
	r.ws.Close()
}

// expectRefusal reads until the server's error and returns it, then
// checks that the connection is still open: a refused change costs the
// peer the document, not its connection.
func expectRefusal(t *testing.T, p *rawPeer) string {
	t.Helper()
	var text string
	for text == "" {
		m := p.recv()
		if m.Type == wire.TypeError {
			text = m.ErrorMessage
		}
	}
	p.send(&wire.Message{Type: wire.TypeHeartbeat, SenderID: p.id, Seq: 7})
	for {
		if m := p.recv(); m.Type == wire.TypeHeartbeatAck {
			return text
		}
	}
}

// TestHostileChangesAreRefusedWhileOthersSync: the sync message that
// aborted automerge, and a change over the byte limit, each get a
// clear error naming the document (the connection stays open); the node lives on, and its other peers keep
// editing the document together.
func TestHostileChangesAreRefusedWhileOthersSync(t *testing.T) {
	repro, err := testenv.ReadFuzzSeed(filepath.Join("..", "..", "doc", "testdata", "fuzz", "FuzzReceiveGenerate", "repro-seq-gap-aborts-generate"))
	if err != nil {
		t.Fatal(err)
	}
	n := startNode(t, t.TempDir(), "--max-change-bytes", "16000")
	a := dialPeer(t, n, "ana", automerge.New())
	b := dialPeer(t, n, "bo", automerge.New())
	edit := func(value string) {
		t.Helper()
		if err := a.doc.RootMap().Set("title", value); err != nil {
			t.Fatal(err)
		}
		head, err := a.doc.Commit(value)
		if err != nil {
			t.Fatal(err)
		}
		a.syncUntil(wire.TypeSync, func(h []automerge.ChangeHash) bool { return hasHead(h, head) })
		b.syncUntil(wire.TypeRequest, func([]automerge.ChangeHash) bool {
			v, err := b.doc.RootMap().Get("title")
			return err == nil && v.Kind() == automerge.KindStr && v.Str() == value
		})
	}
	edit("before")

	m := dialPeer(t, n, "mallory", automerge.New())
	m.send(&wire.Message{Type: wire.TypeSync, SenderID: "mallory", DocumentID: nodeTestDoc, Data: repro})
	if text := expectRefusal(t, m); !strings.Contains(text, "refused") || !strings.Contains(text, nodeTestDoc) {
		t.Fatalf("the repro got %q, want a refusal naming the document", text)
	}
	if !n.alive() {
		t.Fatal("the node died")
	}
	edit("after the repro")

	bomb := automerge.New()
	l := automerge.NewList()
	bomb.RootMap().Set("list", l)
	for range 2000 {
		l.Append(nil)
	}
	bomb.Commit("bomb")
	m2 := dialPeer(t, n, "mallory2", bomb)
	m2.sendSync(wire.TypeSync)
	for {
		msg, err := m2.next()
		if err != nil {
			t.Fatal(err)
		}
		if msg.Type == wire.TypeSync {
			m2.state.ReceiveMessage(msg.Data)
			m2.sendSync(wire.TypeSync) // now with the change
			break
		}
	}
	if text := expectRefusal(t, m2); !strings.Contains(text, "16000") || !strings.Contains(text, nodeTestDoc) {
		t.Fatalf("the bomb got %q, want the limit and the document named", text)
	}
	edit("after the bomb")
	if v, _ := b.doc.RootMap().Get("list"); v.Kind() != automerge.KindVoid {
		t.Fatalf("the refused list reached another peer: %v", v)
	}
}
