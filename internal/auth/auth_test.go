package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

var secret = []byte("0123456789abcdef0123456789abcdef")

// sign signs c; a token without exp gets one an hour ahead (tokens must
// expire), unless c says "exp": nil.
func sign(t *testing.T, method jwt.SigningMethod, key any, c jwt.MapClaims) string {
	t.Helper()
	if exp, ok := c["exp"]; !ok {
		c["exp"] = time.Now().Add(time.Hour).Unix()
	} else if exp == nil {
		delete(c, "exp")
	}
	s, err := jwt.NewWithClaims(method, c).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestVerifyHS256(t *testing.T) {
	v, err := NewVerifier(Config{Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	tok := sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{
		"sub": "ana", "name": "Ana", "color": "#e66",
		"docs": map[string]string{"*": "read", "2gzyVEWRbEhwBcRvStKvD3gBE5pp": "write"},
		"exp":  time.Now().Add(time.Hour).Unix(),
	})
	g, err := v.Verify(tok)
	if err != nil {
		t.Fatal(err)
	}
	if g.UserID != "ana" || g.Name != "Ana" || g.Color != "#e66" || g.Expires.IsZero() {
		t.Fatalf("grant %+v", g)
	}
	if g.Can("2gzyVEWRbEhwBcRvStKvD3gBE5pp") != Write || g.Can("other") != Read {
		t.Fatal("access not as granted")
	}
	var open *Grant
	if open.Can("anything") != Write {
		t.Fatal("open mode must allow everything")
	}
	if (&Grant{UserID: "x"}).Can("doc") != None {
		t.Fatal("no docs claim must allow nothing")
	}
}

func TestVerifyRejects(t *testing.T) {
	v, _ := NewVerifier(Config{Secret: secret})
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	cases := map[string]string{
		"wrong secret":                    sign(t, jwt.SigningMethodHS256, []byte("another secret of thirty-two bytes!"), jwt.MapClaims{"sub": "a"}),
		"expired":                         sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "a", "exp": time.Now().Add(-time.Minute).Unix()}),
		"no sub":                          sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"name": "a"}),
		"bad access":                      sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "a", "docs": map[string]string{"*": "admin"}}),
		"RS256 when only a secret is set": sign(t, jwt.SigningMethodRS256, rsaKey, jwt.MapClaims{"sub": "a"}),
		"alg none":                        sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, jwt.MapClaims{"sub": "a"}),
		"garbage":                         "not.a.token",
	}
	for name, tok := range cases {
		if _, err := v.Verify(tok); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("%s: err = %v, want ErrInvalidToken", name, err)
		}
	}
}

func writePEM(t *testing.T, pub any) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "key.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestVerifyPublicKeys(t *testing.T) {
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	for _, tc := range []struct {
		name   string
		method jwt.SigningMethod
		priv   any
		pub    any
	}{
		{"RS256", jwt.SigningMethodRS256, rsaKey, &rsaKey.PublicKey},
		{"ES256", jwt.SigningMethodES256, ecKey, &ecKey.PublicKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pub, err := LoadPublicKey(writePEM(t, tc.pub))
			if err != nil {
				t.Fatal(err)
			}
			v, err := NewVerifier(Config{PublicKey: pub})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := v.Verify(sign(t, tc.method, tc.priv, jwt.MapClaims{"sub": "bo"})); err != nil {
				t.Fatal(err)
			}
			// A token signed with the public key as an HMAC secret (the
			// classic algorithm confusion) is refused.
			der, _ := x509.MarshalPKIXPublicKey(tc.pub)
			forged := sign(t, jwt.SigningMethodHS256, der, jwt.MapClaims{"sub": "mallory"})
			if _, err := v.Verify(forged); err == nil {
				t.Fatal("an HS256 token was accepted by a public-key verifier")
			}
		})
	}
}

func TestAuthenticateSources(t *testing.T) {
	v, _ := NewVerifier(Config{Secret: secret})
	tok := sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "ana"})
	q := httptest.NewRequest("GET", "/ws?token="+tok, nil)
	if g, err := v.Authenticate(q); err != nil || g.UserID != "ana" {
		t.Fatalf("query token: %v", err)
	}
	h := httptest.NewRequest("GET", "/api", nil)
	h.Header.Set("Authorization", "Bearer "+tok)
	if _, err := v.Authenticate(h); err != nil {
		t.Fatalf("bearer token: %v", err)
	}
	none := httptest.NewRequest("GET", "/api", nil)
	if _, err := v.Authenticate(none); !errors.Is(err, ErrNoToken) {
		t.Fatalf("no token: %v", err)
	}
	basic := httptest.NewRequest("GET", "/api", nil)
	basic.Header.Set("Authorization", "Basic YTpi")
	if _, err := v.Authenticate(basic); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("basic auth: %v", err)
	}
	if _, err := NewVerifier(Config{Secret: []byte("short")}); err == nil {
		t.Fatal("a short secret was accepted")
	}
}

// A token must say when it expires, unless the operator allows otherwise;
// with an audience or issuer configured, the token must name it.
func TestRequiredClaims(t *testing.T) {
	noExp := sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "a", "exp": nil})
	strict, err := NewVerifier(Config{Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := strict.Verify(noExp); !errors.Is(err, ErrInvalidToken) {
		t.Errorf("a token without exp: %v, want refused", err)
	}
	lenient, _ := NewVerifier(Config{Secret: secret, AllowNoExpiry: true})
	if _, err := lenient.Verify(noExp); err != nil {
		t.Errorf("a token without exp, allowed: %v", err)
	}

	v, _ := NewVerifier(Config{Secret: secret, Audience: "tandem", Issuer: "https://app.example.com"})
	for name, c := range map[string]jwt.MapClaims{
		"no aud":    {"sub": "a", "iss": "https://app.example.com"},
		"wrong aud": {"sub": "a", "aud": "billing", "iss": "https://app.example.com"},
		"no iss":    {"sub": "a", "aud": "tandem"},
		"wrong iss": {"sub": "a", "aud": "tandem", "iss": "https://evil.example"},
	} {
		if _, err := v.Verify(sign(t, jwt.SigningMethodHS256, secret, c)); !errors.Is(err, ErrInvalidToken) {
			t.Errorf("%s: %v, want refused", name, err)
		}
	}
	ok := sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "a", "aud": []string{"other", "tandem"}, "iss": "https://app.example.com"})
	if _, err := v.Verify(ok); err != nil {
		t.Errorf("a token for this audience and issuer: %v", err)
	}
}
