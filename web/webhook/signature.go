package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Standard Webhooks 1.0: a message carries its id, the time it was sent
// (Unix seconds) and signatures of the three. A "v1" signature is the
// base64 of HMAC-SHA256, keyed with the secret's bytes, over
// id "." timestamp "." body.

// secretPrefix starts a secret as Standard Webhooks writes one.
const secretPrefix = "whsec_"

// parseSecret returns the key of a "whsec_…" secret.
func parseSecret(s string) ([]byte, error) {
	rest, ok := strings.CutPrefix(s, secretPrefix)
	if !ok {
		return nil, fmt.Errorf("%w: the secret must start with %q", ErrConfig, secretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(rest)
	if err != nil {
		return nil, fmt.Errorf("%w: the secret after %q is not base64: %v", ErrConfig, secretPrefix, err)
	}
	if len(key) < 24 || len(key) > 64 {
		return nil, fmt.Errorf("%w: the secret must hold 24 to 64 bytes, not %d", ErrConfig, len(key))
	}
	return key, nil
}

// sign returns the value of the webhook-signature header for a message.
func sign(key []byte, id string, timestamp int64, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write([]byte(strconv.FormatInt(timestamp, 10)))
	m.Write([]byte{'.'})
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// setHeaders sets a delivery's headers, signed at sent.
func setHeaders(h http.Header, key []byte, id string, sent time.Time, body []byte) {
	ts := sent.Unix()
	h.Set("Content-Type", "application/json")
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	h.Set("webhook-signature", sign(key, id, ts, body))
}
