package web

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/tandemhq/tandem/awareness"
	"github.com/tandemhq/tandem/awareness/history"
	"github.com/tandemhq/tandem/internal/auth"
)

const histDoc = "2gzyVEWRbEhwBcRvStKvD3gBE5pp"

// fakeHistory answers from rows in memory, as a store would: the rows
// overlapping the window.
type fakeHistory struct {
	rows    []awareness.HistoryInterval
	tooMany bool
}

func (f *fakeHistory) read(match func(awareness.HistoryInterval) bool, from, to time.Time) ([]awareness.HistoryInterval, error) {
	if f.tooMany {
		return nil, history.ErrTooMany
	}
	var out []awareness.HistoryInterval
	for _, iv := range f.rows {
		if match(iv) && iv.From.Before(to) && (iv.To.IsZero() || iv.To.After(from)) {
			out = append(out, iv)
		}
	}
	return out, nil
}

func (f *fakeHistory) DocIntervals(_ context.Context, doc string, from, to time.Time, _ int) ([]awareness.HistoryInterval, error) {
	return f.read(func(iv awareness.HistoryInterval) bool { return iv.Doc == doc }, from, to)
}

func (f *fakeHistory) UserIntervals(_ context.Context, user string, from, to time.Time, _ int) ([]awareness.HistoryInterval, error) {
	return f.read(func(iv awareness.HistoryInterval) bool { return iv.Doc == "" && iv.User == user }, from, to)
}

var histT0 = time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)

func histRow(doc, user string, status awareness.Status, from, to time.Duration) awareness.HistoryInterval {
	iv := awareness.HistoryInterval{Doc: doc, User: user, Name: strings.ToUpper(user[:1]) + user[1:], Status: status, From: histT0.Add(from)}
	if to != 0 { // 0: still open
		iv.To = histT0.Add(to)
	}
	return iv
}

func newHistoryRouter(t *testing.T, h History, v *auth.Verifier) *httptest.Server {
	t.Helper()
	cfg := Config{WebSocket: http.NotFoundHandler(), Presence: &fakePresence{}, Auth: v}
	if h != nil {
		cfg.History = h
	}
	srv := httptest.NewServer(NewRouter(cfg))
	t.Cleanup(srv.Close)
	return srv
}

func getBody(t *testing.T, u, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", u, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	bufio.NewReader(resp.Body).WriteTo(&b)
	return resp.StatusCode, b.String()
}

func window(from, to time.Duration) string {
	return "from=" + url.QueryEscape(histT0.Add(from).Format(time.RFC3339)) + "&to=" + url.QueryEscape(histT0.Add(to).Format(time.RFC3339))
}

type historyAnswer struct {
	Intervals []struct {
		User   string  `json:"user"`
		Name   string  `json:"name"`
		Status string  `json:"status"`
		From   string  `json:"from"`
		To     *string `json:"to"`
	} `json:"intervals"`
	Next *string `json:"next"`
}

// A document's history answers the merged intervals overlapping the
// window: two nodes' rows of one user are one interval, an open one has
// to null, and what ended before the window is not there.
func TestDocHistoryAnswersMergedIntervals(t *testing.T) {
	fh := &fakeHistory{rows: []awareness.HistoryInterval{
		histRow(histDoc, "ana", awareness.StatusOnline, 0, 30*time.Minute),
		histRow(histDoc, "ana", awareness.StatusOnline, 30*time.Minute, 0), // another node, touching, still open
		histRow(histDoc, "bo", awareness.StatusAway, 10*time.Minute, 20*time.Minute),
		histRow(histDoc, "cy", awareness.StatusOnline, -3*time.Hour, -2*time.Hour), // before the window
		histRow("jN3pd9agHvY1zVqDCHrDTE3fDh1", "dee", awareness.StatusOnline, 0, time.Hour),
	}}
	srv := newHistoryRouter(t, fh, nil)
	code, body := getBody(t, srv.URL+"/api/docs/"+histDoc+"/presence/history?"+window(-time.Hour, time.Hour), "")
	if code != http.StatusOK {
		t.Fatalf("%d %s", code, body)
	}
	var ans historyAnswer
	if err := json.Unmarshal([]byte(body), &ans); err != nil {
		t.Fatal(err)
	}
	if len(ans.Intervals) != 2 || ans.Next != nil {
		t.Fatalf("got %s, want ana's one interval and bo's, no next", body)
	}
	ana, bo := ans.Intervals[0], ans.Intervals[1]
	if ana.User != "ana" || ana.Name != "Ana" || ana.Status != "online" || ana.To != nil || ana.From != histT0.Format(time.RFC3339) {
		t.Errorf("ana: %+v, want online from %v, open", ana, histT0)
	}
	if bo.User != "bo" || bo.Status != "away" || bo.To == nil {
		t.Errorf("bo: %+v, want away, ended", bo)
	}
	// A stretch that began before the window is answered from its start.
	_, body = getBody(t, srv.URL+"/api/docs/"+histDoc+"/presence/history?"+window(15*time.Minute, time.Hour), "")
	ans = historyAnswer{}
	json.Unmarshal([]byte(body), &ans)
	if len(ans.Intervals) != 2 || ans.Intervals[0].From != histT0.Add(15*time.Minute).Format(time.RFC3339) {
		t.Errorf("from 9:15: %s, want ana and bo from 9:15", body)
	}
}

