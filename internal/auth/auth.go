package auth

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/golang-jwt/jwt/v5"
)

// Access is what a grant allows on a document.
type Access int

const (
	None  Access = iota // the document does not exist, as far as the peer can tell
	Read                // receives the document; its changes are refused
	Write               // reads and writes
)

func (a Access) String() string {
	switch a {
	case Read:
		return "read"
	case Write:
		return "write"
	}
	return "none"
}

// Grant is what a verified token allows. A nil *Grant is the open mode
// (no auth configured): everything is allowed.
type Grant struct {
	UserID  string
	Name    string
	Color   string
	Docs    map[string]Access // by document id; "*" for every document
	Expires time.Time         // zero if the token does not expire
	// Notify lets the token post notifications to any user (an
	// application's service token); others post only to their own user.
	Notify bool
	// Contacts are the users whose status and last-seen the token may
	// read anywhere (its contacts claim; "*" in it is everyone). Without
	// them a user is seen only where the token can read a document they
	// are in.
	Contacts    map[string]bool
	AllContacts bool
}

// CanSee reports whether the grant may read a user's status and
// last-seen wherever the user is: its own, a contact's, or anyone's in
// open mode.
func (g *Grant) CanSee(userID string) bool {
	return g == nil || userID == g.UserID || g.AllContacts || g.Contacts[userID]
}

// Can returns the grant's access to a document.
func (g *Grant) Can(documentID string) Access {
	if g == nil {
		return Write
	}
	if a, ok := g.Docs[documentID]; ok {
		return a
	}
	return g.Docs["*"]
}

// MaxSubjectBytes bounds a token's sub. The user id it names keys
// presence's stores, its watch lists and its Redis keys, which refuse or
// choke on long ones; it is awareness.MaxUserIDBytes, which a user
// channel's id obeys too.
const MaxSubjectBytes = 256

// MaxNameBytes bounds a token's name: the node writes it into the
// user's presence in every document it opens, outside the peer's
// presence budget, and into notifications.
const MaxNameBytes = 256

// Errors of Authenticate.
var (
	ErrNoToken      = errors.New("no token: pass ?token= or an Authorization: Bearer header")
	ErrInvalidToken = errors.New("invalid token")
)

// claims is the token body.
type claims struct {
	jwt.RegisteredClaims
	Name  string            `json:"name,omitempty"`
	Color string            `json:"color,omitempty"`
	Docs  map[string]string `json:"docs"`
	// Notify: see Grant.Notify.
	Notify bool `json:"notify,omitempty"`
	// Contacts: see Grant.Contacts.
	Contacts []string `json:"contacts,omitempty"`
}

// Config says how tokens are signed. Set Secret (HS256) or PublicKey
// (RS256 or ES256), or both.
type Config struct {
	Secret    []byte
	PublicKey crypto.PublicKey
	// Audience and Issuer, when set, must be the token's aud and iss.
	Audience, Issuer string
	// AllowNoExpiry accepts tokens without exp; by default a token must
	// say when it expires.
	AllowNoExpiry bool
}

// Verifier checks tokens.
type Verifier struct {
	cfg     Config
	methods []string
}

// NewVerifier returns a verifier, or an error if cfg names no key.
func NewVerifier(cfg Config) (*Verifier, error) {
	v := &Verifier{cfg: cfg}
	if len(cfg.Secret) > 0 {
		if len(cfg.Secret) < 32 {
			return nil, errors.New("auth secret must be at least 32 bytes")
		}
		v.methods = append(v.methods, "HS256")
	}
	switch cfg.PublicKey.(type) {
	case nil:
	case *rsa.PublicKey:
		v.methods = append(v.methods, "RS256")
	case *ecdsa.PublicKey:
		v.methods = append(v.methods, "ES256")
	default:
		return nil, fmt.Errorf("unsupported public key type %T", cfg.PublicKey)
	}
	if len(v.methods) == 0 {
		return nil, errors.New("auth needs a secret or a public key")
	}
	return v, nil
}

