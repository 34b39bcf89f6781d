// Package httpauth guards spool's HTTP servers (the monitor and the API):
// HTTP basic auth or a bearer token, compared in constant time; a Host
// check against DNS rebinding for servers bound to loopback; and what
// "loopback" means for a listen address. The servers bind to loopback by
// default and refuse a non-loopback address without a credential.
package httpauth

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
)

// Auth says who may use a server. The zero value lets everyone in.
type Auth struct {
	// BasicUser and BasicPassword, when set, accept HTTP basic auth.
	BasicUser, BasicPassword string
	// Token, when set, is accepted as "Authorization: Bearer TOKEN" (and,
	// where a Guard has a Cookie, as ?token=TOKEN, which also sets the
	// cookie for a browser's next requests).
	Token string
}

// MinTokenLength is the shortest token Validate accepts.
const MinTokenLength = 8

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

// Validate names what is wrong with a: a user without a password (or the
// reverse), a token shorter than MinTokenLength.
func (a Auth) Validate() error {
	if (a.BasicUser == "") != (a.BasicPassword == "") {
		return errors.New("Auth needs both BasicUser and BasicPassword")
	}
	if a.Token != "" && len(a.Token) < MinTokenLength {
		return errors.New("Auth.Token is shorter than 8 characters")
	}
	return nil
}

// equal compares secrets in constant time (over their digests, so the
// length does not leak either).
func equal(a, b string) bool {
	ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(ha[:], hb[:]) == 1
}

// Allowed reports whether r carries valid basic credentials or bearer
// token.
func (a Auth) Allowed(r *http.Request) bool {
	if a.BasicUser != "" {
		if u, p, has := r.BasicAuth(); has && equal(u, a.BasicUser) && equal(p, a.BasicPassword) {
			return true
		}
	}
	if a.Token == "" {
		return false
	}
	h := r.Header.Get("Authorization")
	return len(h) > 7 && strings.EqualFold(h[:7], "bearer ") && equal(strings.TrimSpace(h[7:]), a.Token)
}

// Guard is the authentication middleware of a server over its Auth.
type Guard struct {
	Auth Auth
	// Realm is named in the WWW-Authenticate challenge, e.g. "spool api".
	Realm string
	// Cookie, when set, lets a browser in: ?token=TOKEN is accepted and
	// sets this HttpOnly, SameSite=Strict cookie, which holds a MAC of the
	// token (never the token) and is accepted alone afterwards. "": only
	// the Authorization header counts.
	Cookie string
	// Deny writes the 401 response (the challenge header is set already).
	// Default: a plain-text "<Realm>: authentication required".
	Deny func(w http.ResponseWriter, r *http.Request, msg string)
}

// cookieValue is what the cookie holds: a MAC of the token, so the cookie
// store never holds the token itself.
func (g Guard) cookieValue() string {
	mac := hmac.New(sha256.New, []byte(g.Auth.Token))
	mac.Write([]byte(g.Realm + " session"))
	return hex.EncodeToString(mac.Sum(nil))
}

// allowed reports whether r may pass, and whether it came as ?token=
// (which earns the cookie).
func (g Guard) allowed(r *http.Request) (ok, viaQuery bool) {
	if g.Auth.Allowed(r) {
		return true, false
	}
	if g.Cookie == "" || g.Auth.Token == "" {
		return false, false
	}
	if c, err := r.Cookie(g.Cookie); err == nil && equal(c.Value, g.cookieValue()) {
		return true, false
	}
	if q := r.URL.Query().Get("token"); q != "" && equal(q, g.Auth.Token) {
		return true, true
	}
	return false, false
}

// Handler lets through requests that carry a valid credential, and
// answers the others 401 with a challenge (Basic when basic auth is
// configured, else Bearer). With no credential configured it is next.
func (g Guard) Handler(next http.Handler) http.Handler {
	if !g.Auth.Enabled() {
		return next
	}
	deny := g.Deny
	if deny == nil {
		deny = func(w http.ResponseWriter, _ *http.Request, msg string) { http.Error(w, msg, http.StatusUnauthorized) }
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ok, viaQuery := g.allowed(r)
		if !ok {
			if g.Auth.BasicUser != "" {
				w.Header().Set("WWW-Authenticate", `Basic realm="`+g.Realm+`", charset="UTF-8"`)
			} else {
				w.Header().Set("WWW-Authenticate", `Bearer realm="`+g.Realm+`"`)
			}
			deny(w, r, g.Realm+": authentication required")
			return
		}
		if viaQuery {
			http.SetCookie(w, &http.Cookie{Name: g.Cookie, Value: g.cookieValue(), Path: "/",
				HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
		}
		next.ServeHTTP(w, r)
	})
}
