package monitor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/admission"
	"github.com/spool-run/spool/monitor"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/thread"
)

// tenantsPolicy is the tenant tests' admission policy: acme weighs three
// and has a daily ceiling, and t/leaf runs one at a time (the first holds
// its slot at the gate, the others wait for the key).
const tenantsPolicy = `version: 1
tenants:
  acme: {weight: 3, priority: 2, spend_per_day: 5.00, max_running: 4}
  trial: {weight: 0.5}
concurrency:
  - {name: per_leaf, directives: ['t/leaf'], key: '${name}', max: 1}
`

// publish publishes policy (YAML) for e's namespace and makes it the
// orchestrator's in force at once.
func (e *env) publish(policy string) {
	e.t.Helper()
	pol, err := admission.Parse("admission.yaml", []byte(policy))
	require.NoError(e.t, err)
	p, _, err := admission.Publish(e.t.Context(), e.rdb, e.keys, pol, "admission.yaml", time.Now())
	require.NoError(e.t, err)
	e.orch.Admission().Watcher().Set(p)
}

// startIn starts a root of directive in tenant.
func (e *env) startIn(tenant, directive string, inputs map[string]any) *registry.Record {
	e.t.Helper()
	rec, err := e.orch.Start(e.t.Context(), orchestrator.StartRequest{Directive: directive, Inputs: inputs,
		Model: "script:" + treeScript, Bundle: e.bundle, Tenant: tenant})
	require.NoError(e.t, err)
	return rec
}

// keyHeld starts three leaves of acme on one key of max 1 and a trial
// echo, and waits until the first leaf holds the key at its gate and the
// other two wait for it; it returns the leaves, first the one running.
func (e *env) keyHeld() []*registry.Record {
	e.t.Helper()
	e.publish(tenantsPolicy)
	var leaves []*registry.Record
	for i := range 3 {
		leaves = append(leaves, e.startIn("acme", "t/leaf", map[string]any{"gate": e.gate, "n": i + 1}))
	}
	echo := e.startIn("trial", "t/echo", map[string]any{"text": "hi"})
	e.wait(echo.ThreadID)
	ok := waitFor(e.t.Context(), time.Minute, func() bool {
		t, err := e.orch.TenantStatus(e.t.Context(), "acme")
		return err == nil && t.Running == 1 && t.Blocked[admission.WaitConcurrency] == 2
	})
	require.True(e.t, ok, "acme's leaves did not settle: one running, two waiting for the key")
	for i, l := range leaves {
		rec, err := e.orch.Record(e.t.Context(), l.ThreadID)
		require.NoError(e.t, err)
		if rec.Status == thread.StatusRunning {
			leaves[0], leaves[i] = leaves[i], leaves[0]
		}
	}
	return leaves
}

