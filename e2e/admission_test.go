package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/thread"
)

// tenantPolicy: tenants a and b (b with max_running 4), and a rule that
// lets at most two g/waiter runs of one item hold a worker slot at once.
const tenantPolicy = `version: 1
tenants:
  a: {weight: 1}
  b: {weight: 1, max_running: 4}
concurrency:
  - {name: per_item, directives: ["g/waiter"], key: "${inputs.item}", max: 2}
`

// tenantFields are the members `tenant show --json` has at least, and
// those of its limits and of each spend window and key.
var (
	tenantFields = []string{"tenant", "weight", "priority", "share", "running", "ready", "blocked", "runs_in_flight", "limits", "spend", "keys"}
	limitFields  = []string{"max_running", "spend_per_day", "spend_per_month", "starts_per_minute", "runs_in_flight", "on_exhausted"}
	spendFields  = []string{"window", "spent", "held", "limit", "overrun"}
	keyFields    = []string{"rule", "value", "running", "max", "waiting"}
)

// requireTenantShape requires a tenant's JSON to have every member the
// CLI reference names.
func requireTenantShape(t *testing.T, raw json.RawMessage) {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(raw, &m), string(raw))
	has := func(obj map[string]json.RawMessage, fields []string, what string) {
		for _, f := range fields {
			require.Contains(t, obj, f, "%s: %s", what, raw)
		}
	}
	has(m, tenantFields, "tenant")
	var limits, spend map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(m["limits"], &limits))
	has(limits, limitFields, "limits")
	require.NoError(t, json.Unmarshal(m["spend"], &spend))
	for _, w := range []string{"day", "month"} {
		var win map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(spend[w], &win), "spend.%s: %s", w, raw)
		has(win, spendFields, "spend."+w)
	}
	var keys []map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(m["keys"], &keys), "keys: %s", raw)
	for _, k := range keys {
		has(k, keyFields, "key")
	}
	var blocked map[string]int
	require.NoError(t, json.Unmarshal(m["blocked"], &blocked), "blocked is {reason: n}: %s", raw)
}

// tenantShow is `spool tenant show NAME --json`, its shape checked.
func tenantShow(t *testing.T, e *spooltest.Env, name string) spooltype.Tenant {
	t.Helper()
	r := e.Spool("tenant", "show", name, "--json")
	require.Equal(t, 0, r.Code, r.Stderr)
	requireTenantShape(t, json.RawMessage(r.Stdout))
	var ts spooltype.Tenant
	r.JSON(t, &ts)
	return ts
}

// usageFails requires a command to exit 2 with one line on stderr that
// says want.
func usageFails(t *testing.T, e *spooltest.Env, want string, args ...string) {
	t.Helper()
	r := e.Spool(args...)
	require.Equal(t, 2, r.Code, "spool %v: %s%s", args, r.Stdout, r.Stderr)
	line := lastLine(r.Stderr)
	require.True(t, strings.HasPrefix(line, "spool: "), "spool %v: %s", args, r.Stderr)
	require.Contains(t, line, want, "spool %v", args)
}

// lastLine is the last line of a command's stderr: its error, after
// the log lines the tests' info level lets through.
func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndexByte(s, '\n')+1:]
}

// waitRuns polls the records of ids (where admission holds a run read
// live) until ok holds of them.
func waitRuns(t *testing.T, e *spooltest.Env, ids []string, what string, ok func([]*registry.Record) bool) {
	t.Helper()
	require.Eventually(t, func() bool {
		var recs []*registry.Record
		for _, id := range ids {
			rec, err := e.Orch.Record(t.Context(), id)
			require.NoError(t, err)
			recs = append(recs, rec)
		}
		return ok(recs)
	}, time.Minute, 50*time.Millisecond, what)
}

// count is how many of recs f holds of.
func count(recs []*registry.Record, f func(*registry.Record) bool) int {
	n := 0
	for _, r := range recs {
		if f(r) {
			n++
		}
	}
	return n
}

