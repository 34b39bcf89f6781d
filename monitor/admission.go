package monitor

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spool-run/spool/admission"
)

// admissionCollector exports admission's state on /metrics, read on each
// scrape: every known tenant's state, overrides and spend hashes once,
// and the idempotent replays' counters. Every series has
// the label spool_namespace. ready is what more workers would serve (the
// autoscaler's signal, with running); blocked is what they would not.
type admissionCollector struct {
	m    *Monitor
	adm  *admission.Admitter
	ns   prometheus.Labels
	desc map[string]*prometheus.Desc
}

func newAdmissionCollector(m *Monitor) *admissionCollector {
	c := &admissionCollector{m: m, adm: m.cfg.Orch.Admission(), ns: prometheus.Labels{"spool_namespace": m.cfg.Orch.Namespace()},
		desc: map[string]*prometheus.Desc{}}
	for _, d := range []struct {
		name, help string
		labels     []string
	}{
		{"spool_admission_ready", "Activations ready or granted, waiting for a worker slot: what more workers would serve.", []string{"queue", "tenant"}},
		{"spool_admission_running", "Claimed activations.", []string{"queue", "tenant"}},
		{"spool_admission_blocked", "Activations waiting on a key or a tenant ceiling: more workers would not help.", []string{"queue", "tenant", "reason"}},
		{"spool_admission_capacity", "Live worker slots (the sum of the live workers' concurrency).", nil},
		{"spool_admission_share", "A tenant's fair share of the worker slots.", []string{"tenant"}},
		{"spool_admission_wait_seconds", "Time from an activation's request to its grant.", []string{"tenant", "reason"}},
		{"spool_admission_grants_total", "Grants made.", []string{"tenant"}},
		{"spool_admission_reaped_total", "Grants ended by their lease lapsing, by the state they were in.", []string{"tenant", "state"}},
		{"spool_admission_refusals_total", "Activations refused by a tenant ceiling, by code.", []string{"tenant", "code"}},
		{"spool_admission_unreplicated_total", "Grants used without a replica's acknowledgement.", []string{"tenant"}},
		{"spool_admission_fenced_total", "Times a tenant's state was found gone back (a failover lost writes) and fenced.", []string{"tenant"}},
		{"spool_tenant_spend_usd", "A tenant's spend in its current UTC day or month window.", []string{"tenant", "window"}},
		{"spool_tenant_spend_held_usd", "What a tenant's running activations hold of its window (lent, not yet spent).", []string{"tenant", "window"}},
		{"spool_tenant_spend_limit_usd", "A tenant's spend ceiling of the window (only when set).", []string{"tenant", "window"}},
		{"spool_tenant_spend_overrun_usd", "What a tenant spent in the window beyond the allowances lent to its activations.", []string{"tenant", "window"}},
		{"spool_idempotent_replays_total", "Starts with an idempotency key that answered the key's run instead of starting one, by where they came from.", []string{"tenant", "surface"}},
		{"spool_monitor_admission_scrape_ok", "1 when the last scrape read admission's state without error.", nil},
	} {
		c.desc[d.name] = prometheus.NewDesc(d.name, d.help, d.labels, c.ns)
	}
	return c
}

func (c *admissionCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.desc {
		ch <- d
	}
}

func (c *admissionCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := c.adm.Scrape(ctx)
	var replays map[string]map[string]int64
	if err == nil {
		replays, err = c.m.cfg.Orch.IdempotentReplays(ctx)
	}
	if err != nil {
		c.m.cfg.Logger.Warn("monitor: metrics: admission", "error", err)
		ch <- prometheus.MustNewConstMetric(c.desc["spool_monitor_admission_scrape_ok"], prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.desc["spool_monitor_admission_scrape_ok"], prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(c.desc["spool_admission_capacity"], prometheus.GaugeValue, float64(s.Capacity))
	for _, t := range s.Tenants {
		c.tenant(ch, t)
		c.spend(ch, t)
	}
	for tenant, by := range replays {
		for surface, n := range by {
			ch <- prometheus.MustNewConstMetric(c.desc["spool_idempotent_replays_total"], prometheus.CounterValue, float64(n), tenant, surface)
		}
	}
}

// spend sends one tenant's spend windows: spent, held, the limit when
// one is set, and the overrun.
func (c *admissionCollector) spend(ch chan<- prometheus.Metric, t admission.TenantScrape) {
	usd := func(name string, v float64, window string) {
		ch <- prometheus.MustNewConstMetric(c.desc[name], prometheus.GaugeValue, v, t.Tenant, window)
	}
	for window, sp := range t.Spend {
		usd("spool_tenant_spend_usd", sp.Spent, window)
		usd("spool_tenant_spend_held_usd", sp.Held, window)
		usd("spool_tenant_spend_overrun_usd", t.Overrun[window], window)
		if sp.Limit != nil {
			usd("spool_tenant_spend_limit_usd", *sp.Limit, window)
		}
	}
}

// tenant sends one tenant's series.
func (c *admissionCollector) tenant(ch chan<- prometheus.Metric, t admission.TenantScrape) {
	gauge := func(name string, v int, labels ...string) {
		ch <- prometheus.MustNewConstMetric(c.desc[name], prometheus.GaugeValue, float64(v), labels...)
	}
	counter := func(name string, v int, labels ...string) {
		ch <- prometheus.MustNewConstMetric(c.desc[name], prometheus.CounterValue, float64(v), labels...)
	}
	for q, n := range t.Ready {
		gauge("spool_admission_ready", n, q, t.Tenant)
	}
	for q, n := range t.Running {
		gauge("spool_admission_running", n, q, t.Tenant)
	}
	for qr, n := range t.Blocked {
		gauge("spool_admission_blocked", n, qr.Queue, t.Tenant, qr.Reason)
	}
	gauge("spool_admission_share", t.Share, t.Tenant)
	counter("spool_admission_grants_total", t.Grants, t.Tenant)
	for _, st := range []string{admission.StateGranted, admission.StateRunning} {
		counter("spool_admission_reaped_total", t.Reaped[st], t.Tenant, st)
	}
	for code, n := range t.Refusals {
		counter("spool_admission_refusals_total", n, t.Tenant, code)
	}
	counter("spool_admission_unreplicated_total", t.Unreplicated, t.Tenant)
	counter("spool_admission_fenced_total", t.Fenced, t.Tenant)
	for reason, h := range t.Wait {
		buckets := make(map[float64]uint64, len(admission.WaitBuckets))
		for i, le := range admission.WaitBuckets {
			buckets[le] = h.Counts[i]
		}
		ch <- prometheus.MustNewConstHistogram(c.desc["spool_admission_wait_seconds"], h.Count, h.Sum, buckets, t.Tenant, reason)
	}
}
