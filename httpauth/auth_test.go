package httpauth_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/httpauth"
)

func TestIsLoopback(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"127.0.0.1:8081": true, "localhost:1": true, "LOCALHOST:1": true, "[::1]:80": true, "127.9.9.9:0": true,
		":8081": false, "0.0.0.0:8081": false, "10.0.0.1:80": false, "[::]:80": false, "example.com:80": false,
	} {
		got, err := httpauth.IsLoopback(addr)
		require.NoError(t, err, addr)
		require.Equal(t, want, got, addr)
	}
	_, err := httpauth.IsLoopback("127.0.0.1")
	require.Error(t, err, "no port")
	require.Nil(t, httpauth.LoopbackHosts(":8081"), "any host for an address that is not loopback")
	require.Contains(t, httpauth.LoopbackHosts("127.0.0.2:1"), "127.0.0.2")
}

// TestGuardWithoutCookie: a guard without a cookie (the API's) takes only
// the Authorization header: ?token= is no credential there.
func TestGuardWithoutCookie(t *testing.T) {
	t.Parallel()
	const token = "tok-0123456789"
	var denied string
	h := httpauth.Guard{Auth: httpauth.Auth{Token: token}, Realm: "spool api", Deny: func(w http.ResponseWriter, _ *http.Request, msg string) {
		denied = msg
		w.WriteHeader(http.StatusUnauthorized)
	}}.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	do := func(target string, edit func(*http.Request)) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, target, nil)
		if edit != nil {
			edit(r)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	w := do("/?token="+token, nil)
	require.Equal(t, http.StatusUnauthorized, w.Code)
	require.Equal(t, `Bearer realm="spool api"`, w.Header().Get("WWW-Authenticate"))
	require.Equal(t, "spool api: authentication required", denied)
	require.Empty(t, w.Result().Cookies())
	require.Equal(t, http.StatusNoContent, do("/", func(r *http.Request) { r.Header.Set("Authorization", "bearer "+token) }).Code)
	require.Equal(t, http.StatusUnauthorized, do("/", func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+token+"x") }).Code)
	require.Equal(t, http.StatusUnauthorized, do("/", func(r *http.Request) { r.SetBasicAuth("x", token) }).Code, "no basic auth configured")

	open := httpauth.Guard{}.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	w = httptest.NewRecorder()
	open.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	require.Equal(t, http.StatusNoContent, w.Code, "no credential configured: everyone in")
}

func TestValidate(t *testing.T) {
	t.Parallel()
	require.NoError(t, httpauth.Auth{}.Validate())
	require.EqualError(t, httpauth.Auth{Token: "short"}.Validate(), "Auth.Token is shorter than 8 characters")
	require.EqualError(t, httpauth.Auth{BasicPassword: "p"}.Validate(), "Auth needs both BasicUser and BasicPassword")
	a, err := httpauth.ParseBasicAuth("u:p:q")
	require.NoError(t, err)
	require.Equal(t, httpauth.Auth{BasicUser: "u", BasicPassword: "p:q"}, a)
}