// TestTenantSurfaces: through the binary on real Redis, with a policy
// of tenants a and b and a per_item key of max 2 published: three runs
// of one item in tenant a wait for capacity behind four of other items
// that fill the fleet; when those end, two take the key and the grant
// loop moves the third to the key's queue; thread show says where it
// waits (the waiting line; waiting_for, waiting_key, waiting_since and
// position in --json, GET /v1/threads/{id} too), thread list
// --waiting-for and ?waiting_for= find it by what it waits for now (not
// the capacity it was parked with), and a reason that is none is a
// usage error (400); tenant show,
// tenant list, GET /v1/tenants[/{t}] and MCP show_tenant give the
// tenant's standing and settings in every documented field (running,
// blocked by reason, the key at its max); tenant set and PATCH write
// overrides, which survive apply until cleared, and a bad value or an
// unknown setting is exit 2 (400) and changes nothing; an unknown
// tenant is tenant_not_found (exit 1, 404); once the runs end the
// tenant holds nothing and blocks on nothing.
func TestTenantSurfaces(t *testing.T) {
	t.Parallel()
	files := graphProject()
	files[".ai/config/agent/admission.yaml"] = tenantPolicy
	e := spooltest.New(t, spooltest.Options{Files: files})
	// Unpublished, the tenants' text says that nothing is counted.
	const offLine = "admission  off: no policy is published"
	r := e.Spool("tenant", "list")
	require.Equal(t, 0, r.Code, r.Stderr)
	require.Contains(t, r.Stdout, offLine)
	r = e.Spool("admission", "apply")
	require.Equal(t, 0, r.Code, r.Stderr)
	r = e.Spool("tenant", "list")
	require.Equal(t, 0, r.Code, r.Stderr)
	require.NotContains(t, r.Stdout, offLine)
	e.StartWorker("--concurrency", "4")
	busy, releaseBusy := gateFile(t)
	gate, release := gateFile(t)

	// Four runs of other items fill the fleet's four slots; three runs of
	// item x then wait for capacity, their key free.
	var others, ids []string
	for _, item := range []string{"y", "y", "z", "z"} {
		others = append(others, startRun(t, e, "thread", "run", "g/waiter", "--input", "item="+item, "--input", "gate="+busy, "--tenant", "a"))
	}
	waitRuns(t, e, others, "the other items fill the fleet", func(recs []*registry.Record) bool {
		return count(recs, func(r *registry.Record) bool { return r.Status == thread.StatusRunning }) == 4
	})
	for range 3 {
		ids = append(ids, startRun(t, e, "thread", "run", "g/waiter", "--input", "item=x", "--input", "gate="+gate, "--tenant", "a"))
	}
	waitRuns(t, e, ids, "the x runs wait for capacity", func(recs []*registry.Record) bool {
		return count(recs, func(r *registry.Record) bool { return r.WaitingFor == "capacity" }) == 3
	})
	r = e.Spool("thread", "list", "--waiting-for", "capacity", "--json")
	require.Equal(t, 0, r.Code, r.Stderr)
	listed := listedThreads(t, r)
	require.Len(t, listed, 3)

	// The slots free: two x runs take per_item=x, and the grant loop moves
	// the third to the key's queue, where it waits for concurrency.
	releaseBusy()
	var waiter string
	waitRuns(t, e, ids, "two runs hold per_item=x and the third waits for it", func(recs []*registry.Record) bool {
		waiter = ""
		for _, r := range recs {
			if r.Status == thread.StatusWaiting && r.WaitingFor == "concurrency" {
				waiter = r.ThreadID
			}
		}
		return waiter != "" && count(recs, func(r *registry.Record) bool { return r.Status == thread.StatusRunning }) == 2
	})

	// thread show: who waits, for what, where in line.
	r = e.Spool("thread", "show", waiter)
	require.Equal(t, 0, r.Code, r.Stderr)
	require.Regexp(t, `(?m)^waiting    concurrency per_item=x \(2 of 2 running, 1st in line, \d+ s\)$`, r.Stdout)
	var rec map[string]any
	r = e.Spool("thread", "show", waiter, "--json")
	require.Equal(t, 0, r.Code, r.Stderr)
	r.JSON(t, &rec)
	require.Equal(t, "waiting", rec["status"])
	require.Equal(t, "concurrency", rec["waiting_for"])
	require.Equal(t, "per_item=x", rec["waiting_key"])
	require.EqualValues(t, 1, rec["position"])
	require.NotEmpty(t, rec["waiting_since"])
	// A wait on it says so once, and what would start it.
	r = e.Spool("thread", "wait", waiter, "--timeout", "2s")
	require.Equal(t, 1, r.Code, r.Stderr)
	require.Regexp(t, `(?m)^spool: waiting for admission: concurrency per_item=x \(2 of 2 running, 1st in line, \d+ s\); it starts when a run holding that key ends$`, r.Stderr)
	require.Equal(t, 2, strings.Count(r.Stderr, "waiting for admission: concurrency"), "once while it waits, once in the timeout's message:\n%s", r.Stderr)

	// thread list --waiting-for: what it waits for now.
	r = e.Spool("thread", "list", "--waiting-for", "concurrency", "--json")
	require.Equal(t, 0, r.Code, r.Stderr)
	listed = listedThreads(t, r)
	require.Len(t, listed, 1)
	require.Equal(t, waiter, listed[0].ThreadID)
	r = e.Spool("thread", "list", "--waiting-for", "approval", "--json")
	require.Equal(t, 0, r.Code, r.Stderr)
	listed = listedThreads(t, r)
	require.Empty(t, listed)
	usageFails(t, e, `--waiting-for "nothing"`, "thread", "list", "--waiting-for", "nothing")

	// tenant show and list.
	a := tenantShow(t, e, "a")
	require.Equal(t, "a", a.Tenant)
	require.Equal(t, 2, a.Running)
	require.Equal(t, map[string]int{"concurrency": 1}, a.Blocked)
	require.Equal(t, []spooltype.TenantKey{{Rule: "per_item", Value: "x", Running: 2, Max: 2, Waiting: 1}}, a.Keys)
	require.Equal(t, int64(7), a.Runs)
	require.Equal(t, "wait", a.Limits.OnExhausted)
	require.Nil(t, a.Limits.MaxRunning)
	require.Equal(t, time.Now().UTC().Format("2006-01-02"), a.Spend["day"].Window)
	require.Equal(t, time.Now().UTC().Format("2006-01"), a.Spend["month"].Window)
	b := tenantShow(t, e, "b")
	require.Equal(t, 4, *b.Limits.MaxRunning)
	require.Equal(t, "tenant", b.Sources["max_running"])
	r = e.Spool("tenant", "list", "--json")
	require.Equal(t, 0, r.Code, r.Stderr)
	var all []json.RawMessage
	r.JSON(t, &all)
	var names []string
	for _, raw := range all {
		requireTenantShape(t, raw)
		var x spooltype.Tenant
		require.NoError(t, json.Unmarshal(raw, &x))
		names = append(names, x.Tenant)
	}
	require.Equal(t, []string{"a", "b", "default"}, names)
	r = e.Spool("tenant", "show", "nobody")
	require.Equal(t, 1, r.Code, r.Stderr)
	require.Equal(t, `spool: tenant_not_found: tenant "nobody" not found`, lastLine(r.Stderr))

	// tenant set: overrides, refused ones change nothing.
	r = e.Spool("tenant", "set", "a", "--weight", "3", "--max-running", "9", "--json")
	require.Equal(t, 0, r.Code, r.Stderr)
	a = tenantShow(t, e, "a")
	require.InDelta(t, 3, a.Weight, 1e-9)
	require.Equal(t, 9, *a.Limits.MaxRunning)
	require.Equal(t, "override", a.Sources["weight"])
	before := a.Overrides
	for _, bad := range []struct {
		want string
		args []string
	}{
		{`weight "0"`, []string{"--weight", "0"}},
		{`priority "9"`, []string{"--priority", "9"}},
		{`on_exhausted "maybe"`, []string{"--on-exhausted", "maybe"}},
		{`max_running "0"`, []string{"--max-running", "0"}},
		{`--clear "bogus"`, []string{"--weight", "5", "--clear", "bogus"}},
	} {
		usageFails(t, e, bad.want, append([]string{"tenant", "set", "a"}, bad.args...)...)
		require.Equal(t, before, tenantShow(t, e, "a").Overrides, "a refused tenant set changes nothing")
	}
	usageFails(t, e, "tenant_invalid", "tenant", "set", "Not A Tenant", "--weight", "2")
	r = e.Spool("admission", "apply")
	require.Equal(t, 0, r.Code, r.Stderr)
	require.Equal(t, before, tenantShow(t, e, "a").Overrides, "overrides survive apply")
	r = e.Spool("tenant", "set", "a", "--clear", "weight", "--clear", "max-running")
	require.Equal(t, 0, r.Code, r.Stderr)
	a = tenantShow(t, e, "a")
	require.InDelta(t, 1, a.Weight, 1e-9)
	require.Equal(t, "tenant", a.Sources["weight"])
	require.Nil(t, a.Limits.MaxRunning)
	require.Empty(t, a.Overrides)

	checkTenantAPI(t, e, waiter)
	checkShowTenantMCP(t, e)

	// Once the runs end, the tenant holds and blocks on nothing.
	release()
	for id, rec := range e.Wait(append(ids, others...), 2*time.Minute) {
		require.Equal(t, thread.StatusCompleted, rec.Status, id)
	}
	require.Eventually(t, func() bool {
		a = tenantShow(t, e, "a")
		return a.Running == 0 && len(a.Keys) == 0
	}, 30*time.Second, 100*time.Millisecond, "%+v", a)
	require.Empty(t, a.Blocked, "no reason with nothing waiting for it")
}

