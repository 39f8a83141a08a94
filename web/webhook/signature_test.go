package webhook

import (
	"errors"
	"net/http"
	"testing"
	"time"
)

// The expected value was computed outside Go, with OpenSSL:
//
//	printf '%s' 'msg_2KWPBgLlAfxdpx2AI54pPJ85f4W.1674087231.{"type":"document.changed","data":{"documentId":"abc"}}' |
//	  openssl dgst -sha256 -mac HMAC -macopt hexkey:74616e64656d2d776562686f6f6b2d746573742d6b65792d3031323334353637 -binary | base64
const (
	testSecret = "whsec_dGFuZGVtLXdlYmhvb2stdGVzdC1rZXktMDEyMzQ1Njc="
	testID     = "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"
	testTS     = 1674087231
	testBody   = `{"type":"document.changed","data":{"documentId":"abc"}}`
	testSig    = "v1,mQh+ehYRE9jO+d0/HiJB/5BuPVouU56ifJ3ZHbm3TlU="
)

func TestTheSignatureIsStandardWebhooksV1(t *testing.T) {
	key, err := parseSecret(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	if got := sign(key, testID, testTS, []byte(testBody)); got != testSig {
		t.Fatalf("signature %s, want %s", got, testSig)
	}
	h := http.Header{}
	setHeaders(h, [][]byte{key}, testID, time.Unix(testTS, 0), []byte(testBody))
	for name, want := range map[string]string{"webhook-id": testID, "webhook-timestamp": "1674087231", "webhook-signature": testSig} {
		if got := h.Get(name); got != want {
			t.Errorf("header %s = %q, want %q", name, got, want)
		}
	}
	if got := sign(key, testID, testTS+1, []byte(testBody)); got == testSig {
		t.Error("the timestamp is not signed")
	}
}

func TestASecretIsWhsecAndBase64OfEnoughBytes(t *testing.T) {
	for _, bad := range []string{
		"dGFuZGVtLXdlYmhvb2stdGVzdC1rZXktMDEyMzQ1Njc=", // no prefix
		"whsec_not base64!",
		"whsec_c2hvcnQ=", // 5 bytes
	} {
		if _, err := parseSecret(bad); !errors.Is(err, ErrConfig) {
			t.Errorf("parseSecret(%q) = %v, want ErrConfig", bad, err)
		}
	}
	for _, bad := range []string{"", " ", testSecret + " " + testSecret + " " + testSecret, testSecret + " whsec_c2hvcnQ="} {
		if _, err := parseSecrets(bad); !errors.Is(err, ErrConfig) {
			t.Errorf("parseSecrets(%q) = %v, want ErrConfig", bad, err)
		}
	}
}

// Two secrets both sign every message, so that a receiver holding either
// verifies it while the secret is rotated.
func TestTwoSecretsBothSign(t *testing.T) {
	const newer = "whsec_bmV3ZXItdGFuZGVtLXdlYmhvb2stc2VjcmV0LTAxMjM="
	keys, err := parseSecrets(newer + " " + testSecret)
	if err != nil {
		t.Fatal(err)
	}
	newKey, _ := parseSecret(newer)
	want := sign(newKey, testID, testTS, []byte(testBody)) + " " + testSig
	if got := signature(keys, testID, testTS, []byte(testBody)); got != want {
		t.Fatalf("signature %q, want %q", got, want)
	}
}
