package web

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"
	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemhq/tandem/awareness"
	"github.com/tandemhq/tandem/internal/auth"
	"github.com/tandemhq/tandem/internal/testenv"
)

// fakePresence answers with fixed data and lets the test push changes.
type fakePresence struct {
	watch chan func(awareness.UserStatus)
}

func (f *fakePresence) DocumentPresence(string) []awareness.PeerView {
	return []awareness.PeerView{{PeerID: "p1", UserID: "ana", Status: awareness.StatusOnline}}
}
func (f *fakePresence) UserPresence(_ context.Context, id string) awareness.UserView {
	docs := []string{"2gzyVEWRbEhwBcRvStKvD3gBE5pp", "jN3pd9agHvY1zVqDCHrDTE3fDh1"}
	if id == "stranger" { // only in a document test tokens cannot read
		docs = docs[1:]
	}
	return awareness.UserView{UserStatus: awareness.UserStatus{UserID: id, Status: awareness.StatusAway,
		LastSeen: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}, Documents: docs}
}
func (f *fakePresence) UserPresenceIn(id string, can func(string) bool) awareness.UserView {
	v := f.UserPresence(context.Background(), id)
	v.LastSeen = time.Time{}
	v.Documents = slices.DeleteFunc(v.Documents, func(d string) bool { return !can(d) })
	return v
}
func (f *fakePresence) Watch(_ context.Context, ids []string, fn func(awareness.UserStatus)) ([]awareness.UserStatus, func()) {
	f.watch <- fn
	out := make([]awareness.UserStatus, len(ids))
	for i, id := range ids {
		out[i] = awareness.UserStatus{UserID: id, Status: awareness.StatusOffline}
	}
	return out, func() {}
}

func newTestRouter(t *testing.T) (*httptest.Server, *fakePresence) {
	t.Helper()
	fp := &fakePresence{watch: make(chan func(awareness.UserStatus), 1)}
	srv := httptest.NewServer(NewRouter(Config{WebSocket: http.NotFoundHandler(), Presence: fp}))
	t.Cleanup(srv.Close)
	return srv, fp
}

func TestPresenceREST(t *testing.T) {
	srv, _ := newTestRouter(t)
	tests := []struct {
		path   string
		status int
		want   string
	}{
		{"/api/docs/2gzyVEWRbEhwBcRvStKvD3gBE5pp/presence", 200, `"userId":"ana"`},
		{"/api/docs/not-a-document/presence", 400, "invalid document id"},
		{"/api/users/ana/presence", 200, `"status":"away"`},
		{"/api/presence/watch", 400, "users must list"},
		{"/api/presence/watch?users=" + manyUsers(1001), 400, "users must list"},
	}
	for _, tt := range tests {
		resp, err := http.Get(srv.URL + tt.path)
		if err != nil {
			t.Fatal(err)
		}
		var body strings.Builder
		bufio.NewReader(resp.Body).WriteTo(&body)
		resp.Body.Close()
		if resp.StatusCode != tt.status || !strings.Contains(body.String(), tt.want) {
			t.Errorf("GET %s: %d %s; want %d with %q", tt.path, resp.StatusCode, body.String(), tt.status, tt.want)
		}
	}
}

func manyUsers(n int) string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprint("u", i)
	}
	return strings.Join(ids, ",")
}

func TestWatchStreamsInitialThenChanges(t *testing.T) {
	srv, fp := newTestRouter(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/presence/watch?users=ana,bo,ana", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	push := <-fp.watch
	events := make(chan awareness.UserStatus)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if line, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var us awareness.UserStatus
				json.Unmarshal([]byte(line), &us)
				events <- us
			}
		}
		close(events)
	}()
	for _, want := range []string{"ana", "bo"} { // duplicates are watched once
		if us := <-events; us.UserID != want || us.Status != awareness.StatusOffline {
			t.Fatalf("initial event %+v, want %s offline", us, want)
		}
	}
	push(awareness.UserStatus{UserID: "bo", Status: awareness.StatusOnline})
	if us := <-events; us.UserID != "bo" || us.Status != awareness.StatusOnline {
		t.Fatalf("change event %+v", us)
	}
	cancel()
	for range events {
	}
}

