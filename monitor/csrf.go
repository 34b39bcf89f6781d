package monitor

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"time"
)

// Cookies of the action forms.
const (
	// csrfCookie holds a random session id; the forms carry a MAC of it
	// (a signed double-submit token).
	csrfCookie = "spool_csrf"
	// flashCookie carries the one-line outcome of an action to the page
	// the action redirects to, signed, read once.
	flashCookie = "spool_flash"
	// csrfField is the form field of the token.
	csrfField = "csrf"
)

// errCSRF: a POST without the session cookie or with a token that does not
// match it (a forged form, or a page from before a restart with another
// key).
var errCSRF = errors.New("the form's security token does not match this browser session: reload the page and try again")

// sessionKey returns the key that signs CSRF tokens and flash messages:
// Config.SessionKey, else random per process.
func sessionKey(k []byte) []byte {
	if len(k) > 0 {
		return k
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return b
}

func (m *Monitor) mac(purpose, v string) string {
	h := hmac.New(sha256.New, m.key)
	h.Write([]byte("spool monitor " + purpose + "\x00" + v))
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}

// csrfToken returns the token the forms of this response carry, setting
// the session cookie when the browser has none yet.
func (m *Monitor) csrfToken(w http.ResponseWriter, r *http.Request) string {
	sid := ""
	if c, err := r.Cookie(csrfCookie); err == nil && len(c.Value) == 32 {
		sid = c.Value
	}
	if sid == "" {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		sid = hex.EncodeToString(b)
		http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: sid, Path: "/", HttpOnly: true,
			SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	}
	return m.mac("csrf", sid)
}

// checkCSRF verifies a POSTed form's token against the session cookie.
// Cross-site POSTs are also refused before they get here
// (http.CrossOriginProtection: Sec-Fetch-Site, Origin).
func (m *Monitor) checkCSRF(r *http.Request) error {
	c, err := r.Cookie(csrfCookie)
	if err != nil || c.Value == "" {
		return errCSRF
	}
	got := r.PostFormValue(csrfField)
	if got == "" || !hmac.Equal([]byte(got), []byte(m.mac("csrf", c.Value))) {
		return errCSRF
	}
	return nil
}

// setFlash leaves a one-line message for the next page the browser loads.
func (m *Monitor) setFlash(w http.ResponseWriter, r *http.Request, msg string) {
	v := base64.RawURLEncoding.EncodeToString([]byte(msg))
	http.SetCookie(w, &http.Cookie{Name: flashCookie, Value: v + "." + m.mac("flash", v), Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil, MaxAge: 60})
}

// takeFlash returns the flash message the previous action left, and
// clears it.
func (m *Monitor) takeFlash(w http.ResponseWriter, r *http.Request) string {
	c, err := r.Cookie(flashCookie)
	if err != nil {
		return ""
	}
	http.SetCookie(w, &http.Cookie{Name: flashCookie, Value: "", Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil, MaxAge: -1, Expires: time.Unix(0, 0)})
	v, sig, ok := strings.Cut(c.Value, ".")
	if !ok || !hmac.Equal([]byte(sig), []byte(m.mac("flash", v))) {
		return ""
	}
	b, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil {
		return ""
	}
	return string(b)
}
