package provider

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestStreamStalled: a stream that stops sending events (the connection
// stays open) is given up after Config.StreamIdle as a transient error,
// which the worker retries, on either API; events arriving keep it alive,
// and a negative StreamIdle waits as long as the caller's context.
func TestStreamStalled(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		events []string
		cfg    func(url string) Config
		model  string
	}{
		{"anthropic", anthropicStream[:4], func(url string) Config {
			return Config{AnthropicAPIKey: "sk-ant-test", AnthropicBaseURL: url, StreamIdle: 300 * time.Millisecond}
		}, "claude-sonnet-4-5"},
		{"openai", openaiToolStream[:2], func(url string) Config {
			return Config{OpenAIAPIKey: "sk-test", OpenAIBaseURL: url + "/v1", StreamIdle: 300 * time.Millisecond}
		}, "gpt-4o"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeAPI(t, sseThenHang(tc.events...))
			p, err := New(tc.model, tc.cfg(f.srv.URL))
			require.NoError(t, err)
			began := time.Now()
			_, err = p.Complete(context.Background(), hi(), func(string) {})
			var pe *Error
			require.ErrorAs(t, err, &pe)
			require.Equal(t, ClassTransient, pe.Class, "error: %v", err)
			require.Contains(t, pe.Message, "stream stalled: no event for 300ms")
			require.Less(t, time.Since(began), 20*time.Second)

			// Without a bound, the caller's context is the only limit.
			cfg := tc.cfg(f.srv.URL)
			cfg.StreamIdle = -1
			p, err = New(tc.model, cfg)
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_, err = p.Complete(ctx, hi(), func(string) {})
			require.ErrorAs(t, err, &pe)
			require.NotContains(t, pe.Message, "stalled")
			require.GreaterOrEqual(t, time.Since(began), time.Second)
		})
	}
}

// TestStreamKeptAliveByEvents: a stream slower than StreamIdle in all,
// an event every 100 ms (pings among them), completes.
func TestStreamKeptAliveByEvents(t *testing.T) {
	t.Parallel()
	f := newFakeAPI(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		for _, e := range anthropicStream {
			_, _ = io.WriteString(w, e)
			w.(http.Flusher).Flush()
			time.Sleep(100 * time.Millisecond)
		}
	})
	p, err := New("claude-sonnet-4-5", Config{AnthropicAPIKey: "sk-ant-test", AnthropicBaseURL: f.srv.URL, StreamIdle: time.Second})
	require.NoError(t, err)
	began := time.Now()
	resp, err := p.Complete(context.Background(), toolRequest(), func(string) {})
	require.NoError(t, err)
	require.Greater(t, time.Since(began), time.Second, "longer than StreamIdle in all")
	require.Len(t, resp.ToolCalls, 1)
}

func TestStreamIdleDefault(t *testing.T) {
	t.Parallel()
	require.Equal(t, DefaultStreamIdle, Config{}.streamIdle())
	require.Equal(t, time.Duration(0), Config{StreamIdle: -1}.streamIdle())
	require.Equal(t, time.Minute, Config{StreamIdle: time.Minute}.streamIdle())
}