func TestPresenceRESTWithAuth(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	v, err := auth.NewVerifier(auth.Config{Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	fp := &fakePresence{watch: make(chan func(awareness.UserStatus), 1)}
	srv := httptest.NewServer(NewRouter(Config{WebSocket: http.NotFoundHandler(), Presence: fp, Auth: v}))
	t.Cleanup(srv.Close)
	tok, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": "bo", "docs": map[string]string{"2gzyVEWRbEhwBcRvStKvD3gBE5pp": "read"},
		"exp": time.Now().Add(time.Hour).Unix(),
	}).SignedString(secret)
	get := func(path, token string) (int, string) { return getBody(t, srv.URL+path, token) }
	if code, _ := get("/api/users/ana/presence", ""); code != http.StatusUnauthorized {
		t.Errorf("no token: %d, want 401", code)
	}
	if code, _ := get("/api/docs/2gzyVEWRbEhwBcRvStKvD3gBE5pp/presence", tok); code != http.StatusOK {
		t.Errorf("allowed document: %d", code)
	}
	if code, _ := get("/api/docs/jN3pd9agHvY1zVqDCHrDTE3fDh1/presence", tok); code != http.StatusNotFound {
		t.Errorf("document outside the token: %d, want 404", code)
	}
	code, body := get("/api/users/ana/presence", tok)
	if code != http.StatusOK || strings.Contains(body, "jN3pd9agHvY1zVqDCHrDTE3fDh1") || !strings.Contains(body, "2gzyVEWRbEhwBcRvStKvD3gBE5pp") {
		t.Errorf("user presence leaks documents outside the token: %d %s", code, body)
	}
	if code, _ := get("/healthz", ""); code != http.StatusOK {
		t.Errorf("healthz must stay open: %d", code)
	}

	// Status and last-seen are scoped: a user is seen where the token can
	// read a document they are in, a contact anywhere, with last-seen.
	if strings.Contains(body, "lastSeen") {
		t.Errorf("a user who is no contact shows a last-seen: %s", body)
	}
	if code, _ := get("/api/users/stranger/presence", tok); code != http.StatusNotFound {
		t.Errorf("a user in no readable document and no contact: %d, want 404", code)
	}
	if code, _ := get("/api/presence/watch?users=ana", tok); code != http.StatusForbidden {
		t.Errorf("watching a user who is no contact: %d, want 403", code)
	}
	contacts, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": "bo", "docs": map[string]string{"2gzyVEWRbEhwBcRvStKvD3gBE5pp": "read"},
		"contacts": []string{"stranger"}, "exp": time.Now().Add(time.Hour).Unix(),
	}).SignedString(secret)
	if code, body := get("/api/users/stranger/presence", contacts); code != http.StatusOK || !strings.Contains(body, "lastSeen") {
		t.Errorf("a contact: %d %s, want their status and last-seen", code, body)
	}
}

type tab string

func (p tab) ID() string                    { return string(p) }
func (tab) PresenceReady(f *awareness.Feed) {}