// checkTenantAPI: the tenant routes and the waiting_for filter of a
// `spool api` with tokens, every exchange held to the OpenAPI document.
func checkTenantAPI(t *testing.T, e *spooltest.Env, waiter string) {
	t.Helper()
	tk := writeTokens(t)
	srv := startAPI(t, e, "--tokens", tk.file)
	as := func(token string) func(*http.Request) {
		return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+token) }
	}
	raw := apiCall{t: t, hc: &http.Client{Transport: newOpenAPITransport(t)}, base: srv.base}
	get := func(path string, v any) {
		t.Helper()
		status, _, body := raw.do("GET", path, "", as(tk.ops))
		require.Equal(t, http.StatusOK, status, "GET %s: %s", path, body)
		require.NoError(t, json.Unmarshal(body, v), string(body))
	}

	var all []json.RawMessage
	get("/v1/tenants", &all)
	require.Len(t, all, 3)
	for _, x := range all {
		requireTenantShape(t, x)
	}
	var one json.RawMessage
	get("/v1/tenants/a", &one)
	requireTenantShape(t, one)
	var a spooltype.Tenant
	require.NoError(t, json.Unmarshal(one, &a))
	require.Equal(t, []spooltype.TenantKey{{Rule: "per_item", Value: "x", Running: 2, Max: 2, Waiting: 1}}, a.Keys)
	raw.problem(http.StatusNotFound, "tenant_not_found", "GET", "/v1/tenants/nobody", "", as(tk.ops))

	var recs []map[string]any
	get("/v1/threads?tenant=a&waiting_for=concurrency", &recs)
	require.Len(t, recs, 1)
	require.Equal(t, waiter, recs[0]["thread_id"])
	get("/v1/threads?tenant=b&waiting_for=concurrency", &recs)
	require.Empty(t, recs)
	raw.problem(http.StatusBadRequest, "bad_request", "GET", "/v1/threads?waiting_for=nothing", "", as(tk.ops))
	var rec map[string]any
	get("/v1/threads/"+url.PathEscape(waiter), &rec)
	require.Equal(t, "per_item=x", rec["waiting_key"])
	require.EqualValues(t, 1, rec["position"])

	// PATCH: overrides; a bad body changes nothing; only unbound callers.
	status, _, body := raw.do("PATCH", "/v1/tenants/a", `{"weight": 2, "spend_per_day": "5.5"}`, as(tk.ops))
	require.Equal(t, http.StatusOK, status, string(body))
	requireTenantShape(t, body)
	a = spooltype.Tenant{}
	require.NoError(t, json.Unmarshal(body, &a))
	require.InDelta(t, 2, a.Weight, 1e-9)
	require.InDelta(t, 5.5, *a.Limits.SpendPerDay, 1e-9)
	require.Equal(t, map[string]string{"weight": "2", "spend_per_day": "5.5"}, a.Overrides)
	for _, bad := range []string{`{"weight": "x"}`, `{"weight": 3, "clear": ["bogus"]}`, `{"bogus": 1}`, `{"priority": 0}`, `[1]`} {
		raw.problem(http.StatusBadRequest, "bad_request", "PATCH", "/v1/tenants/a", bad, as(tk.ops))
		require.Equal(t, a.Overrides, tenantShow(t, e, "a").Overrides, "PATCH %s changes nothing", bad)
	}
	raw.problem(http.StatusForbidden, "tenant_forbidden", "PATCH", "/v1/tenants/a", `{"weight": 9}`, as(tk.acme))
	status, _, body = raw.do("PATCH", "/v1/tenants/a", `{"clear": ["weight", "spend_per_day"]}`, as(tk.ops))
	require.Equal(t, http.StatusOK, status, string(body))
	var cleared spooltype.Tenant
	require.NoError(t, json.Unmarshal(body, &cleared))
	require.Empty(t, cleared.Overrides)
	require.Empty(t, tenantShow(t, e, "a").Overrides)

	// A bound token's own tenant, with no runs or state yet, has the
	// same shape.
	var own json.RawMessage
	status, _, body = raw.do("GET", "/v1/tenants/acme", "", as(tk.acme))
	require.Equal(t, http.StatusOK, status, string(body))
	require.NoError(t, json.Unmarshal(body, &own))
	requireTenantShape(t, own)
}

