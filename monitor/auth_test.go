package monitor_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/httpauth"
	"github.com/spool-run/spool/monitor"
)

func TestBasicAuth(t *testing.T) {
	t.Parallel()
	auth, err := monitor.ParseBasicAuth("ops:s3cret:with-colon")
	require.NoError(t, err)
	require.Equal(t, "s3cret:with-colon", auth.BasicPassword)
	e := setup(t, envOptions{auth: auth})

	for _, path := range []string{"/", "/api/threads/x-1-a", "/metrics", "/asynq/", "/static/monitor.css"} {
		code, _, h := e.get(path)
		require.Equal(t, http.StatusUnauthorized, code, path)
		require.Contains(t, h.Get("WWW-Authenticate"), "Basic", path)
	}
	e.requireStatus(http.StatusUnauthorized, "/", func(r *http.Request) { r.SetBasicAuth("ops", "wrong") })
	e.requireStatus(http.StatusOK, "/", func(r *http.Request) { r.SetBasicAuth("ops", "s3cret:with-colon") })
	e.requireStatus(http.StatusOK, "/metrics", func(r *http.Request) { r.SetBasicAuth("ops", "s3cret:with-colon") })
	// A token is not configured, so none is accepted.
	e.requireStatus(http.StatusUnauthorized, "/?token=s3cret:with-colon")
	// Health checks need no credentials.
	e.requireStatus(http.StatusOK, "/healthz")
}

func TestTokenAuth(t *testing.T) {
	t.Parallel()
	const token = "tok-0123456789"
	e := setup(t, envOptions{auth: monitor.Auth{Token: token}})

	code, _, h := e.get("/")
	require.Equal(t, http.StatusUnauthorized, code)
	require.Contains(t, h.Get("WWW-Authenticate"), "Bearer")
	e.requireStatus(http.StatusUnauthorized, "/", func(r *http.Request) { r.Header.Set("Authorization", "Bearer wrong-token") })
	e.requireStatus(http.StatusUnauthorized, "/?token=wrong-token")

	e.requireStatus(http.StatusOK, "/metrics", func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+token) })

	// ?token= lets a browser in and leaves a cookie that works alone; the
	// cookie does not hold the token itself.
	code, _, h = e.get("/?token=" + token)
	require.Equal(t, http.StatusOK, code)
	var cookie *http.Cookie
	for _, c := range (&http.Response{Header: h}).Cookies() {
		if c.Name == monitor.CookieName {
			cookie = c
		}
	}
	require.NotNil(t, cookie, "Set-Cookie: %v", h.Values("Set-Cookie"))
	require.True(t, cookie.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, cookie.SameSite)
	require.NotContains(t, cookie.Value, token)
	e.requireStatus(http.StatusOK, "/static/monitor.js", func(r *http.Request) { r.AddCookie(&http.Cookie{Name: monitor.CookieName, Value: cookie.Value}) })
	code, _, _ = e.get("/", func(r *http.Request) {
		r.AddCookie(&http.Cookie{Name: monitor.CookieName, Value: strings.Repeat("0", len(cookie.Value))})
	})
	require.Equal(t, http.StatusUnauthorized, code)
}

func TestHostGuard(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{})
	h, err := monitor.New(monitor.Config{Orch: e.orch, Redis: e.rdb, Hosts: httpauth.LoopbackHosts("127.0.0.1:8080")})
	require.NoError(t, err)
	for host, want := range map[string]int{"127.0.0.1:8080": 200, "localhost": 200, "[::1]:80": 200, "evil.example:8080": 421} {
		req, err := http.NewRequest(http.MethodGet, "/healthz", nil)
		require.NoError(t, err)
		req.Host = host
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		require.Equal(t, want, rec.Code, host)
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	_, err := monitor.New(monitor.Config{})
	require.EqualError(t, err, "monitor: Config.Orch is required")
	e := setup(t, envOptions{})
	for _, tc := range []struct {
		cfg  monitor.Config
		want string
	}{
		{monitor.Config{Orch: e.orch, Redis: e.rdb, Auth: monitor.Auth{Token: "short"}}, "monitor: Auth.Token is shorter than 8 characters"},
		{monitor.Config{Orch: e.orch, Redis: e.rdb, Auth: monitor.Auth{BasicUser: "u"}}, "monitor: Auth needs both BasicUser and BasicPassword"},
		{monitor.Config{Orch: e.orch, Redis: e.rdb, ListLimit: 5000}, "monitor: Config.ListLimit 5000: want 1 to 1000"},
		{monitor.Config{Orch: e.orch, Redis: e.rdb, PollInterval: 1}, "monitor: Config.PollInterval 1ns is below 100ms"},
	} {
		_, err := monitor.New(tc.cfg)
		require.EqualError(t, err, tc.want)
	}
	for _, s := range []string{"", "user", ":pass", "user:"} {
		_, err := monitor.ParseBasicAuth(s)
		require.Error(t, err, s)
	}
}
