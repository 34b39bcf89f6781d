package monitor_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBrowserRateLimits: the rate limits page in headless Chromium, under
// its Content-Security-Policy: the rules of rate_limits.yaml with the
// fleet's counters; it polls, so a thread handed back to wait for its
// rate limit appears in it while it is open. Screenshotted.
func TestBrowserRateLimits(t *testing.T) {
	bin := findChromium(t)
	t.Parallel()
	e := setup(t, envOptions{files: map[string]string{".ai/config/agent/rate_limits.yaml": `rate_limits:
  - {match: 'script:scripts/*', requests_per_minute: 1, burst: 1, output_tokens_per_minute: 100000}
  - {match: 'claude-*', concurrent: 4, input_tokens_per_minute: 30000}
`}})
	first := e.start("t/echo", map[string]any{"text": "first"})
	e.wait(first.ThreadID)
	br := startBrowser(t, bin)
	page := br.newTab()
	page.navigate(e.srv.URL + "/ratelimits")
	page.waitTrue(30*time.Second, "the rules", `document.querySelectorAll("table.ratelimits tbody tr").length === 2`)
	var admitted string
	page.eval(`document.querySelector("table.ratelimits tbody tr td:nth-child(4)").innerText`, &admitted)
	require.Equal(t, "1", admitted)

	second := e.start("t/echo", map[string]any{"text": "second"})
	// The worker counts the hand-back after it has suspended the thread:
	// the page may list the thread a refresh before the count.
	page.waitTrue(30*time.Second, "the thread handed back and counted, on the open page",
		`Array.from(document.querySelectorAll("section.card a.tid")).some(a => a.textContent === "`+second.ThreadID+`") && `+
			`document.querySelector("table.ratelimits tbody tr td:nth-child(6)").innerText.trim() === "1"`)
	var row []string
	page.eval(`Array.from(document.querySelector("table.ratelimits tbody tr").cells).map(c => c.innerText.trim())`, &row)
	require.Len(t, row, 9)
	require.Regexp(t, `[01]\.\d / 1 requests`, row[2], "the minute's request, draining")
	require.Contains(t, row[4], "requests 1", "throttled by the requests limit")
	require.Equal(t, "1", row[5], "handed back")
	require.Equal(t, "1", row[6], "waiting now")
	require.Contains(t, row[7], "90 / ", "input tokens used against reserved")
	var styled bool
	page.eval(`getComputedStyle(document.querySelector("table.ratelimits")).borderCollapse === "collapse"`, &styled)
	require.True(t, styled, "monitor.css did not apply")

	shot := page.screenshot()
	checkPNG(t, shot, 1280, 900)
	saveArtifact(t, "monitor-ratelimits.png", shot)
	require.Empty(t, page.problems(), "errors in the rate limits page")
}
