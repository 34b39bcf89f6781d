package provider

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spool-run/spool/thread"
	"github.com/stretchr/testify/require"
)

// fakeAPI is an httptest server that records every request and answers with
// a canned reply.
type fakeAPI struct {
	srv    *httptest.Server
	calls  atomic.Int32
	mu     sync.Mutex
	bodies []map[string]any
	heads  []http.Header
	paths  []string
}

func newFakeAPI(t *testing.T, h http.HandlerFunc) *fakeAPI {
	t.Helper()
	f := &fakeAPI{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.calls.Add(1)
		b, _ := io.ReadAll(r.Body)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		f.mu.Lock()
		f.bodies = append(f.bodies, m)
		f.heads = append(f.heads, r.Header.Clone())
		f.paths = append(f.paths, r.URL.Path)
		f.mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAPI) body(i int) map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.bodies[i]
}

// reply writes a JSON body with a status and headers ("k: v" pairs).
func reply(status int, body string, headers ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		for _, h := range headers {
			k, v, _ := strings.Cut(h, ":")
			w.Header().Set(strings.TrimSpace(k), strings.TrimSpace(v))
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

// sse streams events (already formatted "event: x\ndata: {...}\n\n" or
// "data: ...\n\n" blocks), flushing after each.
func sse(events ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		w.WriteHeader(http.StatusOK)
		for _, e := range events {
			_, _ = io.WriteString(w, e)
			w.(http.Flusher).Flush()
		}
	}
}

// sseThenHang streams events, then blocks until the client goes away.
func sseThenHang(events ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sse(events...)(w, r)
		<-r.Context().Done()
	}
}

// redirectClient sends every request to base (an httptest server) whatever
// host the SDK targets.
func redirectClient(base string) *http.Client {
	return &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		u, _ := url.Parse(base)
		r = r.Clone(r.Context())
		r.URL.Scheme, r.URL.Host, r.Host = u.Scheme, u.Host, u.Host
		return http.DefaultTransport.RoundTrip(r)
	})}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func mustPricing(t *testing.T, overrides []byte) *Pricing {
	t.Helper()
	p, err := LoadPricing(overrides)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// hi is a one-message request without tools.
func hi() *Request {
	return &Request{Messages: []thread.Message{{Role: thread.RoleUser, Content: "hi"}}}
}

// streamed runs req through p streaming, which must succeed, and returns
// the response and the deltas in the order they came.
func streamed(t *testing.T, p Provider, req *Request) (*Response, []string) {
	t.Helper()
	var deltas []string
	resp, err := p.Complete(context.Background(), req, func(s string) { deltas = append(deltas, s) })
	require.NoError(t, err)
	return resp, deltas
}

// requireResponse fails unless got is want, tool inputs compared as JSON
// values (an API may space them as it likes).
func requireResponse(t *testing.T, want, got *Response) {
	t.Helper()
	asJSON := cmp.Transformer("json", func(in json.RawMessage) any {
		var v any
		require.NoError(t, json.Unmarshal(in, &v), "tool input %s", in)
		return v
	})
	if diff := cmp.Diff(want, got, asJSON); diff != "" {
		t.Fatalf("response (-want +got):\n%s", diff)
	}
}

// completeError runs hi() through p, streaming when stream is set, and
// requires it to fail, once (the SDK must not retry), with an *Error of
// want's Class, StatusCode, RetryAfter and Quota, which it returns.
func completeError(t *testing.T, f *fakeAPI, p Provider, stream bool, want Error) *Error {
	t.Helper()
	var onDelta func(string)
	if stream {
		onDelta = func(string) {}
	}
	_, err := p.Complete(context.Background(), hi(), onDelta)
	var pe *Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, want, Error{Class: pe.Class, StatusCode: pe.StatusCode, RetryAfter: pe.RetryAfter, Quota: pe.Quota}, "error: %v", err)
	require.EqualValues(t, 1, f.calls.Load(), "the SDK must not retry")
	return pe
}
