package main

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/automerge/automerge-go"
	"github.com/golang-jwt/jwt/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/tandemhq/tandem/internal/testenv"
	"github.com/tandemhq/tandem/transport/wire"
)

func TestWebhookURLsRepeatOrComeCommaSeparated(t *testing.T) {
	env := map[string]string{"TANDEM_WEBHOOK_SECRET": "whsec_x"}
	c, err := parseConfig([]string{"--webhook-url", "http://a/1,http://b/2", "--webhook-url", "http://c/3"},
		func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"http://a/1", "http://b/2", "http://c/3"}; !reflect.DeepEqual(c.WebhookURLs, want) {
		t.Fatalf("webhook URLs %q, want %q", c.WebhookURLs, want)
	}
	if c.WebhookDebounce != 2*time.Second || c.WebhookMaxWait != 10*time.Second {
		t.Fatalf("debounce %v, maximum wait %v, want 2s and 10s", c.WebhookDebounce, c.WebhookMaxWait)
	}
	for _, args := range [][]string{
		{"--webhook-url", "http://a/"}, // no secret
		{"--webhook-debounce", "5s", "--webhook-max-wait", "1s"},
		{"--webhook-debounce", "1ms"},
	} {
		if _, err := parseConfig(args, func(string) string { return "" }, io.Discard); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
}

// A document edited by two users on two nodes, over the real Redis and
// PostgreSQL, within one debounce (3 s: ample for the two edits on a
// loaded machine): one document.changed, naming both.
func TestADocumentEditedOnTwoNodesIsOneWebhook(t *testing.T) {
	const authSecret = "a-node-test-secret-of-32-bytes!!"
	const secret = "whsec_dGFuZGVtLXdlYmhvb2stdGVzdC1rZXktMDEyMzQ1Njc="
	var mu sync.Mutex
	var changed []map[string]any
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var e struct {
			Type string         `json:"type"`
			Data map[string]any `json:"data"`
		}
		if err := json.NewDecoder(r.Body).Decode(&e); err != nil || r.Header.Get("webhook-signature") == "" {
			t.Errorf("a delivery that is not a signed event: %v", err)
		}
		mu.Lock()
		if e.Type == "document.changed" && e.Data["documentId"] == nodeTestDoc {
			changed = append(changed, e.Data)
		}
		mu.Unlock()
	}))
	defer recv.Close()
	pg := testenv.PostgresSchema(t)
	args := []string{"--redis-url", "redis://" + testenv.RedisAddr() + "/0", "--postgres-url", pg, "--auth-secret", authSecret,
		"--webhook-url", recv.URL, "--webhook-secret", secret, "--webhook-events", "document.changed",
		"--webhook-debounce", "3s", "--webhook-max-wait", "6s"}
	n1 := startNode(t, t.TempDir(), append(args, "--node-id", "hook1")...)
	n2 := startNode(t, t.TempDir(), append(args, "--node-id", "hook2")...)
	token := func(user string) string {
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
			"sub": user, "exp": time.Now().Add(time.Hour).Unix(), "docs": map[string]string{"*": "write"},
		}).SignedString([]byte(authSecret))
		if err != nil {
			t.Fatal(err)
		}
		return "?token=" + tok
	}
	var made []string // the heads the two edits made
	edit := func(n *node, user, key string) {
		d := automerge.New()
		if err := d.RootMap().Set(key, user); err != nil {
			t.Fatal(err)
		}
		head, err := d.Commit(key)
		if err != nil {
			t.Fatal(err)
		}
		made = append(made, head.String())
		p := dialPeerQuery(t, n, token(user), "peer-"+user, d)
		p.syncUntil(wire.TypeRequest, func(heads []automerge.ChangeHash) bool { return hasHead(heads, head) })
	}
	edit(n1, "ana", "a")
	edit(n2, "bo", "b")

	db, err := sql.Open("pgx", pg)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	count := func(query string) int {
		var n int
		if err := db.QueryRow(query).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	testenv.WaitWithin(t, "the window closed and its deliveries done", 30*time.Second, func() bool {
		mu.Lock()
		got := len(changed)
		mu.Unlock()
		return got > 0 && count(`SELECT COUNT(*) FROM tandem_webhook_windows`) == 0 &&
			count(`SELECT COUNT(*) FROM river_job WHERE kind = 'tandem_webhook_delivery' AND state <> 'completed'`) == 0
	})
	mu.Lock()
	defer mu.Unlock()
	if len(changed) != 1 {
		t.Fatalf("%d document.changed for one window edited on two nodes: %v", len(changed), changed)
	}
	if users := fmt.Sprint(changed[0]["users"]); users != "[ana bo]" {
		t.Fatalf("users %s, want [ana bo]", users)
	}
	// Each node has both changes within the window: it is named by both.
	slices.Sort(made)
	if heads := fmt.Sprint(changed[0]["heads"]); heads != fmt.Sprint(made) {
		t.Fatalf("heads %s, want both edits' %v", heads, made)
	}
}
