package monitor

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// webhookCollector exports the webhook deliveries' counters on /metrics,
// read on each scrape in one round trip (orchestrator.WebhookStats):
// what an operator alerts on when an endpoint fails or deliveries fall
// behind. Every series has the label spool_namespace.
type webhookCollector struct {
	m                                 *Monitor
	made, attempts, due, late, scrape *prometheus.Desc
}

func newWebhookCollector(m *Monitor) *webhookCollector {
	ns := prometheus.Labels{"spool_namespace": m.cfg.Orch.Namespace()}
	return &webhookCollector{m: m,
		made:     prometheus.NewDesc("spool_webhook_deliveries_total", "Webhook deliveries made (one per event and endpoint).", []string{"endpoint"}, ns),
		attempts: prometheus.NewDesc("spool_webhook_attempts_total", "Webhook delivery attempts by outcome: delivered, retrying (failed, tried again later) or failed (no attempts left).", []string{"endpoint", "outcome"}, ns),
		due:      prometheus.NewDesc("spool_webhook_due", "Webhook deliveries not yet delivered or given up (pending, retrying or being attempted).", nil, ns),
		late:     prometheus.NewDesc("spool_webhook_oldest_due_seconds", "How long the most overdue delivery has been due (0: none is overdue).", nil, ns),
		scrape:   prometheus.NewDesc("spool_monitor_webhook_scrape_ok", "1 when the last scrape read the webhook counters without error.", nil, ns),
	}
}

func (c *webhookCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.made, c.attempts, c.due, c.late, c.scrape} {
		ch <- d
	}
}

func (c *webhookCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.m.cfg.Orch.WebhookStats(ctx)
	if err != nil {
		c.m.cfg.Logger.Warn("monitor: metrics: webhooks", "error", err)
		ch <- prometheus.MustNewConstMetric(c.scrape, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.scrape, prometheus.GaugeValue, 1)
	for ep, n := range st.Made {
		ch <- prometheus.MustNewConstMetric(c.made, prometheus.CounterValue, float64(n), ep)
	}
	for ep, by := range st.Attempts {
		for outcome, n := range by {
			ch <- prometheus.MustNewConstMetric(c.attempts, prometheus.CounterValue, float64(n), ep, outcome)
		}
	}
	ch <- prometheus.MustNewConstMetric(c.due, prometheus.GaugeValue, float64(st.Due))
	late := 0.0
	if !st.OldestDue.IsZero() {
		late = max(c.m.cfg.Orch.Now().Sub(st.OldestDue).Seconds(), 0)
	}
	ch <- prometheus.MustNewConstMetric(c.late, prometheus.GaugeValue, late)
}
