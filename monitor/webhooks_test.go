package monitor_test

import (
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/config"
	"github.com/spool-run/spool/orchestrator"
)

// TestWebhooksPage: a run's --notify endpoint that answers 503 shows on
// the webhooks page with its counters and the delivery retrying, its
// last answer and a Redeliver button; Redeliver asks first, then makes
// the delivery due again with the same event id (its redeliveries
// counted), and says so once. A bad status filter is a one-line 400.
func TestWebhooksPage(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(down.Close)
	e := setup(t, envOptions{})
	require.Contains(t, e.page("/webhooks"), "No deliveries.")
	rec, err := e.orch.Start(t.Context(), orchestrator.StartRequest{Directive: "t/echo", Inputs: map[string]any{"text": "hi"},
		Model: "script:" + treeScript, Bundle: e.bundle, Notify: down.URL})
	require.NoError(t, err)
	e.wait(rec.ThreadID)
	var d *orchestrator.WebhookDelivery
	require.Eventually(t, func() bool {
		ds, err := e.orch.WebhookDeliveries(t.Context(), orchestrator.DeliveryFilter{Endpoint: config.NotifyEndpoint})
		require.NoError(t, err)
		if len(ds) == 1 && ds[0].Status == orchestrator.DeliveryRetrying {
			d = ds[0]
			return true
		}
		return false
	}, 30*time.Second, 50*time.Millisecond)

	body := html.UnescapeString(e.page("/webhooks"))
	for _, want := range []string{`<a href="/webhooks?endpoint=--notify">--notify</a>`, `data-delivery="` + d.ID + `"`, d.EventID, "run.completed",
		rec.ThreadID, ">retrying<", "next attempt ", "503", `action="/webhooks/` + d.ID + `/redeliver"`} {
		require.Contains(t, body, want)
	}
	require.Contains(t, html.UnescapeString(e.page("/webhooks?status=delivered")), "No deliveries match.")
	code, page, _ := e.get("/webhooks?status=lost")
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, page, "no delivery status")

	s := e.session()
	ask := s.do(http.MethodPost, "/webhooks/"+d.ID+"/redeliver", url.Values{"return": {"/webhooks"}})
	require.Equal(t, http.StatusOK, ask.code)
	require.Contains(t, ask.body, "Send this delivery again?")
	before := hits.Load()
	to, done := s.act("/webhooks/"+d.ID+"/redeliver", url.Values{"confirmed": {"1"}, "return": {"/webhooks"}})
	require.Equal(t, "/webhooks", to)
	require.Contains(t, html.UnescapeString(done), "is due again: the same webhook-id ("+d.EventID+")")
	again, err := e.orch.WebhookDelivery(t.Context(), d.ID)
	require.NoError(t, err)
	require.Equal(t, 1, again.Redeliveries)
	require.Eventually(t, func() bool { return hits.Load() > before }, 10*time.Second, 20*time.Millisecond, "sent again")
	_, gone := s.act("/webhooks/dlv_nope/redeliver", url.Values{"confirmed": {"1"}})
	require.Contains(t, gone, "No delivery dlv_nope")
}

// TestBrowserWebhooks: the webhooks page in headless Chromium, reached
// from the navigation, a failing endpoint's delivery retrying, then sent
// again through its confirmation. Screenshotted.
func TestBrowserWebhooks(t *testing.T) {
	bin := findChromium(t)
	t.Parallel()
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusBadGateway) }))
	t.Cleanup(down.Close)
	e := setup(t, envOptions{})
	rec, err := e.orch.Start(t.Context(), orchestrator.StartRequest{Directive: "t/echo", Inputs: map[string]any{"text": "hi"},
		Model: "script:" + treeScript, Bundle: e.bundle, Notify: down.URL})
	require.NoError(t, err)
	e.wait(rec.ThreadID)
	require.Eventually(t, func() bool {
		ds, err := e.orch.WebhookDeliveries(t.Context(), orchestrator.DeliveryFilter{})
		require.NoError(t, err)
		return len(ds) == 1 && ds[0].Status == orchestrator.DeliveryRetrying
	}, 30*time.Second, 50*time.Millisecond)
	br := startBrowser(t, bin)
	page := br.newTab()
	page.navigate(e.srv.URL + "/")
	page.click(`header.top nav a[href="/webhooks"]`)
	page.waitTrue(30*time.Second, "the delivery retrying", `[...document.querySelectorAll("table.deliveries td")].some(td => td.innerText.startsWith("retrying"))`)
	shot := page.screenshot()
	checkPNG(t, shot, 1280, 900)
	saveArtifact(t, "monitor-webhooks.png", shot)
	page.click(`table.deliveries form button`)
	page.waitTrue(10*time.Second, "the confirmation", `document.querySelector("#confirm") !== null`)
	page.click(`#confirm`)
	page.waitTrue(10*time.Second, "the outcome", `(document.querySelector(".flash") || {innerText: ""}).innerText.includes("is due again")`)
}