// checkShowTenantMCP: show_tenant of `spool mcp` gives a tenant as
// tenant show --json does, and so does a bound server's for its own
// tenant before it has any run.
func checkShowTenantMCP(t *testing.T, e *spooltest.Env) {
	t.Helper()
	for _, c := range []struct{ bind, ask, want string }{{"", "a", "a"}, {"", "", "default"}, {"fresh", "", "fresh"}} {
		got := showTenantMCP(t, e, c.bind, c.ask)
		require.Equal(t, c.want, got.Tenant)
		if c.ask == "a" {
			require.Equal(t, []spooltype.TenantKey{{Rule: "per_item", Value: "x", Running: 2, Max: 2, Waiting: 1}}, got.Keys)
		}
	}
}

// showTenantMCP asks a `spool mcp` (bound to bind, unless "") for
// show_tenant of ask (its default, when ""), checks the answer's shape
// and that an unknown tenant is tenant_not_found, and returns it.
func showTenantMCP(t *testing.T, e *spooltest.Env, bind, ask string) spooltype.Tenant {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	args := []string{"mcp"}
	if bind != "" {
		args = append(args, "--tenant", bind)
	}
	sess, stderr := connectSpoolMCP(ctx, t, e, args...)
	defer func() {
		_ = sess.Close() // waits for the server: its stderr is read after
		if t.Failed() {
			t.Logf("spool %v stderr:\n%s", args, stderr.String())
		}
	}()
	in := map[string]any{}
	if ask != "" {
		in["tenant"] = ask
	}
	res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "show_tenant", Arguments: in})
	require.NoError(t, err)
	require.False(t, res.IsError, "show_tenant %q of spool %v: %s", ask, args, resultText(res))
	b, err := json.Marshal(res.StructuredContent)
	require.NoError(t, err)
	requireTenantShape(t, b)
	var got spooltype.Tenant
	require.NoError(t, json.Unmarshal(b, &got))
	res, err = sess.CallTool(ctx, &mcp.CallToolParams{Name: "show_tenant", Arguments: map[string]any{"tenant": "nobody"}})
	require.NoError(t, err)
	require.True(t, res.IsError)
	require.Contains(t, resultText(res), "tenant_not_found")
	return got
}
