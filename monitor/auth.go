package monitor

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
)

// Auth says who may use the monitor. The zero value lets everyone in.
type Auth struct {
	// BasicUser and BasicPassword, when set, accept HTTP basic auth.
	BasicUser, BasicPassword string
	// Token, when set, is accepted as "Authorization: Bearer TOKEN" or as
	// ?token=TOKEN, which also sets a cookie for the browser's next
	// requests.
	Token string
}

// CookieName is the cookie a ?token= login sets.
const CookieName = "spool_monitor"

// Enabled reports whether any credential is configured.
func (a Auth) Enabled() bool { return a.BasicUser != "" || a.Token != "" }

// ParseBasicAuth parses "user:pass" into an Auth with basic credentials.
func ParseBasicAuth(s string) (Auth, error) {
	user, pass, ok := strings.Cut(s, ":")
	if !ok || user == "" || pass == "" {
		return Auth{}, errors.New("basic auth: want user:password, both non-empty")
	}
	return Auth{BasicUser: user, BasicPassword: pass}, nil
}

func (a Auth) validate() error {
	if (a.BasicUser == "") != (a.BasicPassword == "") {
		return errors.New("monitor: Auth needs both BasicUser and BasicPassword")
	}
	if a.Token != "" && len(a.Token) < 8 {
		return errors.New("monitor: Auth.Token is shorter than 8 characters")
	}
	return nil
}

// equal compares secrets in constant time (over their digests, so the
// length does not leak either).
func equal(a, b string) bool {
	ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(ha[:], hb[:]) == 1
}

// cookieValue is what the cookie holds: a MAC of the token, so the cookie
// store never holds the token itself.
func (a Auth) cookieValue() string {
	mac := hmac.New(sha256.New, []byte(a.Token))
	mac.Write([]byte("spool monitor session"))
	return hex.EncodeToString(mac.Sum(nil))
}

// allowed reports whether r carries a valid credential, and whether it
// came as ?token= (which earns a cookie).
func (a Auth) allowed(r *http.Request) (ok, viaQuery bool) {
	if a.BasicUser != "" {
		if u, p, has := r.BasicAuth(); has && equal(u, a.BasicUser) && equal(p, a.BasicPassword) {
			return true, false
		}
	}
	if a.Token == "" {
		return false, false
	}
	if h := r.Header.Get("Authorization"); len(h) > 7 && strings.EqualFold(h[:7], "bearer ") && equal(strings.TrimSpace(h[7:]), a.Token) {
		return true, false
	}
	if c, err := r.Cookie(CookieName); err == nil && equal(c.Value, a.cookieValue()) {
		return true, false
	}
	if q := r.URL.Query().Get("token"); q != "" && equal(q, a.Token) {
		return true, true
	}
	return false, false
}

func (a Auth) middleware(next http.Handler) http.Handler {
	if !a.Enabled() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ok, viaQuery := a.allowed(r)
		if !ok {
			if a.BasicUser != "" {
				w.Header().Set("WWW-Authenticate", `Basic realm="spool monitor", charset="UTF-8"`)
			} else {
				w.Header().Set("WWW-Authenticate", `Bearer realm="spool monitor"`)
			}
			http.Error(w, "spool monitor: authentication required", http.StatusUnauthorized)
			return
		}
		if viaQuery {
			http.SetCookie(w, &http.Cookie{Name: CookieName, Value: a.cookieValue(), Path: "/",
				HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
		}
		next.ServeHTTP(w, r)
	})
}
