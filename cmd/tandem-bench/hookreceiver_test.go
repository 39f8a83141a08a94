package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The example of the Standard Webhooks specification and its libraries.
const (
	specSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	specID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	specTimestamp = "1614265330"
	specBody      = `{"test": 2432232314}`
	specSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func specKey(t *testing.T) []byte {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(specSecret, "whsec_"))
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func TestVerifyHookAcceptsTheSpecificationsExample(t *testing.T) {
	at := time.Unix(1614265330, 0).Add(time.Minute)
	if err := verifyHook(specKey(t), specID, specTimestamp, specSignature, []byte(specBody), at); err != nil {
		t.Fatal(err)
	}
	// Among others, and with a signature of another version.
	if err := verifyHook(specKey(t), specID, specTimestamp, "v1a,xyz v1,AAAA "+specSignature, []byte(specBody), at); err != nil {
		t.Fatal(err)
	}
}

func TestVerifyHookRefusesWhatWasChangedOrIsOld(t *testing.T) {
	key := specKey(t)
	at := time.Unix(1614265330, 0)
	for name, c := range map[string]struct {
		id, ts, sig, body string
		now               time.Time
	}{
		"body":      {specID, specTimestamp, specSignature, `{"test": 2432232315}`, at},
		"id":        {"msg_other", specTimestamp, specSignature, specBody, at},
		"timestamp": {specID, "1614265331", specSignature, specBody, at},
		"old":       {specID, specTimestamp, specSignature, specBody, at.Add(6 * time.Minute)},
		"future":    {specID, specTimestamp, specSignature, specBody, at.Add(-6 * time.Minute)},
		"no prefix": {specID, specTimestamp, strings.TrimPrefix(specSignature, "v1,"), specBody, at},
		"missing":   {specID, specTimestamp, "", specBody, at},
	} {
		if err := verifyHook(key, c.id, c.ts, c.sig, []byte(c.body), c.now); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestReceiverNotesEachEventOnceWithItsAttempts(t *testing.T) {
	recv, err := newHookReceiver(specSecret, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(recv)
	defer srv.Close()
	key := specKey(t)
	post := func(id, body string, forge bool) int {
		t.Helper()
		ts := time.Now().Unix()
		sig := signForTest(key, id, ts, body)
		if forge {
			body += " "
		}
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(body))
		req.Header.Set("webhook-id", id)
		req.Header.Set("webhook-timestamp", itoa(ts))
		req.Header.Set("webhook-signature", sig)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	body := `{"type":"document.changed","timestamp":"x","data":{"documentId":"d1","firstChangeAt":1000,"lastChangeAt":3000}}`
	for _, id := range []string{"msg_a", "msg_a", "msg_b"} {
		if code := post(id, body, false); code/100 != 2 {
			t.Fatalf("%s: answered %d", id, code)
		}
	}
	if code := post("msg_c", body, true); code != http.StatusBadRequest {
		t.Fatalf("a forged delivery: answered %d", code)
	}
	events, arrivals, bad, maxIn := recv.snapshot()
	if len(events) != 2 || len(arrivals) != 3 || bad != 1 || maxIn != 1 {
		t.Fatalf("events %d, arrivals %d, refused %d, most in flight %d; want 2, 3, 1, 1", len(events), len(arrivals), bad, maxIn)
	}
	if e := events[0]; e.id != "msg_a" || e.attempts != 2 || e.doc != "d1" || e.typ != "document.changed" || e.firstChangeAt != 1000 || e.lastChangeAt != 3000 {
		t.Fatalf("first event %+v", e)
	}
}

func TestReceiverAnswersAfterItsDelay(t *testing.T) {
	recv, _ := newHookReceiver(specSecret, 200*time.Millisecond)
	srv := httptest.NewServer(recv)
	defer srv.Close()
	key := specKey(t)
	ts := time.Now().Unix()
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("{}"))
	req.Header.Set("webhook-id", "msg_x")
	req.Header.Set("webhook-timestamp", itoa(ts))
	req.Header.Set("webhook-signature", signForTest(key, "msg_x", ts, "{}"))
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Fatalf("answered after %v", d)
	}
}

func TestParseMetricsSumsOverLabels(t *testing.T) {
	page := `# HELP tandem_webhook_queue_depth x
# TYPE tandem_webhook_queue_depth gauge
tandem_webhook_queue_depth{endpoint="aaa"} 12
tandem_webhook_queue_depth{endpoint="bbb"} 3
tandem_webhook_dropped_total{reason="backlog"} 1
tandem_webhook_dropped_total{reason="pending",x="a b}"} 2
tandem_webhook_pending_documents 7
go_gc_duration_seconds{quantile="0.5"} 1.5e-05
`
	m, err := parseMetrics(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]float64{
		"tandem_webhook_queue_depth": 15, `tandem_webhook_queue_depth{endpoint="bbb"}`: 3,
		"tandem_webhook_dropped_total": 3, "tandem_webhook_pending_documents": 7, "go_gc_duration_seconds": 1.5e-05,
	} {
		if m[k] != want {
			t.Errorf("%s = %v, want %v", k, m[k], want)
		}
	}
	if _, err := parseMetrics(strings.NewReader("x{a=\"b\"} notanumber\n")); err == nil {
		t.Error("a bad value parsed")
	}
}

// signForTest signs as a sender does, for the receiver's tests; the
// specification's example checks verifyHook apart from it.
func signForTest(key []byte, id string, ts int64, body string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + itoa(ts) + "." + body))
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
