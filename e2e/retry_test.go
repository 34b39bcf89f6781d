package e2e

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// TestLongRetryWaitFreesTheSlot: a model call that must wait out a long
// retry-after does not hold its worker slot. On a worker of concurrency 1
// that hands back waits of 1s or more, a thread told to retry in 3s is
// checkpointed and handed back; another thread runs to completion in the
// slot meanwhile; at the retry time the first one continues (on whatever
// worker) and completes. A thread told to retry in 30s is cancelled at
// once, without waiting for its retry time.
func TestLongRetryWaitFreesTheSlot(t *testing.T) {
	t.Parallel()
	var first3 atomic.Int32
	srv, _ := rateLimitedServer(t, func(_ int32, body []byte) string {
		switch {
		case bytes.Contains(body, []byte(`# wait30\n`)):
			return "30"
		case bytes.Contains(body, []byte(`# wait3\n`)) && first3.Add(1) == 1:
			return "3"
		}
		return ""
	})
	e := spooltest.New(t, spooltest.Options{Files: map[string]string{
		".ai/directives/t/chat.md":   directive("chat", `turns="3"`, fsPerms, `<success>done</success>`),
		".ai/directives/t/wait3.md":  directive("wait3", `turns="3"`, fsPerms, `<success>done</success>`),
		".ai/directives/t/wait30.md": directive("wait30", `turns="3"`, fsPerms, `<success>done</success>`),
	}})
	env := anthropicEnv(srv)
	w := e.Start(env, "worker", "--concurrency", "1", "--retry-hand-back", "1s")
	handedBack := func(n int) func() bool {
		return func() bool { return strings.Count(w.Log(), "thread handed back") >= n }
	}
	start := func(name string) string {
		return startThread(t, e, name, "--model", "claude-sonnet-4-5")
	}

	waiting := start("t/wait3")
	require.Eventually(t, handedBack(1), 30*time.Second, 20*time.Millisecond, w.Log())
	runCompleted(t, e, "t/chat", "--model", "claude-sonnet-4-5")
	cur, err := e.Orch.Record(t.Context(), waiting)
	require.NoError(t, err)
	require.Equal(t, thread.StatusWaiting, cur.Status, "the other thread ran in the slot while this one waits for its retry time")
	require.Equal(t, registry.WaitingForRateLimit, cur.WaitingFor)

	rec := e.Wait([]string{waiting}, time.Minute)[waiting]
	require.Equal(t, thread.StatusCompleted, rec.Status, "error: %+v", rec.Error)
	require.Equal(t, "recovered after the rate limit", rec.Result)
	require.Equal(t, 1, rec.Cost.Turns)
	require.GreaterOrEqual(t, rec.Activation, int64(2), "continued by a second activation")
	var reasons []string
	for _, cp := range payloads[transcript.Checkpoint](t, events(t, e, waiting), transcript.TypeCheckpoint) {
		reasons = append(reasons, cp.State.Reason)
	}
	require.Equal(t, []string{transcript.ReasonRetryWait, transcript.ReasonRunFinished}, reasons)
	verify := e.Spool("thread", "verify", waiting)
	require.Equal(t, 0, verify.Code, verify.Stderr)

	long := start("t/wait30")
	require.Eventually(t, handedBack(2), 30*time.Second, 20*time.Millisecond, w.Log())
	began := time.Now()
	res := e.Spool("thread", "cancel", long, "--json")
	require.Equal(t, 0, res.Code, res.Stderr)
	rec = e.Wait([]string{long}, time.Minute)[long]
	require.Equal(t, thread.StatusCancelled, rec.Status)
	require.Less(t, time.Since(began), 10*time.Second, "cancelled without waiting for the retry time")
	require.NotContains(t, w.Log(), "recovering orphaned thread", "a thread waiting for its retry time is no orphan")
	entry, err := e.Orch.LedgerEntry(t.Context(), long)
	require.NoError(t, err)
	require.Equal(t, "cancelled", entry.Status)
}

