package monitor

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strings"
	"time"
)

// flashCookie carries the one-line outcome of an action to the page the
// action redirects to, signed, read once.
const flashCookie = "spool_flash"

// sessionKey returns the key that signs flash messages: Config.SessionKey,
// else random per process.
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
