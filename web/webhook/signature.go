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

// maxSecrets bounds the secrets that sign at once: the new and the old
// one while receivers move to the new.
const maxSecrets = 2

// parseSecrets returns the keys of one secret, or of several separated by
// spaces, each signing every message: a secret is rotated by signing
// with the new and the old until every receiver has the new.
func parseSecrets(s string) ([][]byte, error) {
	fields := strings.Fields(s)
	if len(fields) == 0 || len(fields) > maxSecrets {
		return nil, fmt.Errorf("%w: give 1 or %d secrets, separated by a space", ErrConfig, maxSecrets)
	}
	keys := make([][]byte, len(fields))
	for i, f := range fields {
		k, err := parseSecret(f)
		if err != nil {
			return nil, err
		}
		keys[i] = k
	}
	return keys, nil
}

// signature returns the value of the webhook-signature header for a
// message: its signature by each key, separated by spaces, as Standard
// Webhooks has a receiver take any one it can verify.
func signature(keys [][]byte, id string, timestamp int64, body []byte) string {
	sigs := make([]string, len(keys))
	for i, k := range keys {
		sigs[i] = sign(k, id, timestamp, body)
	}
	return strings.Join(sigs, " ")
}

// sign returns a message's v1 signature by key.
func sign(key []byte, id string, timestamp int64, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write([]byte(strconv.FormatInt(timestamp, 10)))
	m.Write([]byte{'.'})
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// setHeaders sets a delivery's headers, signed at sent by each key.
func setHeaders(h http.Header, keys [][]byte, id string, sent time.Time, body []byte) {
	ts := sent.Unix()
	h.Set("Content-Type", "application/json")
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	h.Set("webhook-signature", signature(keys, id, ts, body))
}