// TestTenantPages: the tenants list and a tenant's page (and their JSON)
// show what `spool tenant list` and `tenant show` read, the same values;
// a tenant's page lists the runs admission holds with what each waits
// for; an unknown tenant is 404 and a name no tenant can have 400.
func TestTenantPages(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{})
	off := e.page("/tenants")
	require.Contains(t, off, "Admission is off")
	require.Contains(t, off, `href="/tenants/default"`, "default is always a tenant")

	leaves := e.keyHeld()
	_, err := e.orch.SetTenant(t.Context(), "acme", map[string]string{"spend_per_month": "100"}, nil)
	require.NoError(t, err)

	var list struct {
		On       bool                `json:"on"`
		Capacity int                 `json:"capacity"`
		Tenants  []*spooltype.Tenant `json:"tenants"`
	}
	code, body, _ := e.get("/api/tenants")
	require.Equal(t, http.StatusOK, code, body)
	require.NoError(t, json.Unmarshal([]byte(body), &list))
	require.True(t, list.On)
	require.Equal(t, 6, list.Capacity, "the worker's concurrency")
	want, err := e.orch.TenantStatuses(t.Context())
	require.NoError(t, err)
	require.Equal(t, names(want), names(list.Tenants))
	require.Equal(t, []string{"acme", "default", "trial"}, names(list.Tenants))
	acme := list.Tenants[0]
	require.Equal(t, 3.0, acme.Weight)
	require.Equal(t, 1, acme.Running)
	require.Equal(t, map[string]int{admission.WaitConcurrency: 2}, acme.Blocked)

	html := e.page("/tenants")
	require.Contains(t, html, "Admission is on")
	require.Contains(t, html, `<tr data-tenant="acme">`)
	require.Contains(t, html, `concurrency <b>2</b>`)
	require.Contains(t, html, "of $5.00", "acme's daily ceiling")

	var one struct {
		Tenant   *spooltype.Tenant   `json:"tenant"`
		Settings []map[string]string `json:"settings"`
		Waiting  []*registry.Record  `json:"waiting"`
		Grants   int                 `json:"grants"`
	}
	code, body, _ = e.get("/api/tenants/acme")
	require.Equal(t, http.StatusOK, code, body)
	require.NoError(t, json.Unmarshal([]byte(body), &one))
	require.Equal(t, []spooltype.TenantKey{{Rule: "per_leaf", Value: "t/leaf", Running: 1, Max: 1, Waiting: 2}}, one.Tenant.Keys)
	require.Equal(t, "override", one.Tenant.Sources["spend_per_month"])
	require.Contains(t, one.Settings, map[string]string{"name": "spend_per_month", "value": "$100.00", "source": "override", "override": "100"})
	require.Contains(t, one.Settings, map[string]string{"name": "weight", "value": "3", "source": "tenant"})
	require.Equal(t, 1, one.Grants, "the running leaf's: the others wait for the key, the echo is trial's")
	require.Len(t, one.Waiting, 2)
	for i, w := range one.Waiting {
		require.Equal(t, admission.WaitConcurrency, w.WaitingFor)
		require.Equal(t, "per_leaf=t/leaf", w.WaitingKey)
		require.Equal(t, i+1, w.Position, "in line order")
		require.Equal(t, 2, w.Priority, "acme's")
	}
	require.ElementsMatch(t, []string{leaves[1].ThreadID, leaves[2].ThreadID}, []string{one.Waiting[0].ThreadID, one.Waiting[1].ThreadID})

	page := e.page("/tenants/acme")
	require.Contains(t, page, `<tr data-key="per_leaf=t/leaf">`)
	require.Contains(t, page, `<a class="tid" href="`+threadURL(one.Waiting[0].ThreadID)+`">`)
	require.Contains(t, page, "2nd")
	// A waiting run's page names its tenant and says where it waits.
	run := e.page(threadURL(one.Waiting[1].ThreadID))
	require.Contains(t, run, `href="/tenants/acme">acme</a>`)
	require.Regexp(t, `waiting for <b>concurrency per_leaf=t/leaf \(1 of 1 running, 2nd in line, \d+ s\)</b>`, run)

	// The threads list of acme's runs, which the tenant page links to.
	require.Contains(t, page, `href="/?tenant=acme"`)
	mine := e.page("/?tenant=acme")
	for _, l := range leaves {
		require.Contains(t, mine, `href="`+threadURL(l.ThreadID)+`"`)
	}
	require.NotContains(t, mine, "t/echo-", "trial's run")
	require.Contains(t, e.page("/?tenant=trial"), "t/echo-")

	for path, status := range map[string]int{"/?tenant=Not_A_Name": 400, "/tenants/nobody": 404, "/api/tenants/nobody": 404, "/tenants/Not_A_Name": 400, "/api/tenants/Not_A_Name": 400} {
		code, body, _ := e.get(path)
		require.Equal(t, status, code, "%s: %s", path, body)
	}
	_, body, _ = e.get("/api/tenants/nobody")
	require.Contains(t, body, "tenant_not_found")
	e.release()
	e.wait(leaves[0].ThreadID, leaves[1].ThreadID, leaves[2].ThreadID)
	// The last leaf's worker releases its grant just after its end.
	require.True(t, waitFor(t.Context(), 30*time.Second, func() bool { return !strings.Contains(e.page("/tenants/acme"), "per_leaf=t/leaf") }),
		"a key held or waited for after every leaf ended")
}

// scriptCounter counts the calls of one Redis function (its name's
// prefix), alone or in pipelines.
type scriptCounter struct {
	prefix string
	n      atomic.Int64
}