// TestRetryAttemptsCountAcrossHandBacks: the retry policy's attempt limit
// holds however many activations the retries take: a provider that always
// answers 503 (retry-after 1s, handed back each time) fails the thread
// after the first call and the policy's 3 retries.
func TestRetryAttemptsCountAcrossHandBacks(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := failingServer(t, func(body []byte) (int, string) {
		if bytes.Contains(body, []byte(`# always\n`)) {
			calls.Add(1)
			return http.StatusServiceUnavailable, "1"
		}
		return 0, ""
	})
	e := spooltest.New(t, spooltest.Options{Files: map[string]string{
		".ai/directives/t/always.md": directive("always", `turns="3"`, fsPerms, `<success>done</success>`),
	}})
	env := anthropicEnv(srv)
	w := e.Start(env, "worker", "--concurrency", "2", "--retry-hand-back", "1s")
	rec, res := runJSON(t, e, "t/always", "--model", "claude-sonnet-4-5")
	require.NotEqual(t, 0, res.Code, "a thread that ended in error")
	require.Equal(t, thread.StatusError, rec.Status)
	require.NotNil(t, rec.Error)
	require.Equal(t, "provider_transient", rec.Error.Code)
	require.Equal(t, int32(4), calls.Load(), "the first call and 3 retries")
	require.Equal(t, 3, strings.Count(w.Log(), "thread handed back"))
	require.GreaterOrEqual(t, rec.Activation, int64(4))
}

// TestSlowDownUntilTheDurationLimit: a provider that answers every call
// 429 is saying "slow down", not failing: the thread waits (waiting for
// rate_limit, no slot) and calls again as often as it takes, past the
// 3 retries of transient errors, until its duration limit ends it.
func TestSlowDownUntilTheDurationLimit(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := failingServer(t, func(body []byte) (int, string) {
		if bytes.Contains(body, []byte(`# storm\n`)) {
			calls.Add(1)
			return http.StatusTooManyRequests, "0.2"
		}
		return 0, ""
	})
	e := spooltest.New(t, spooltest.Options{Files: map[string]string{
		".ai/directives/t/storm.md": directive("storm", `turns="3" duration="10"`, fsPerms, `<success>done</success>`),
	}})
	e.Start(anthropicEnv(srv), "worker", "--concurrency", "1")
	id := startThread(t, e, "t/storm", "--model", "claude-sonnet-4-5")
	waitRecord(t, e, id, "waiting for its rate limit", func(r *registry.Record) bool {
		return r.Status == thread.StatusWaiting && r.WaitingFor == registry.WaitingForRateLimit
	})
	rec := e.Wait([]string{id}, time.Minute)[id]
	require.Equal(t, thread.StatusError, rec.Status)
	require.NotNil(t, rec.Error)
	require.Equal(t, thread.CodeDurationExceeded, rec.Error.Code, rec.Error.Message)
	require.Greater(t, calls.Load(), int32(4), "more calls than the first and 3 retries")
	errs := payloads[transcript.Error](t, events(t, e, id), transcript.TypeThreadError)
	require.Len(t, errs, int(calls.Load()))
	for _, pe := range errs {
		require.Equal(t, "rate_limited", pe.Class)
		require.True(t, pe.Retryable)
	}
	verify := e.Spool("thread", "verify", id)
	require.Equal(t, 0, verify.Code, verify.Stderr)
}

// failingServer answers the Messages API with a streamed text answer, or
// with the error status fail(body) gives (0: answer it) and its
// retry-after ("" for none).
func failingServer(t *testing.T, fail func(body []byte) (status int, retryAfter string)) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		status, after := fail(raw)
		if status == 0 {
			writeAnthropicText(w, "msg_1", 42, 7, "went ", "through")
			return
		}
		if after != "" {
			w.Header().Set("retry-after", after)
		}
		w.Header().Set("content-type", "application/json")
		w.WriteHeader(status)
		typ := "api_error"
		if status == http.StatusTooManyRequests {
			typ = "rate_limit_error"
		}
		_, _ = w.Write([]byte(`{"type":"error","error":{"type":"` + typ + `","message":"try again later"}}`))
	}))
	t.Cleanup(srv.Close)
	return srv
}
