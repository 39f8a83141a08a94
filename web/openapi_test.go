package web

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
)

// TestTheDescriptionLoadsAndIsServed checks that the description is valid
// OpenAPI and that the node serves it, without a token, as JSON.
func TestTheDescriptionLoadsAndIsServed(t *testing.T) {
	if _, err := openAPIJSON(); err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	srv := httptest.NewServer(NewRouter(Config{WebSocket: http.NotFoundHandler(), Presence: &fakePresence{}, Auth: nil}))
	defer srv.Close()
	code, body, _ := call(t, "GET", srv.URL+"/api/openapi.json", "", "", nil)
	var d struct {
		OpenAPI string         `json:"openapi"`
		Paths   map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(body, &d); code != 200 || err != nil || d.OpenAPI != "3.1.0" || len(d.Paths) == 0 {
		t.Fatalf("GET /api/openapi.json: %d %.200s", code, body)
	}
}

// TestEveryRouteIsDescribedAndEveryDescribedRouteServed walks the routes
// of a router with every API on and compares them with the description's
// paths and methods, both ways.
func TestEveryRouteIsDescribedAndEveryDescribedRouteServed(t *testing.T) {
	_, hub := newDocsServer(t, false, DocumentLimits{})
	h := NewRouter(Config{WebSocket: http.NotFoundHandler(), Presence: &fakePresence{}, Notifications: failingNotifications{}, Documents: hub})
	var served []string
	err := chi.Walk(h.(chi.Routes), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if strings.HasPrefix(route, "/api/") {
			served = append(served, method+" "+strings.TrimSuffix(route, "/"))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	doc := loadDescription(t)
	var described []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			described = append(described, method+" "+path)
		}
	}
	slices.Sort(served)
	slices.Sort(described)
	for _, r := range served {
		if !slices.Contains(described, r) {
			t.Errorf("served but not described: %s", r)
		}
	}
	for _, r := range described {
		if !slices.Contains(served, r) {
			t.Errorf("described but not served: %s", r)
		}
	}
}

// The check every test's responses pass refuses what the description
// does not allow: a field missing, a status not described, a path not
// described.
func TestTheResponseCheckRefusesWhatTheDescriptionDoesNot(t *testing.T) {
	c, err := newResponseChecker()
	if err != nil {
		t.Fatal(err)
	}
	respond := func(method, path string, status int, body string) error {
		req := httptest.NewRequest(method, "http://node"+path, nil)
		resp := &http.Response{StatusCode: status, Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(strings.NewReader(body))}
		return c.check(req, resp)
	}
	id := "/api/docs/2gzyVEWRbEhwBcRvStKvD3gBE5pp"
	if err := respond("GET", id, 200, `{"documentId":"x","heads":[],"doc":{}}`); err != nil {
		t.Fatalf("a good answer: %v", err)
	}
	for _, bad := range []struct {
		method, path string
		status       int
		body         string
	}{
		{"GET", id, 200, `{"documentId":"x","doc":{}}`},
		{"GET", id, 200, `{"documentId":"x","heads":["nothex"],"doc":{}}`},
		{"GET", id, 418, `{"error":"teapot"}`},
		{"PATCH", id, 200, `{"documentId":"x"}`},
		{"GET", "/api/docs/x/elsewhere", 200, `{}`},
	} {
		if err := respond(bad.method, bad.path, bad.status, bad.body); err == nil {
			t.Errorf("%s %s %d %s passed the check", bad.method, bad.path, bad.status, bad.body)
		}
	}
}

// The check of the requests the API accepts refuses one the description
// does not allow, and passes a good one sent without a Content-Type.
func TestTheRequestCheckRefusesWhatTheDescriptionDoesNot(t *testing.T) {
	c, err := newResponseChecker()
	if err != nil {
		t.Fatal(err)
	}
	sent := func(method, path, body string) error {
		return c.checkRequest(httptest.NewRequest(method, "http://node"+path, nil), []byte(body))
	}
	id := "/api/docs/2gzyVEWRbEhwBcRvStKvD3gBE5pp"
	if err := sent("PATCH", id, `[{"op":"put","path":["a"],"value":1}]`); err != nil {
		t.Fatalf("a good edit: %v", err)
	}
	for _, bad := range []struct{ method, path, body string }{
		{"PATCH", id, `{"ops":5}`},
		{"PATCH", id, `[{"op":"rename","path":["a"]}]`},
		{"POST", "/api/docs", `[1]`},
	} {
		if err := sent(bad.method, bad.path, bad.body); err == nil {
			t.Errorf("%s %s %s passed the check", bad.method, bad.path, bad.body)
		}
	}
}