func (c *scriptCounter) count(cmd redis.Cmder) {
	if args := cmd.Args(); cmd.Name() == "fcall" && len(args) > 1 && strings.HasPrefix(fmt.Sprint(args[1]), c.prefix) {
		c.n.Add(1)
	}
}

func (c *scriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.count(cmd)
		return next(ctx, cmd)
	}
}
func (c *scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			c.count(cmd)
		}
		return next(ctx, cmds)
	}
}

// TestTenantPageReadsWaitsAtOnce: a tenant's page reads where each of its
// waiting runs stands in one adm_where call, not one per run (a page of a
// 1,000-run backlog made 1,000 calls per refresh), and still lists each
// with its place in line.
func TestTenantPageReadsWaitsAtOnce(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{})
	e.keyHeld()
	const more = 18
	for i := range more {
		e.startIn("acme", "t/leaf", map[string]any{"gate": e.gate, "n": 10 + i})
	}
	waiting := more + 2
	require.True(t, waitFor(t.Context(), time.Minute, func() bool {
		st, err := e.orch.TenantStatus(t.Context(), "acme")
		return err == nil && st.Blocked[admission.WaitConcurrency] == waiting
	}), "acme's leaves did not all wait for the key")

	// The page is read through an orchestrator of its own over a counted
	// client: the worker's housekeeping reads waits too.
	calls := &scriptCounter{prefix: "spool_adm_where_"}
	counted := redis.NewClient(e.rdb.(*redis.Client).Options())
	t.Cleanup(func() { _ = counted.Close() })
	counted.AddHook(calls)
	orch, err := orchestrator.New(orchestrator.Config{Namespace: e.keys.Namespace()}, counted, e.store, e.enq, nil, e.keyring)
	require.NoError(t, err)
	require.NoError(t, orch.Admission().Watcher().Ready(t.Context()))
	e = e.withMonitor(monitor.Config{Orch: orch, Redis: counted, CountsTTL: -1})
	var one struct {
		Waiting      []*registry.Record `json:"waiting"`
		WaitingTotal int                `json:"waiting_total"`
	}
	code, body, _ := e.get("/api/tenants/acme")
	require.Equal(t, http.StatusOK, code, body)
	require.NoError(t, json.Unmarshal([]byte(body), &one))
	require.Equal(t, int64(1), calls.n.Load(), "adm_where calls for one refresh of %d waiting runs", waiting)
	require.Equal(t, waiting, one.WaitingTotal)
	require.Len(t, one.Waiting, waiting)
	for i, w := range one.Waiting {
		require.Equal(t, admission.WaitConcurrency, w.WaitingFor)
		require.Equal(t, i+1, w.Position, "in line order")
	}
	calls.n.Store(0)
	require.Contains(t, e.page("/tenants/acme"), admission.Ordinal(waiting))
	require.Equal(t, int64(1), calls.n.Load(), "adm_where calls for the page")
}

func names(ts []*spooltype.Tenant) []string {
	out := []string{}
	for _, t := range ts {
		out = append(out, t.Tenant)
	}
	return out
}