// LoadPublicKey reads a PEM file holding an RSA or ECDSA public key.
func LoadPublicKey(path string) (crypto.PublicKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, fmt.Errorf("%s: no PEM block", path)
	}
	key, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return key, nil
}

// Verify checks a token and returns its grant.
func (v *Verifier) Verify(token string) (*Grant, error) {
	var c claims
	opts := []jwt.ParserOption{jwt.WithValidMethods(v.methods), jwt.WithLeeway(5 * time.Second), jwt.WithIssuedAt()}
	if !v.cfg.AllowNoExpiry {
		opts = append(opts, jwt.WithExpirationRequired())
	}
	if v.cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(v.cfg.Audience))
	}
	if v.cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(v.cfg.Issuer))
	}
	_, err := jwt.ParseWithClaims(token, &c, func(t *jwt.Token) (any, error) {
		switch t.Method.Alg() {
		case "HS256":
			return v.cfg.Secret, nil
		default:
			return v.cfg.PublicKey, nil
		}
	}, opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidToken, err)
	}
	if c.Subject == "" {
		return nil, fmt.Errorf("%w: no sub claim", ErrInvalidToken)
	}
	if len(c.Subject) > MaxSubjectBytes {
		return nil, fmt.Errorf("%w: a sub of %d bytes, over the limit of %d", ErrInvalidToken, len(c.Subject), MaxSubjectBytes)
	}
	if !storable(c.Subject) {
		return nil, fmt.Errorf("%w: the sub holds a NUL character or is not UTF-8", ErrInvalidToken)
	}
	if !storable(c.Name) {
		return nil, fmt.Errorf("%w: the name holds a NUL character or is not UTF-8", ErrInvalidToken)
	}
	if len(c.Name) > MaxNameBytes {
		return nil, fmt.Errorf("%w: a name of %d bytes, over the limit of %d", ErrInvalidToken, len(c.Name), MaxNameBytes)
	}
	g := &Grant{UserID: c.Subject, Name: c.Name, Color: c.Color, Notify: c.Notify, Docs: make(map[string]Access, len(c.Docs))}
	for id, a := range c.Docs {
		switch a {
		case "read":
			g.Docs[id] = Read
		case "write":
			g.Docs[id] = Write
		default:
			return nil, fmt.Errorf("%w: access %q for %q is neither read nor write", ErrInvalidToken, a, id)
		}
	}
	if c.ExpiresAt != nil {
		g.Expires = c.ExpiresAt.Time
	}
	for _, u := range c.Contacts {
		if u == "*" {
			g.AllContacts = true
		} else {
			if g.Contacts == nil {
				g.Contacts = make(map[string]bool, len(c.Contacts))
			}
			g.Contacts[u] = true
		}
	}
	return g, nil
}

// Authenticate verifies the token of a request: the token query parameter
// (WebSocket and EventSource cannot set headers) or a Bearer header.
func (v *Verifier) Authenticate(r *http.Request) (*Grant, error) {
	token := r.URL.Query().Get("token")
	if h := r.Header.Get("Authorization"); token == "" && h != "" {
		var ok bool
		if token, ok = strings.CutPrefix(h, "Bearer "); !ok {
			return nil, fmt.Errorf("%w: Authorization is not a Bearer token", ErrInvalidToken)
		}
	}
	if token == "" {
		return nil, ErrNoToken
	}
	return v.Verify(token)
}

// storable reports whether s is text every store of user ids and names
// can hold: UTF-8 without NUL (PostgreSQL's text refuses NUL).
func storable(s string) bool {
	return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}

type ctxKey struct{}

// WithGrant returns a context carrying g.
func WithGrant(ctx context.Context, g *Grant) context.Context {
	return context.WithValue(ctx, ctxKey{}, g)
}

// FromContext returns the grant of a request; nil in open mode.
func FromContext(ctx context.Context) *Grant {
	g, _ := ctx.Value(ctxKey{}).(*Grant)
	return g
}
