package auth

import (
	"errors"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"
)

// A token whose sub or name no store of presence can hold (over 256
// bytes, a NUL character) is refused with an error that says why; a sub of
// exactly 256 bytes is taken.
func TestATokenNamingAnUnstorableUserIsRefused(t *testing.T) {
	v, _ := NewVerifier(Config{Secret: secret})
	cases := []struct {
		name   string
		claims jwt.MapClaims
		want   string
	}{
		{"sub over 256 bytes", jwt.MapClaims{"sub": strings.Repeat("a", MaxSubjectBytes+1)}, "a sub of 257 bytes"},
		{"sub with NUL", jwt.MapClaims{"sub": "ana\x00"}, "the sub holds a NUL"},
		{"name with NUL", jwt.MapClaims{"sub": "ana", "name": "A\x00na"}, "the name holds a NUL"},
		{"name over 256 bytes", jwt.MapClaims{"sub": "ana", "name": strings.Repeat("n", MaxNameBytes+1)}, "a name of 257 bytes"},
	}
	for _, c := range cases {
		_, err := v.Verify(sign(t, jwt.SigningMethodHS256, secret, c.claims))
		if !errors.Is(err, ErrInvalidToken) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want ErrInvalidToken saying %q", c.name, err, c.want)
		}
	}
	long := strings.Repeat("é", MaxSubjectBytes/2)
	if g, err := v.Verify(sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": long})); err != nil || g.UserID != long {
		t.Fatalf("a sub of %d bytes: %v, %v", len(long), g, err)
	}
}