// TestAdmissionMetrics: /metrics exports admission's state as the
// tenants pages read it: acme's leaf running and two blocked on the
// key, the capacity and shares, each tenant's spend windows (held, its
// ceiling, an overrun, which the tenants pages show too) and the
// idempotent replays by tenant and surface.
func TestAdmissionMetrics(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{})
	e.keyHeld()
	for range 2 {
		_, err := e.orch.Start(t.Context(), orchestrator.StartRequest{Directive: "t/echo", Inputs: map[string]any{"text": "once"},
			Model: "script:" + treeScript, Bundle: e.bundle, Tenant: "trial", IdempotencyKey: "order-1", Surface: orchestrator.SurfaceAPI})
		require.NoError(t, err)
	}
	// An activation that spent past its allowance left an overrun in
	// acme's day window (admission.lua's settle).
	day, _ := admission.Windows(time.Now())
	require.NoError(t, e.rdb.HIncrBy(t.Context(), e.keys.AdmTenant("acme", "spend"), "d:"+day+":overrun", 25_000_000).Err())
	require.Contains(t, e.page("/tenants"), "overrun $0.025000")
	require.Contains(t, e.page("/tenants/acme"), `<span class="bad">$0.025000</span>`)
	body := e.page("/metrics")
	for _, want := range []string{
		`spool_tenant_spend_overrun_usd\{spool_namespace="[^"]+",tenant="acme",window="day"\} 0\.025\n`,
		`spool_admission_capacity\{spool_namespace="[^"]+"\} 6`,
		`spool_admission_running\{queue="default",spool_namespace="[^"]+",tenant="acme"\} 1`,
		`spool_admission_blocked\{queue="default",reason="concurrency",spool_namespace="[^"]+",tenant="acme"\} 2`,
		`spool_admission_share\{spool_namespace="[^"]+",tenant="acme"\} [1-9]`,
		`spool_tenant_spend_held_usd\{spool_namespace="[^"]+",tenant="acme",window="day"\} 0\.1\n`,
		`spool_tenant_spend_limit_usd\{spool_namespace="[^"]+",tenant="acme",window="day"\} 5\n`,
		`spool_tenant_spend_usd\{spool_namespace="[^"]+",tenant="acme",window="day"\} 0\n`, // the leaf has not settled yet
		`spool_tenant_spend_overrun_usd\{spool_namespace="[^"]+",tenant="acme",window="month"\} 0\n`,
		`spool_idempotent_replays_total\{spool_namespace="[^"]+",surface="api",tenant="trial"\} 1\n`,
		`spool_monitor_admission_scrape_ok\{spool_namespace="[^"]+"\} 1`,
	} {
		require.Regexp(t, want, body)
	}
	require.NotRegexp(t, `spool_tenant_spend_limit_usd\{[^}]*tenant="trial"`, body, "trial has no ceiling")
}

// TestWebhookMetrics: /metrics exports the webhook counters as
// orchestrator.WebhookStats reads them (the worker's tests check that
// deliveries and attempts write them): deliveries made and attempts by
// endpoint and outcome, the deliveries due and how overdue the oldest is.
func TestWebhookMetrics(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{})
	body := e.page("/metrics")
	require.Regexp(t, `spool_webhook_due\{spool_namespace="[^"]+"\} 0\n`, body)
	require.Regexp(t, `spool_webhook_oldest_due_seconds\{spool_namespace="[^"]+"\} 0\n`, body)
	require.NotContains(t, body, "spool_webhook_attempts_total{")

	ctx := t.Context()
	require.NoError(t, e.rdb.HSet(ctx, e.keys.WebhookStats(), "ops|made", 3, "ops|retrying", 2, "ops|delivered", 3, "ops|failed", 0,
		"--notify|made", 1, "--notify|delivered", 1).Err())
	require.NoError(t, e.rdb.ZAdd(ctx, e.keys.WebhookDue(), redis.Z{Score: float64(time.Now().Add(-90 * time.Second).UnixMilli()), Member: "dlv_a"},
		redis.Z{Score: float64(time.Now().Add(time.Hour).UnixMilli()), Member: "dlv_b"}).Err())
	body = e.page("/metrics")
	for _, want := range []string{
		`spool_webhook_deliveries_total\{endpoint="ops",spool_namespace="[^"]+"\} 3\n`,
		`spool_webhook_deliveries_total\{endpoint="--notify",spool_namespace="[^"]+"\} 1\n`,
		`spool_webhook_attempts_total\{endpoint="ops",outcome="retrying",spool_namespace="[^"]+"\} 2\n`,
		`spool_webhook_attempts_total\{endpoint="ops",outcome="delivered",spool_namespace="[^"]+"\} 3\n`,
		`spool_webhook_attempts_total\{endpoint="--notify",outcome="delivered",spool_namespace="[^"]+"\} 1\n`,
		`spool_webhook_due\{spool_namespace="[^"]+"\} 2\n`,
		`spool_webhook_oldest_due_seconds\{spool_namespace="[^"]+"\} (9\d|1[0-9]\d)(\.\d+)?\n`,
		`spool_monitor_webhook_scrape_ok\{spool_namespace="[^"]+"\} 1\n`,
	} {
		require.Regexp(t, want, body)
	}
}
