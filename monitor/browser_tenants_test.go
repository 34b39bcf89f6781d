package monitor_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBrowserTenants: the tenants pages in headless Chromium, under the
// Content-Security-Policy: the list with acme's running leaf and two
// blocked on its key, reached from the navigation; acme's page, reached
// from the list, with the key full, its settings and the waiting runs,
// each linking to its page, which links back to the tenant; the tenant
// page follows the key draining once the gate opens, without a reload.
// Screenshotted.
func TestBrowserTenants(t *testing.T) {
	bin := findChromium(t)
	t.Parallel()
	e := setup(t, envOptions{})
	leaves := e.keyHeld()
	_, err := e.orch.SetTenant(t.Context(), "acme", map[string]string{"spend_per_month": "100"}, nil)
	require.NoError(t, err)
	br := startBrowser(t, bin)
	page := br.newTab()

	page.navigate(e.srv.URL + "/")
	page.click(`header.top nav a[href="/tenants"]`)
	page.waitTrue(30*time.Second, "the tenants list", `document.querySelectorAll("table.tenants tbody tr").length === 3`)
	var acme []string
	page.eval(`Array.from(document.querySelector('tr[data-tenant="acme"]').cells).map(c => c.innerText.trim())`, &acme)
	require.Len(t, acme, 11)
	require.Equal(t, []string{"3", "2"}, acme[1:3], "weight, priority")
	require.Equal(t, "1 / 4", acme[4], "running of max_running")
	require.Equal(t, "concurrency 2", acme[6])
	require.Contains(t, acme[9], "of $5.00")
	var styled bool
	page.eval(`getComputedStyle(document.querySelector("table.tenants")).borderCollapse === "collapse" &&
		getComputedStyle(document.querySelector("header.top nav a.on")).color === "rgb(255, 255, 255)"`, &styled)
	require.True(t, styled, "monitor.css did not apply, or the nav does not mark Tenants")
	shot := page.screenshot()
	checkPNG(t, shot, 1280, 900)
	saveArtifact(t, "monitor-tenants.png", shot)

	page.click(`tr[data-tenant="acme"] a.tenant`)
	page.waitTrue(30*time.Second, "acme's page", `document.querySelectorAll("table.waiting tbody tr").length === 2`)
	var key []string
	page.eval(`Array.from(document.querySelector('tr[data-key="per_leaf=t/leaf"]').cells).map(c => c.innerText.trim())`, &key)
	require.Equal(t, []string{"per_leaf=t/leaf full", "1", "1", "2"}, key)
	var month string
	page.eval(`document.querySelector('tr[data-setting="spend_per_month"]').innerText`, &month)
	require.Regexp(t, `spend_per_month\s+\$100\.00\s+override \(set to 100\)`, month)
	var waits [][]string
	page.eval(`Array.from(document.querySelectorAll("table.waiting tbody tr")).map(r => Array.from(r.cells).map(c => c.innerText.trim()))`, &waits)
	for i, w := range waits {
		require.Equal(t, []string{"concurrency", "per_leaf=t/leaf", []string{"1st", "2nd"}[i]}, w[1:4])
	}
	shot = page.screenshotFull()
	saveArtifact(t, "monitor-tenant.png", shot)

	page.click(`table.waiting tbody tr:nth-child(2) a.tid`)
	page.waitTrue(30*time.Second, "the waiting run's page", `document.querySelector(".admission-wait") !== null`)
	var wait string
	page.eval(`document.querySelector(".admission-wait").innerText`, &wait)
	require.Regexp(t, `^waiting for concurrency per_leaf=t/leaf \(1 of 1 running, 2nd in line, \d+ s\)$`, wait)
	shot = page.screenshot()
	saveArtifact(t, "monitor-tenant-run.png", shot)
	page.click(`.links a.tenant`)
	page.waitTrue(30*time.Second, "back on acme's page", `document.querySelectorAll("table.waiting tbody tr").length === 2`)

	e.release()
	page.waitTrue(time.Minute, "the key drained, on the open page", `document.querySelector("table.keys") === null &&
		document.querySelector("table.waiting") === null`)
	e.wait(leaves[0].ThreadID, leaves[1].ThreadID, leaves[2].ThreadID)
	require.Empty(t, page.problems(), "errors in the tenants pages")
}