// Pages of limit intervals follow next until there is none: every
// interval comes once, in order.
func TestDocHistoryPages(t *testing.T) {
	fh := &fakeHistory{}
	for i := range 7 {
		fh.rows = append(fh.rows, histRow(histDoc, fmt.Sprintf("u%d", i%3), awareness.StatusOnline, time.Duration(i)*time.Minute, time.Duration(i)*time.Minute+30*time.Second))
	}
	srv := newHistoryRouter(t, fh, nil)
	base := srv.URL + "/api/docs/" + histDoc + "/presence/history?" + window(0, time.Hour) + "&limit=3"
	var seen []string
	next := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("pages do not end")
		}
		u := base
		if next != "" {
			u += "&after=" + next
		}
		code, body := getBody(t, u, "")
		var ans historyAnswer
		if code != http.StatusOK || json.Unmarshal([]byte(body), &ans) != nil {
			t.Fatalf("%d %s", code, body)
		}
		for _, iv := range ans.Intervals {
			seen = append(seen, iv.User+"@"+iv.From)
		}
		if ans.Next == nil {
			break
		}
		next = *ans.Next
	}
	if len(seen) != 7 {
		t.Fatalf("pages held %d intervals %v, want 7", len(seen), seen)
	}
	for i := 1; i < len(seen); i++ {
		if strings.SplitN(seen[i], "@", 2)[1] < strings.SplitN(seen[i-1], "@", 2)[1] {
			t.Errorf("out of order: %v", seen)
		}
	}
}

// Bad windows, a window holding too much and a node keeping no history
// get a clear error each.
func TestHistoryRefusesWhatItCannotAnswer(t *testing.T) {
	srv := newHistoryRouter(t, &fakeHistory{}, nil)
	doc := srv.URL + "/api/docs/" + histDoc + "/presence/history?"
	for _, tt := range []struct {
		query string
		want  string
	}{
		{"from=yesterday", "from must be an RFC 3339 time"},
		{"to=2026-12-05", "to must be an RFC 3339 time"},
		{window(time.Hour, 0), "from must be before to"},
		{window(-40*24*time.Hour, 0), "at most 31 days"},
		{window(0, time.Hour) + "&limit=0", "limit must be"},
		{window(0, time.Hour) + "&after=!!!", "after must be"},
	} {
		if code, body := getBody(t, doc+tt.query, ""); code != http.StatusBadRequest || !strings.Contains(body, tt.want) {
			t.Errorf("%s: %d %s, want 400 with %q", tt.query, code, body, tt.want)
		}
	}
	if code, _ := getBody(t, srv.URL+"/api/docs/not-a-document/presence/history", ""); code != http.StatusBadRequest {
		t.Errorf("an invalid document id: %d, want 400", code)
	}
	busy := newHistoryRouter(t, &fakeHistory{tooMany: true}, nil)
	if code, body := getBody(t, busy.URL+"/api/docs/"+histDoc+"/presence/hourly", ""); code != http.StatusBadRequest || !strings.Contains(body, "narrow") {
		t.Errorf("too many intervals: %d %s, want 400 asking to narrow the window", code, body)
	}
	off := newHistoryRouter(t, nil, nil)
	for _, p := range []string{"/api/docs/" + histDoc + "/presence/history", "/api/docs/" + histDoc + "/presence/hourly", "/api/users/ana/presence/history"} {
		if code, body := getBody(t, off.URL+p, ""); code != http.StatusNotImplemented || !strings.Contains(body, "no presence history") {
			t.Errorf("%s on a node without history: %d %s, want 501", p, code, body)
		}
	}
}

