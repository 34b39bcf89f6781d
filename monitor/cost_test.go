package monitor_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/orchestrator"
)

// TestCostPage: the cost page groups the runs by directive (default) or
// a tag, as `spool cost report` does, with a bar per day stacked by key
// and a total; a bad key or time is a 400 page.
func TestCostPage(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{})
	a := e.startTagged("t/echo", map[string]string{"team": "ops"})
	b := e.startTagged("t/echo", map[string]string{"team": "sales"})
	e.wait(a.ThreadID)
	e.wait(b.ThreadID)
	rep, err := e.orch.CostReport(t.Context(), "tag:team", orchestrator.Filter{})
	require.NoError(t, err)
	require.Equal(t, 2, rep.Total.Runs)

	body := e.page("/cost")
	require.Contains(t, body, `<h2>Spend per day <span class="muted">by directive, since 14d, UTC</span></h2>`)
	require.Contains(t, body, "<tr><td>t/echo</td>")
	require.Contains(t, body, `<svg class="cost-chart"`)
	require.Equal(t, 1, strings.Count(body, `<g class="bar"`), "one day")
	body = e.page("/cost?by=tag:team")
	require.Contains(t, body, "<tr><td>ops</td>")
	require.Contains(t, body, "<tr><td>sales</td>")
	if rep.Total.Spend > 0 {
		require.Contains(t, body, `<rect class="c0"`)
		require.Contains(t, body, `<rect class="c1"`)
	}
	code, body, _ := e.get("/cost?by=color")
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, body, "want directive, model, tenant, day or tag:KEY")
	e.requireStatus(http.StatusBadRequest, "/cost?since=yesterday")

}

// TestBrowserCost: the cost page in headless Chromium, reached from the
// navigation, its chart drawn under the Content-Security-Policy.
// Screenshotted.
func TestBrowserCost(t *testing.T) {
	bin := findChromium(t)
	t.Parallel()
	e := setup(t, envOptions{})
	for _, team := range []string{"ops", "sales", "ops"} {
		r := e.startTagged("t/echo", map[string]string{"team": team})
		e.wait(r.ThreadID)
	}
	br := startBrowser(t, bin)
	page := br.newTab()
	page.navigate(e.srv.URL + "/")
	page.click(`header.top nav a[href="/cost"]`)
	page.waitTrue(30*time.Second, "the cost page", `document.querySelector("svg.cost-chart") !== null`)
	page.navigate(e.srv.URL + "/cost?by=tag:team")
	page.waitTrue(30*time.Second, "the cost page by team", `document.querySelectorAll("table.cost tbody tr").length === 3`)
	var total string
	page.eval(`document.querySelector("table.cost tr.total").innerText`, &total)
	require.Contains(t, total, "total")
	shot := page.screenshot()
	checkPNG(t, shot, 1280, 900)
	saveArtifact(t, "monitor-cost.png", shot)
}
