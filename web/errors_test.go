package web

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tandemhq/tandem/doc/notify"
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
		Logger:        quietLogger(),
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

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
