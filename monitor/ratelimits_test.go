package monitor_test

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// TestRateLimitsPage: the rate limits page shows each rule of the
// project's rate_limits.yaml with its limits, what it holds now, the
// fleet's counters (admitted, throttled by what, handed back, tokens
// used against reserved) and the threads waiting for it; /api/ratelimits
// says the same as JSON.
func TestRateLimitsPage(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{files: map[string]string{".ai/config/agent/rate_limits.yaml": `rate_limits:
  - {match: 'script:scripts/*', requests_per_minute: 1, burst: 1}
  - {match: 'claude-*', concurrent: 4, input_tokens_per_minute: 30000}
`}})
	first := e.start("t/echo", map[string]any{"text": "first"})
	e.wait(first.ThreadID)
	// A minute holds one request: the second thread's call is refused for
	// about a minute, so it is handed back to wait, holding no slot.
	second := e.start("t/echo", map[string]any{"text": "second"})
	require.True(t, waitFor(t.Context(), 30*time.Second, func() bool {
		rec, err := e.orch.Record(t.Context(), second.ThreadID)
		return err == nil && rec.Status == thread.StatusWaiting && rec.WaitingFor == registry.WaitingForRateLimit
	}), "the second thread waits for its rate limit: %+v", func() any { r, _ := e.orch.Record(t.Context(), second.ThreadID); return r }())

	body := e.page("/ratelimits")
	require.Contains(t, body, `<a href="/ratelimits" class="on">Rate limits</a>`)
	require.Contains(t, body, `<code>script:scripts/*</code>`)
	require.Contains(t, body, `1 requests/min (burst 1)`)
	require.Contains(t, body, `4 concurrent`)
	require.Contains(t, body, `/ 1 requests`, "the minute's requests now")
	require.Contains(t, body, `<br><span class="muted small">requests 1</span>`, "refused by the requests limit")
	require.Contains(t, body, `90 / `, "input tokens used against reserved")
	require.Contains(t, body, `href="/threads/`+second.ThreadID+`"`)
	require.NotContains(t, body, "No rate limits configured")

	_, raw, _ := e.get("/api/ratelimits")
	var d struct {
		File  string `json:"file"`
		Rules []struct {
			Rule struct {
				Match string `json:"match"`
				ID    string `json:"id"`
			} `json:"rule"`
			Requests float64 `json:"requests"`
			Counters struct {
				Admitted, Throttled, Waiting, Settled int64
				ThrottledBy                           map[string]int64 `json:"throttled_by"`
			} `json:"counters"`
			WaitingNow     int     `json:"waiting_now"`
			InputUsedRatio float64 `json:"input_used_ratio"`
		} `json:"rules"`
		Waiting []struct {
			ThreadID string    `json:"thread_id"`
			Rules    []string  `json:"rules"`
			WakeAt   time.Time `json:"wake_at"`
		} `json:"waiting"`
	}
	require.NoError(t, json.Unmarshal([]byte(raw), &d), raw)
	require.True(t, strings.HasSuffix(d.File, filepath.FromSlash(".ai/config/agent/rate_limits.yaml")), d.File)
	require.Len(t, d.Rules, 2)
	r := d.Rules[0]
	require.Equal(t, "script:scripts/*", r.Rule.Match)
	require.Equal(t, int64(1), r.Counters.Admitted)
	require.Equal(t, int64(1), r.Counters.Settled)
	require.GreaterOrEqual(t, r.Counters.Throttled, int64(1))
	require.Equal(t, r.Counters.Throttled, r.Counters.ThrottledBy["req"])
	require.Equal(t, int64(1), r.Counters.Waiting, "one thread handed back")
	require.Equal(t, 1, r.WaitingNow)
	require.InDelta(t, 1, r.Requests, 0.1)
	require.Greater(t, r.InputUsedRatio, 0.0)
	require.Zero(t, d.Rules[1].Counters.Admitted, "no call of a claude model")
	require.Len(t, d.Waiting, 1)
	require.Equal(t, second.ThreadID, d.Waiting[0].ThreadID)
	require.Equal(t, []string{"script:scripts/*"}, d.Waiting[0].Rules)
	require.WithinDuration(t, time.Now().Add(time.Minute), d.Waiting[0].WakeAt, 10*time.Second)

	// /metrics: the fleet's counters, for Prometheus.
	metrics := e.page("/metrics")
	labels := `match="script:scripts/*",rule="` + r.Rule.ID + `"`
	require.Contains(t, metrics, `spool_ratelimit_fleet_admitted_total{`+labels+`} 1`)
	require.Contains(t, metrics, `spool_ratelimit_fleet_waiting_total{`+labels+`} 1`)
	require.Contains(t, metrics, `spool_ratelimit_fleet_tokens_total{kind="input",`+labels+`,stage="used"} 90`)
	require.Contains(t, metrics, `spool_ratelimit_fleet_throttled_total{kind="req",`+labels+`} `)
}

// TestRateLimitsEmpty: a project without rate_limits.yaml says so, and
// where the file would be.
func TestRateLimitsEmpty(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{})
	body := e.page("/ratelimits")
	require.Contains(t, body, "No rate limits configured: <code>")
	require.Contains(t, body, filepath.Join(".ai", "config", "agent", "rate_limits.yaml")+"</code> does not exist")
	require.Contains(t, body, "Threads waiting for a rate limit <span class=\"muted\">0,")
	_, raw, _ := e.get("/api/ratelimits")
	require.JSONEq(t, `[]`, string(mustField(t, raw, "rules")))
}

func mustField(t *testing.T, raw, field string) json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(raw), &m), raw)
	return m[field]
}
