package doc

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/automerge/automerge-go"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tandemhq/tandem/internal/testenv"
)

// A message rehearsed in the sandbox does not hold its room: while the
// rehearsal waits (here on a worker whose start is gated), the room's other
// peers are served, and the message is applied once the rehearsal ends.
func TestRehearsalLeavesTheRoomFree(t *testing.T) {
	var gate atomic.Pointer[string]
	command := func() *exec.Cmd {
		cmd := quietSandboxCommand()
		if g := gate.Load(); g != nil { // read the gate to its end, then be the worker
			gated := exec.Command("sh", "-c", `cat "$1" >/dev/null; exec "$0"`, cmd.Path, *g)
			gated.Env = cmd.Env
			return gated
		}
		return cmd
	}
	sb, err := NewSandbox(SandboxConfig{Command: command, Workers: 1, Logger: testenv.QuietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close() })
	h := newTestHub(t, openStore(t, t.TempDir()), Config{Sandbox: sb})
	a, b := newClient("a"), newClient("b")
	a.setText(t, "title", "v1")
	a.level(t, h, false)
	b.level(t, h, true)

	fifo := filepath.Join(t.TempDir(), "gate")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	gate.Store(&fifo)
	sb.Close() // the next check starts a gated worker

	a.setText(t, "title", "v2")
	m, ok := a.state.GenerateMessage()
	if !ok {
		t.Fatal("a has nothing to send")
	}
	applied := make(chan error, 1)
	go func() {
		applied <- h.Sync(context.Background(), a.peer, SyncMessage{DocumentID: testDoc, Data: m.Bytes()})
	}()
	// Opening the gate for writing returns once the gated worker opened it
	// to read: the rehearsal of a's message has begun.
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() {
		served <- h.Ephemeral(context.Background(), b.peer, testDoc, Ephemeral{SenderID: "b", SessionID: "s", Count: 1, Data: []byte{0xa0}})
	}()
	select {
	case err := <-served:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		w.Close()
		t.Fatal("the room did not serve b while a's message was in the sandbox")
	}
	if _, ok := h.Heads(testDoc); !ok {
		t.Fatal("the room's heads could not be read during the rehearsal")
	}
	select {
	case err := <-applied:
		t.Fatalf("a's message was applied before its rehearsal ended (%v)", err)
	default:
	}
	w.Close() // the worker starts and rehearses
	if err := <-applied; err != nil {
		t.Fatal(err)
	}
	if err := h.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	b.level(t, h, false)
	if got := b.get(t, "title"); got != "v2" {
		t.Fatalf("b sees %q, want v2", got)
	}
}

// Typists racing each other, with changes from another node between them:
// each message is rehearsed at the heads it is then applied at, so the
// sandbox's copy never has to be rebuilt from the whole document (once,
// at its first check, it has no copy), and everyone converges.
func TestRehearsalsStayInStepWithTheRoom(t *testing.T) {
	sb, err := NewSandbox(SandboxConfig{Command: quietSandboxCommand, Workers: 1, Logger: testenv.QuietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close() })
	h := newTestHub(t, openStore(t, t.TempDir()), Config{Sandbox: sb})
	first := newClient("first")
	first.setText(t, "title", "start")
	first.level(t, h, false)

	const typists, rounds = 6, 30
	clients := make([]*client, typists)
	for i := range clients {
		clients[i] = newClient(fmt.Sprint("t", i))
		clients[i].level(t, h, true)
	}
	errs := make(chan error, typists+1)
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range rounds {
				if err := c.doc.RootMap().Set(fmt.Sprint("t", i), fmt.Sprint(n)); err != nil {
					errs <- err
					return
				}
				if _, err := c.doc.Commit("type"); err != nil {
					errs <- err
					return
				}
				if err := c.syncLoop(h, testDoc, false); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() { // another node's peer writes now and then
		defer wg.Done()
		remote := automerge.New()
		for n := range 10 {
			before := remote.Heads()
			remote.RootMap().Set("remote", fmt.Sprint(n))
			remote.Commit("remote")
			cs, err := remote.Changes(before...)
			if err != nil {
				errs <- err
				return
			}
			if err := h.applyRemoteChanges(testDoc, automerge.SaveChanges(cs)); err != nil {
				errs <- err
				return
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := h.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	heads := roomOf(t, h, testDoc).doc.Heads()
	for i, c := range clients {
		c.level(t, h, false)
		if !sameHeads(c.doc.Heads(), heads) || c.get(t, fmt.Sprint("t", i)) != fmt.Sprint(rounds-1) || c.get(t, "remote") != "9" {
			t.Fatalf("%s did not converge", c.peer.id)
		}
	}
	if n := testutil.ToFloat64(sb.catchUps.WithLabelValues("document")); n != 1 {
		t.Fatalf("the sandbox's copy was rebuilt from the whole document %v times, want 1 (its first check)", n)
	}
}
