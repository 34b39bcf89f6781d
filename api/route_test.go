package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestIDRoute: a thread's and a run's paths split the same way into the
// id and the route (the last segment when it names one, else the id's
// own route, the id keeping any slash), and a path without an id is a 404
// naming what it lacks. A method the route does not take answers 405 with
// the route's methods, which shows the route the split picked without
// running it.
func TestIDRoute(t *testing.T) {
	t.Parallel()
	h := (&server{}).handler()
	for _, c := range []struct {
		method, path string
		code         int
		allow        string // the Allow of a 405
		detail       string // the detail of a 404
	}{
		{http.MethodGet, "/v1/threads/", http.StatusNotFound, "", "no thread id in /v1/threads/"},
		{http.MethodGet, "/v1/graphs/", http.StatusNotFound, "", "no run id in /v1/graphs/"},
		{http.MethodPut, "/v1/threads/t-1/cancel", http.StatusMethodNotAllowed, "POST", ""},
		{http.MethodGet, "/v1/threads/t-1/pause", http.StatusMethodNotAllowed, "POST", ""},
		{http.MethodGet, "/v1/threads/t-1/unpause", http.StatusMethodNotAllowed, "POST", ""},
		{http.MethodGet, "/v1/graphs/g-1/pause", http.StatusMethodNotAllowed, "POST", ""},
		{http.MethodGet, "/v1/graphs/g-1/unpause", http.StatusMethodNotAllowed, "POST", ""},
		{http.MethodPut, "/v1/graphs/g-1/state", http.StatusMethodNotAllowed, "GET", ""},
		{http.MethodPut, "/v1/graphs/g-1/fork", http.StatusMethodNotAllowed, "POST", ""},
		{http.MethodPut, "/v1/threads/t-1", http.StatusMethodNotAllowed, "GET", ""},
		{http.MethodPut, "/v1/graphs/a/state/b", http.StatusMethodNotAllowed, "GET", ""},
		// "tree" is a thread's route, not a run's: the run's id is g-1/tree.
		{http.MethodPost, "/v1/graphs/g-1/tree", http.StatusMethodNotAllowed, "GET", ""},
	} {
		name := c.method + " " + c.path
		req := httptest.NewRequest(c.method, c.path, nil)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		require.Equal(t, c.code, w.Code, name)
		if c.code == http.StatusMethodNotAllowed {
			require.Equal(t, c.allow, w.Header().Get("Allow"), name)
			continue
		}
		var p Problem
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &p), name)
		require.Equal(t, "not_found", p.Code, name)
		require.Equal(t, c.detail, p.Detail, name)
	}
}
