package monitor

import (
	"fmt"
	"net/http"

	"github.com/spool-run/spool/httpauth"
)

// Auth says who may use the monitor (httpauth, which the API shares). The
// zero value lets everyone in.
type Auth = httpauth.Auth

// CookieName is the cookie a ?token= login sets.
const CookieName = "spool_monitor"

// realm names the monitor in challenges and refusals.
const realm = "spool monitor"

// ParseBasicAuth parses "user:pass" into an Auth with basic credentials.
func ParseBasicAuth(s string) (Auth, error) { return httpauth.ParseBasicAuth(s) }

func validateAuth(a Auth) error {
	if err := a.Validate(); err != nil {
		return fmt.Errorf("monitor: %w", err)
	}
	return nil
}

// authMiddleware lets in requests with a credential of a; a browser logs
// in once with ?token= and keeps a cookie.
func authMiddleware(a Auth, next http.Handler) http.Handler {
	return httpauth.Guard{Auth: a, Realm: realm, Cookie: CookieName}.Handler(next)
}

// hostGuard refuses requests whose Host is not one of hosts (when any).
func hostGuard(hosts []string, next http.Handler) http.Handler {
	return httpauth.HostGuard(hosts, func(w http.ResponseWriter, _ *http.Request, msg string) {
		http.Error(w, realm+": "+msg, http.StatusMisdirectedRequest)
	}, next)
}
