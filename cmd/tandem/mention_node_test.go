package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/automerge/automerge-go"

	"github.com/tandemhq/tandem/doc/store"
	"github.com/tandemhq/tandem/internal/testenv"
	"github.com/tandemhq/tandem/transport/wire"
)

// mentionEvents sums the events of a user's notifications on a node.
func mentionEvents(t *testing.T, n *node, user string) (events int, actors []string) {
	t.Helper()
	res, err := http.Get("http://" + n.addr + "/api/notifications?limit=100&user=" + user)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var page struct {
		Notifications []struct {
			Kind   string `json:"kind"`
			Events int    `json:"events"`
			Actors []struct {
				ID string `json:"id"`
			} `json:"actors"`
		} `json:"notifications"`
	}
	if err := json.NewDecoder(res.Body).Decode(&page); err != nil {
		t.Fatal(err)
	}
	for _, nt := range page.Notifications {
		if nt.Kind == "mention" {
			events += nt.Events
			for _, a := range nt.Actors {
				actors = append(actors, a.ID)
			}
		}
	}
	return events, actors
}

// TestMentionSurvivesKill: a mention typed just before a SIGKILL, while
// its author's edits have not settled (nothing was reported yet), is
// reported after the restart, for its author, once. Each round types one
// more "@bo" and kills the node the moment the change is acknowledged,
// also while the restarted node is still handing over what the killed one
// owed; bo ends with exactly one mention event per round.
func TestMentionSurvivesKill(t *testing.T) {
	rounds := 20
	if testing.Short() {
		rounds = 5
	}
	dir := t.TempDir()
	args := []string{"--notify-window", "100ms"}
	writer := automerge.New()
	if err := writer.RootMap().Set("text", automerge.NewText("Plans\n")); err != nil {
		t.Fatal(err)
	}
	for round := range rounds {
		n := startNode(t, dir, args...)
		p := dialPeer(t, n, "peer-ana", writer)
		v, err := writer.RootMap().Get("text")
		if err != nil {
			t.Fatal(err)
		}
		if err := v.Text().Append(fmt.Sprintf("@bo %d ", round)); err != nil {
			t.Fatal(err)
		}
		head, err := writer.Commit(fmt.Sprintf("round %d", round))
		if err != nil {
			t.Fatal(err)
		}
		p.syncUntil(wire.TypeSync, func(heads []automerge.ChangeHash) bool { return hasHead(heads, head) })
		n.kill()
	}

	n := startNode(t, dir, args...)
	var events int // at the last look
	var actors []string
	defer func() {
		if events < rounds {
			t.Logf("bo has %d mention events for %d mentions typed before a kill", events, rounds)
		}
	}()
	testenv.WaitWithin(t, fmt.Sprintf("bo's %d mention events", rounds), 60*time.Second, func() bool {
		events, actors = mentionEvents(t, n, "bo")
		if events > rounds {
			t.Fatalf("bo has %d mention events for %d mentions: a mention was reported twice", events, rounds)
		}
		return events == rounds
	})
	for _, a := range actors {
		if a != "peer-ana" {
			t.Fatalf("a mention is attributed to %q, want the peer that typed it", a)
		}
	}
	// Stopped cleanly, the node leaves no journal behind: nothing more can
	// be reported.
	n.cmd.Process.Signal(syscall.SIGTERM)
	<-n.done
	s, err := store.OpenBolt(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if js, err := s.Journals(t.Context()); err != nil || len(js) != 0 {
		t.Fatalf("journals left after a clean stop: %+v (%v)", js, err)
	}
}