// History is scoped as presence is: a document's needs read access, a
// user's is the user's own or a contact's.
func TestHistoryIsScopedByTheToken(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	v, err := auth.NewVerifier(auth.Config{Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	fh := &fakeHistory{rows: []awareness.HistoryInterval{
		histRow(histDoc, "ana", awareness.StatusOnline, 0, time.Minute),
		histRow("", "ana", awareness.StatusOnline, 0, time.Minute),
		histRow("", "bo", awareness.StatusAway, 0, time.Minute),
	}}
	srv := newHistoryRouter(t, fh, v)
	token := func(claims jwt.MapClaims) string {
		claims["exp"] = time.Now().Add(time.Hour).Unix()
		s, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(secret)
		return s
	}
	bo := token(jwt.MapClaims{"sub": "bo", "docs": map[string]string{histDoc: "read"}})
	q := "?" + window(0, time.Hour)
	if code, body := getBody(t, srv.URL+"/api/docs/"+histDoc+"/presence/history"+q, bo); code != http.StatusOK || !strings.Contains(body, `"user":"ana"`) {
		t.Errorf("a readable document: %d %s", code, body)
	}
	if code, _ := getBody(t, srv.URL+"/api/docs/jN3pd9agHvY1zVqDCHrDTE3fDh1/presence/hourly"+q, bo); code != http.StatusNotFound {
		t.Errorf("a document outside the token: %d, want 404", code)
	}
	if code, body := getBody(t, srv.URL+"/api/users/bo/presence/history"+q, bo); code != http.StatusOK || !strings.Contains(body, `"status":"away"`) {
		t.Errorf("the user's own: %d %s", code, body)
	}
	if code, _ := getBody(t, srv.URL+"/api/users/ana/presence/history"+q, bo); code != http.StatusNotFound {
		t.Errorf("a user who is no contact: %d, want 404", code)
	}
	friend := token(jwt.MapClaims{"sub": "bo", "contacts": []string{"ana"}})
	if code, body := getBody(t, srv.URL+"/api/users/ana/presence/history"+q, friend); code != http.StatusOK || !strings.Contains(body, `"user":"ana"`) {
		t.Errorf("a contact: %d %s", code, body)
	}
}

// The hourly answer has one entry per hour of the window.
func TestDocHourly(t *testing.T) {
	fh := &fakeHistory{rows: []awareness.HistoryInterval{
		histRow(histDoc, "ana", awareness.StatusOnline, 0, 90*time.Minute),
		histRow(histDoc, "bo", awareness.StatusOnline, 15*time.Minute, 45*time.Minute),
	}}
	srv := newHistoryRouter(t, fh, nil)
	code, body := getBody(t, srv.URL+"/api/docs/"+histDoc+"/presence/hourly?"+window(0, 3*time.Hour), "")
	var ans struct {
		Hours []struct {
			Hour        string  `json:"hour"`
			Users       int     `json:"users"`
			Peak        int     `json:"peak"`
			UserMinutes float64 `json:"userMinutes"`
		} `json:"hours"`
	}
	if code != http.StatusOK || json.Unmarshal([]byte(body), &ans) != nil || len(ans.Hours) != 3 {
		t.Fatalf("%d %s, want three hours", code, body)
	}
	h0, h1 := ans.Hours[0], ans.Hours[1]
	if h0.Users != 2 || h0.Peak != 2 || h0.UserMinutes != 90 {
		t.Errorf("first hour %+v, want 2 users, peak 2, 90 user-minutes", h0)
	}
	if h1.Users != 1 || h1.Peak != 1 || h1.UserMinutes != 30 {
		t.Errorf("second hour %+v, want 1 user, peak 1, 30 user-minutes", h1)
	}
}