// A user's status is told only from the documents the caller's token can
// read, unless the user is the token's contact: ana is away in one
// document and online in another, and a token that reads only the first
// sees her away there. Her overall status once went to anyone who shared
// one document with her, telling of the documents they could not read.
func TestUserStatusIsToldFromTheDocumentsTheTokenReads(t *testing.T) {
	const docA, docB = "2gzyVEWRbEhwBcRvStKvD3gBE5pp", "jN3pd9agHvY1zVqDCHrDTE3fDh1"
	hub, err := awareness.New(awareness.Config{Logger: testenv.QuietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	count := uint64(0)
	say := func(p tab, doc, channel string, v any) {
		count++
		raw, _ := cbor.Marshal(v)
		data, _ := cbor.Marshal(map[string]any{"__presence": map[string]any{"type": awareness.TypeUpdate, "channel": channel, "value": cbor.RawMessage(raw)}})
		if ok, err := hub.Receive(p, doc, awareness.Message{SenderID: string(p), SessionID: "s", Count: count, Data: data}); !ok || err != nil {
			t.Fatalf("%s in %s: %v %v", channel, doc, ok, err)
		}
	}
	say("ana-1", docA, awareness.ChannelUser, map[string]any{"id": "ana"})
	say("ana-1", docA, awareness.ChannelStatus, "away")
	say("ana-2", docB, awareness.ChannelUser, map[string]any{"id": "ana"})

	secret := []byte("0123456789abcdef0123456789abcdef")
	v, err := auth.NewVerifier(auth.Config{Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(NewRouter(Config{WebSocket: http.NotFoundHandler(), Presence: hub, Auth: v}))
	t.Cleanup(srv.Close)
	token := func(claims jwt.MapClaims) string {
		claims["sub"], claims["exp"] = "bo", time.Now().Add(time.Hour).Unix()
		tok, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(secret)
		return tok
	}
	for _, c := range []struct {
		name   string
		token  string
		status awareness.Status
		docs   []string
	}{
		{"reads docA", token(jwt.MapClaims{"docs": map[string]string{docA: "read"}}), awareness.StatusAway, []string{docA}},
		{"reads docB", token(jwt.MapClaims{"docs": map[string]string{docB: "write"}}), awareness.StatusOnline, []string{docB}},
		{"a contact, reads docA", token(jwt.MapClaims{"docs": map[string]string{docA: "read"}, "contacts": []string{"ana"}}), awareness.StatusOnline, []string{docA}},
	} {
		code, body := getBody(t, srv.URL+"/api/users/ana/presence", c.token)
		var got awareness.UserView
		if err := json.Unmarshal([]byte(body), &got); code != http.StatusOK || err != nil {
			t.Fatalf("%s: %d %s", c.name, code, body)
		}
		if got.Status != c.status || !slices.Equal(got.Documents, c.docs) {
			t.Errorf("%s: ana is %s in %v, want %s in %v", c.name, got.Status, got.Documents, c.status, c.docs)
		}
	}
}

// A watch stream says what its token allows only while the token is
// valid: at its expiry an "expired" event ends the stream, and what
// changes after is not sent.
func TestWatchEndsWhenTokenExpires(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	v, err := auth.NewVerifier(auth.Config{Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	fp := &fakePresence{watch: make(chan func(awareness.UserStatus), 1)}
	srv := httptest.NewServer(NewRouter(Config{WebSocket: http.NotFoundHandler(), Presence: fp, Auth: v}))
	t.Cleanup(srv.Close)
	exp := time.Now().Add(2 * time.Second)
	tok, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": "bo", "contacts": []string{"ana"}, "exp": exp.Unix(),
	}).SignedString(secret)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/presence/watch?users=ana&token="+tok, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("watch: %d", resp.StatusCode)
	}
	push := <-fp.watch
	var events []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() { // until the server ends the stream, or the test's deadline
		if line, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			events = append(events, line)
			if line == "expired" {
				push(awareness.UserStatus{UserID: "ana", Status: awareness.StatusOnline}) // after the end: never sent
			}
		}
	}
	if ctx.Err() != nil {
		t.Fatalf("the stream outlived its token: still open at the test's deadline, events %v", events)
	}
	if time.Now().Before(exp.Truncate(time.Second)) {
		t.Errorf("the stream ended before its token expired")
	}
	if len(events) != 2 || events[0] != "status" || events[1] != "expired" {
		t.Fatalf("events %v, want the initial status then expired", events)
	}
}

// Streams are bounded per address and by the user ids all watches follow:
// past a limit a stream is refused with 429; one that ends frees its place.
func TestStreamsAreBounded(t *testing.T) {
	fp := &fakePresence{watch: make(chan func(awareness.UserStatus), 16)}
	srv := httptest.NewServer(NewRouter(Config{WebSocket: http.NotFoundHandler(), Presence: fp,
		Streams: StreamLimits{PerIP: 2, Watched: 5}}))
	t.Cleanup(srv.Close)
	open := func(users string) (*http.Response, context.CancelFunc) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/presence/watch?users="+users, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp, cancel
	}
	first, end1 := open("a,b")
	second, end2 := open("c")
	defer end2()
	if first.StatusCode != 200 || second.StatusCode != 200 {
		t.Fatalf("first streams: %d, %d", first.StatusCode, second.StatusCode)
	}
	third, end3 := open("d")
	end3()
	if third.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a third stream from one address: %d, want 429", third.StatusCode)
	}
	end1() // its place is freed once the handler sees the end
	first.Body.Close()
	testenv.WaitFor(t, "a new stream taken after one ended", func() bool {
		resp, end := open("x,y,z")
		defer end()
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	tooMany, end4 := open("p,q,r,s,t")
	end4()
	if tooMany.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("watching past the node's total: %d, want 429", tooMany.StatusCode)
	}
}

// clientFrom returns an HTTP client whose connections come from ip (any
// 127.0.0.0/8 address reaches a test server on Linux).
func clientFrom(t *testing.T, ip string) *http.Client {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	tr := &http.Transport{DialContext: d.DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// One address, with idle watches it may open by the dozen, cannot take
// the user ids the node follows for everyone: past its share its next
// watch is refused with 429 and counted, and another address still gets
// as much.
func TestWatchesFromOneAddressCannotTakeTheNodesBudget(t *testing.T) {
	fp := &fakePresence{watch: make(chan func(awareness.UserStatus), 128)}
	reg := prometheus.NewRegistry()
	srv := httptest.NewServer(NewRouter(Config{WebSocket: http.NotFoundHandler(), Presence: fp, Registerer: reg,
		Streams: StreamLimits{PerIP: 64, Watched: 20 * maxWatchedUsers}}))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	users := manyUsers(maxWatchedUsers)
	// fill opens full watches from c until one is refused, and returns
	// how many user ids they follow.
	fill := func(c *http.Client) int {
		t.Helper()
		followed := 0
		for range 64 {
			req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/presence/watch?users="+users, nil)
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusOK {
				var b strings.Builder
				bufio.NewReader(resp.Body).WriteTo(&b)
				resp.Body.Close()
				if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(b.String(), "from this address") {
					t.Fatalf("a watch refused with %d %s", resp.StatusCode, b.String())
				}
				break
			}
			t.Cleanup(func() { resp.Body.Close() })
			followed += maxWatchedUsers
		}
		return followed
	}
	a := fill(clientFrom(t, "127.0.0.1"))
	if a > 5*maxWatchedUsers {
		t.Fatalf("idle watches from one address follow %d of the node's %d user ids", a, 20*maxWatchedUsers)
	}
	if b := fill(clientFrom(t, "127.0.0.2")); b != a {
		t.Fatalf("another address follows %d user ids, the first %d", b, a)
	}
	if n := refusedCount(t, reg, refusedWatchedPerIP); n != 2 {
		t.Errorf("watches refused for the ids one address follows: %d, want 2", n)
	}
	cancel()
}

// A watched user id is bounded as presence bounds one: a watch holds its
// ids in the hub, the bus and Redis's subscriptions, and a header of a
// few hundred long ids could otherwise pin a megabyte a stream.
func TestAWatchOfAnOverlongUserIDIsRefused(t *testing.T) {
	fp := &fakePresence{watch: make(chan func(awareness.UserStatus), 1)}
	srv := httptest.NewServer(NewRouter(Config{WebSocket: http.NotFoundHandler(), Presence: fp}))
	t.Cleanup(srv.Close)
	long := strings.Repeat("u", awareness.MaxUserIDBytes+1)
	resp, err := http.Get(srv.URL + "/api/presence/watch?users=ana," + long)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a watch naming a user id of %d bytes: %d, want 400", len(long), resp.StatusCode)
	}
}
