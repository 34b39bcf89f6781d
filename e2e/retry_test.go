package e2e

import (
	"bytes"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/spooltest"
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
	cur, err := e.Orch.Registry.Get(t.Context(), waiting)
	require.NoError(t, err)
	require.Equal(t, thread.StatusRunning, cur.Status, "the other thread ran in the slot while this one waits for its retry time")

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
	entry, err := e.Orch.Ledger.Get(t.Context(), long)
	require.NoError(t, err)
	require.Equal(t, "cancelled", entry.Status)
}

// TestRetryAttemptsCountAcrossHandBacks: the retry policy's attempt limit
// holds however many activations the retries take: a provider that always
// answers 429 (retry-after 1s, handed back each time) fails the thread
// after the first call and the policy's 3 retries.
func TestRetryAttemptsCountAcrossHandBacks(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv, _ := rateLimitedServer(t, func(_ int32, body []byte) string {
		if bytes.Contains(body, []byte(`# always\n`)) {
			calls.Add(1)
			return "1"
		}
		return ""
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
	require.Equal(t, "provider_rate_limited", rec.Error.Code)
	require.Equal(t, int32(4), calls.Load(), "the first call and 3 retries")
	require.Equal(t, 3, strings.Count(w.Log(), "thread handed back"))
	require.GreaterOrEqual(t, rec.Activation, int64(4))
}
