package auth

import (
	"encoding/json"
	"log/slog"
	"net/http"
)

// Middleware authenticates every request with v and puts the grant in its
// context. A request without a valid token gets 401 before any handler
// runs. A nil v is the open mode: requests pass with no grant.
func Middleware(v *Verifier, log *slog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		if v == nil {
			return next
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			g, err := v.Authenticate(r)
			if err != nil {
				log.Debug("refused request", "path", r.URL.Path, "remote", r.RemoteAddr, "err", err)
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("WWW-Authenticate", `Bearer realm="tandem"`)
				w.WriteHeader(http.StatusUnauthorized)
				json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
				return
			}
			next.ServeHTTP(w, r.WithContext(WithGrant(r.Context(), g)))
		})
	}
}
