package web

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/tandemhq/tandem/internal/auth"
	"github.com/tandemhq/tandem/internal/testenv"
	"github.com/tandemhq/tandem/web/notify"
)

// errInternalCause is what a failing dependency says: addresses and database
// text that are the operator's business, not the client's.
var errInternalCause = errors.New(`dial tcp 10.1.2.3:5432: pq: relation "notifications" does not exist`)

// failingNotifications fails every call with errInternalCause.
type failingNotifications struct{}

func (failingNotifications) PostMany(context.Context, []notify.Event) error { return errInternalCause }
func (failingNotifications) List(context.Context, string, notify.ListOptions) ([]*notify.Notification, int, int64, error) {
	return nil, 0, 0, errInternalCause
}
func (failingNotifications) MarkRead(context.Context, string, []int64) (int, error) {
	return 0, errInternalCause
}
func (failingNotifications) Unread(context.Context, string) (int, error) { return 0, errInternalCause }
func (failingNotifications) Subscribe(string) *notify.Subscription       { return nil }

// A failure inside the server, or a dependency /readyz cannot reach, gets
// a plain message: the cause stays in the log.
func TestServerFailuresDoNotLeakInternals(t *testing.T) {
	srv := httptest.NewServer(NewRouter(Config{
		Notifications: failingNotifications{},
		Ready:         []Check{{Name: "postgres", Ping: func(context.Context) error { return errInternalCause }}},
		Logger:        testenv.QuietLogger(),
	}))
	t.Cleanup(srv.Close)
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/readyz", ""},
		{"POST", "/api/notifications", `{"recipient":"ana","kind":"x","actor":"bo"}`},
		{"GET", "/api/notifications?user=ana", ""},
		{"POST", "/api/notifications/read?user=ana", `{"all":true}`},
		{"GET", "/api/notifications/stream?user=ana", ""},
	} {
		req, _ := http.NewRequest(c.method, srv.URL+c.path, strings.NewReader(c.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode < 500 {
			t.Errorf("%s %s: %d, want a server error", c.method, c.path, resp.StatusCode)
		}
		for _, secret := range []string{"10.1.2.3", "5432", "relation", "pq:"} {
			if strings.Contains(string(body), secret) {
				t.Errorf("%s %s answered %s: it tells %q", c.method, c.path, body, secret)
			}
		}
	}
}

// oneNotification lists one mention in a document whose title is secret.
type oneNotification struct{ failingNotifications }

func (oneNotification) List(context.Context, string, notify.ListOptions) ([]*notify.Notification, int, int64, error) {
	return []*notify.Notification{{ID: 1, Recipient: "bo", Kind: notify.KindMention, Document: "2gzyVEWRbEhwBcRvStKvD3gBE5pp",
		Title: "Secret plan", Text: "Ana mentioned you in Secret plan", Actors: []notify.Actor{{ID: "ana", Name: "Ana"}}, ActorCount: 1, Events: 1}}, 1, 0, nil
}

// A recipient whose token cannot read the document learns that Ana
// mentioned them, not the document's title or id.
func TestNotificationsHideDocumentsTheReaderCannotRead(t *testing.T) {
	secret := []byte("a-web-test-secret-of-32-bytes!!!")
	v, err := auth.NewVerifier(auth.Config{Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(NewRouter(Config{Notifications: oneNotification{}, Auth: v, Logger: testenv.QuietLogger()}))
	t.Cleanup(srv.Close)
	list := func(docs map[string]string) string {
		tok, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "bo", "docs": docs, "exp": time.Now().Add(time.Hour).Unix()}).SignedString(secret)
		req, _ := http.NewRequest("GET", srv.URL+"/api/notifications", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("list: %d %s", resp.StatusCode, b)
		}
		return string(b)
	}
	outside := list(map[string]string{"jN3pd9agHvY1zVqDCHrDTE3fDh1": "read"})
	if strings.Contains(outside, "Secret plan") || strings.Contains(outside, "2gzyVEWRbEhwBcRvStKvD3gBE5pp") || !strings.Contains(outside, "Ana mentioned you in a document") {
		t.Fatalf("a reader without access sees %s", outside)
	}
	if inside := list(map[string]string{"*": "read"}); !strings.Contains(inside, "Ana mentioned you in Secret plan") {
		t.Fatalf("a reader with access sees %s", inside)
	}
}
