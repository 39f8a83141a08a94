package web

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tandemhq/tandem/web/notify"
)

// notifyServer runs the notification API on a real service with an SQLite
// store in a temporary directory.
func notifyServer(t *testing.T) (*httptest.Server, *notify.Metrics) {
	t.Helper()
	db, err := notify.OpenSQLite(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	m := notify.NewMetrics(prometheus.NewRegistry())
	svc, err := notify.New(context.Background(), notify.Config{DB: db, Window: time.Second, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close(context.Background()) })
	srv := httptest.NewServer(NewRouter(Config{Notifications: svc}))
	t.Cleanup(srv.Close)
	return srv, m
}

func TestNotificationAPIRefusesBadInput(t *testing.T) {
	srv, m := notifyServer(t)
	cases := []struct {
		name, method, path, body string
		want                     int
		says                     string
	}{
		{"not JSON", "POST", "/api/notifications", "{recipient", 400, "body must be JSON"},
		{"bad kind", "POST", "/api/notifications", `{"recipient":"ana","kind":"Bad Kind!","actor":"bo"}`, 400, "kind must match"},
		{"no actor", "POST", "/api/notifications", `{"recipient":"ana","kind":"x"}`, 400, "actor"},
		{"too large", "POST", "/api/notifications", `{"recipient":"ana","kind":"x","actor":"bo","payload":"` + strings.Repeat("a", 5<<20) + `"}`, 400, "at most"},
		{"batch too big", "POST", "/api/notifications", "[" + strings.TrimSuffix(strings.Repeat(`{"recipient":"a","kind":"x","actor":"b"},`, 1001), ",") + "]", 400, "1 to 1000"},
		{"empty batch", "POST", "/api/notifications", "[]", 400, "1 to 1000"},
		{"list without user", "GET", "/api/notifications", "", 400, "user is required"},
		{"bad limit", "GET", "/api/notifications?user=ana&limit=0", "", 400, "must be an integer"},
		{"read nothing", "POST", "/api/notifications/read?user=ana", `{}`, 400, `or {\"all\": true}`},
		{"stream without user", "GET", "/api/notifications/stream", "", 400, "user is required"},
	}
	for _, c := range cases {
		req, _ := http.NewRequest(c.method, srv.URL+c.path, strings.NewReader(c.body))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != c.want || !strings.Contains(string(body), c.says) {
			t.Errorf("%s: %d %s, want %d saying %q", c.name, res.StatusCode, body, c.want, c.says)
		}
	}
	if n := testutil.ToFloat64(m.Events.WithLabelValues("refused")); n < 2 {
		t.Errorf("refused events counted: %v", n)
	}
	// Nothing bad was queued; a good event still is.
	res, err := http.Post(srv.URL+"/api/notifications", "application/json", strings.NewReader(`{"recipient":"ana","kind":"x","actor":"bo"}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusAccepted {
		t.Fatalf("good event: %v", res.StatusCode)
	}
	if n := testutil.ToFloat64(m.Events.WithLabelValues("x")); n != 1 {
		t.Errorf("queued events of kind x = %v, want 1", n)
	}
}
