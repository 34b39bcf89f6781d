package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/api"
	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/spooltype"
)

// tenantTokens are the bearer tokens of the tenant tests: one bound to
// acme, one bound to beta, one unbound (ops).
type tenantTokens struct {
	acme, beta, ops string
	file            string
}

// writeTokens writes a tokens file of three fresh tokens.
func writeTokens(t *testing.T) tenantTokens {
	t.Helper()
	tk := tenantTokens{acme: "acme-" + testenv.RandomID(24), beta: "beta-" + testenv.RandomID(24), ops: "ops-" + testenv.RandomID(24)}
	sum := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	tk.file = filepath.Join(t.TempDir(), "tokens.yaml")
	body := fmt.Sprintf("tokens:\n  - {name: acme-ci, sha256: %s, tenant: acme}\n  - {name: beta-ci, sha256: %s, tenant: beta}\n  - {name: ops, sha256: %s}\n",
		sum(tk.acme), sum(tk.beta), sum(tk.ops))
	require.NoError(t, os.WriteFile(tk.file, []byte(body), 0o600))
	return tk
}

// exchange is one HTTP request's answer, as the client saw it.
type exchange struct {
	status int
	header http.Header
	body   string
}

// tenantAPI sends requests to a `spool api` with a token.
type tenantAPI struct {
	t    *testing.T
	base string
}

func (a tenantAPI) do(token, method, path, body string, hdr ...string) exchange {
	a.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(a.t.Context(), method, a.base+path, rd)
	require.NoError(a.t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(a.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(a.t, err)
	resp.Header.Del("Date")
	return exchange{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// json decodes x's body into v, requiring status.
func (x exchange) json(t *testing.T, status int, v any) {
	t.Helper()
	require.Equal(t, status, x.status, x.body)
	require.NoError(t, json.Unmarshal([]byte(x.body), v), x.body)
}

// sameAs requires x to be, byte for byte (status, headers, body), what
// y is once every spelling of the id y asked for is the one x asked for.
func (x exchange) sameAs(t *testing.T, y exchange, xID, yID, what string) {
	t.Helper()
	swap := strings.NewReplacer(yID, xID, url.PathEscape(yID), url.PathEscape(xID))
	require.Equal(t, swap.Replace(y.body), x.body, "%s: body", what)
	require.Equal(t, y.status, x.status, "%s: status", what)
	hy := http.Header{}
	for k, vs := range y.header {
		for _, v := range vs {
			hy.Add(k, swap.Replace(v))
		}
	}
	require.Equal(t, hy, x.header, "%s: headers", what)
}

// missingID is an id shaped like id that names no run.
func missingID(id string) string { return id[:len(id)-4] + "zzzz" }

// idRouteBodies are the bodies that get each route naming a run past
// its own checks to the run's record, so that what answers is the
// record's lookup.
var idRouteBodies = map[string]string{
	"resume": `{"message": "go on"}`, "deny": `{"reason": "no"}`, "send": `{"message": "hi"}`, "interrupt": `{"message": "stop"}`,
	"approve": `{}`, "cancel": `{}`, "fork": `{"at_turn": 1}`, "messages": `{"name": "done", "data": {"ok": true}}`,
	// tree: a pause or unpause of the whole tree, from its root, is
	// refused as well as one of the run.
	"pause": `{"tree": true}`, "unpause": `{"tree": true}`,
}

// TestTenantBoundTokens: with `spool api --tokens FILE`, every request
// needs a listed token, and a token bound to a tenant (acme) cannot see,
// touch or name another tenant's (beta's) runs. A table over
// api.Routes(), so a new route cannot skip it: each route naming a run
// answers beta's run byte for byte as an id that does not exist and
// changes nothing; lists hold acme's runs, and a tenant parameter naming
// beta is an unknown tenant; starts land in acme, a body naming beta is
// 403 tenant_forbidden and beta's parent is an unknown parent; acme reads
// its own tenant only and administers none. On a standalone Redis and on
// a sharded Cluster.
func TestTenantBoundTokens(t *testing.T) {
	t.Parallel()
	for _, top := range []testenv.Topology{testenv.Standalone, testenv.Cluster} {
		t.Run(string(top), func(t *testing.T) {
			t.Parallel()
			e := spooltest.New(t, spooltest.Options{Files: graphProject(), Topology: top})
			tk := writeTokens(t)
			srv := startAPI(t, e, "--tokens", tk.file)
			a := tenantAPI{t: t, base: srv.base}

			// Every request needs a listed token, loopback included.
			require.Equal(t, http.StatusUnauthorized, a.do("", "GET", "/v1/threads", "").status)
			require.Equal(t, http.StatusUnauthorized, a.do("not-a-listed-token", "GET", "/v1/threads", "").status)
			require.Equal(t, http.StatusOK, a.do("", "GET", "/healthz", "").status)

			var betaThread, betaGraph, acmeThread registry.Record
			a.do(tk.ops, "POST", "/v1/threads", `{"directive": "g/topic", "inputs": {"topic": "x"}, "tenant": "beta", "notify": "http://127.0.0.1:9/beta"}`).json(t, 201, &betaThread)
			a.do(tk.beta, "POST", "/v1/graphs", `{"graph": "g/review", "inputs": {"topics": ["a"]}}`).json(t, 201, &betaGraph)
			a.do(tk.acme, "POST", "/v1/threads", `{"directive": "g/topic", "inputs": {"topic": "y"}, "notify": "http://127.0.0.1:9/acme"}`).json(t, 201, &acmeThread)
			require.Equal(t, "beta", betaThread.Tenant)
			require.Equal(t, "beta", betaGraph.Tenant, "a bound token's start is its tenant's")
			require.Equal(t, "acme", acmeThread.Tenant)
			before := map[string]string{betaThread.ThreadID: a.do(tk.ops, "GET", "/v1/threads/"+url.PathEscape(betaThread.ThreadID), "").body,
				betaGraph.ThreadID: a.do(tk.ops, "GET", "/v1/threads/"+url.PathEscape(betaGraph.ThreadID), "").body}

			checked := map[string]bool{}
			for _, route := range api.Routes() {
				method, path, _ := strings.Cut(route, " ")
				switch {
				case path == "/healthz" || path == "/v1/openapi.json" || path == "/v1/approvals/decide":
					// No credential: liveness, the document, and an approval
					// link whose signed token is its credential.
				case path == "/v1/bulk/{id}":
					checkTenantBulkShow(t, a, tk)
				case strings.HasPrefix(path, "/v1/webhooks/deliveries"):
					checkTenantDeliveries(t, e, a, tk, method, betaThread.ThreadID, acmeThread.ThreadID)
				case method == "POST" && path == "/v1/bulk":
					checkTenantBulkStart(t, a, tk)
				case strings.Contains(path, "{id}"):
					foreign := betaThread.ThreadID
					if strings.HasPrefix(path, "/v1/graphs/") {
						foreign = betaGraph.ThreadID
					}
					body := idRouteBodies[path[strings.LastIndex(path, "/")+1:]]
					switch path {
					case "/v1/graphs/{id}/fork":
						body = `{"at_step": 1}`
					case "/v1/graphs/{id}/resume":
						body = `{}`
					}
					got := a.do(tk.acme, method, strings.Replace(path, "{id}", url.PathEscape(foreign), 1), body)
					want := a.do(tk.acme, method, strings.Replace(path, "{id}", url.PathEscape(missingID(foreign)), 1), body)
					require.Equal(t, http.StatusNotFound, want.status, "%s of an unknown id: %s", route, want.body)
					got.sameAs(t, want, foreign, missingID(foreign), route)
				case method == "GET" && (path == "/v1/threads" || path == "/v1/graphs" || path == "/v1/approvals"):
					checkTenantList(t, a, tk, path)
				case method == "GET" && path == "/v1/cost":
					checkTenantCost(t, a, tk)
				case method == "POST" && (path == "/v1/threads" || path == "/v1/graphs"):
					checkTenantStart(t, e, a, tk, path, betaThread.ThreadID)
				case strings.HasPrefix(path, "/v1/tenants") || path == "/v1/admission":
					checkTenantAdmin(t, a, tk, method, path)
				default:
					t.Fatalf("route %s: no tenant check in this test; every route must have one", route)
				}
				checked[route] = true
			}
			require.Len(t, checked, len(api.Routes()))

			// Nothing of beta's changed, and no run was made for it.
			for id, rec := range before {
				require.Equal(t, rec, a.do(tk.ops, "GET", "/v1/threads/"+url.PathEscape(id), "").body, "%s unchanged", id)
			}
			var betas []registry.Record
			a.do(tk.ops, "GET", "/v1/threads?tenant=beta", "").json(t, 200, &betas)
			require.Len(t, betas, 2, "beta's two runs, no fork, resume or child of them")

			// An unbound token sees every tenant.
			require.Equal(t, http.StatusOK, a.do(tk.ops, "GET", "/v1/threads/"+url.PathEscape(betaThread.ThreadID), "").status)
			require.Equal(t, http.StatusOK, a.do(tk.beta, "GET", "/v1/graphs/"+url.PathEscape(betaGraph.ThreadID), "").status)
		})
	}
}

// checkTenantList: a list holds acme's runs only; a tenant parameter
// naming beta answers as a tenant that does not exist.
func checkTenantList(t *testing.T, a tenantAPI, tk tenantTokens, path string) {
	t.Helper()
	var recs []map[string]any
	a.do(tk.acme, "GET", path, "").json(t, 200, &recs)
	for _, r := range recs {
		if tenant, ok := r["tenant"]; ok {
			require.Equal(t, "acme", tenant, "%s: %v", path, r)
		}
		require.NotContains(t, fmt.Sprint(r), "beta")
	}
	if path == "/v1/threads" {
		require.NotEmpty(t, recs, "acme's own run is listed")
	}
	got := a.do(tk.acme, "GET", path+"?tenant=beta", "")
	want := a.do(tk.acme, "GET", path+"?tenant=zeta", "")
	require.Equal(t, http.StatusNotFound, want.status, want.body)
	require.Contains(t, want.body, `"tenant_not_found"`)
	got.sameAs(t, want, "beta", "zeta", path+"?tenant=")
	a.do(tk.acme, "GET", path+"?tenant=acme", "").json(t, 200, &recs)
}

// checkTenantCost: a bound token's cost report holds its tenant's runs
// only, and one that names another tenant answers as an unknown tenant.
func checkTenantCost(t *testing.T, a tenantAPI, tk tenantTokens) {
	t.Helper()
	var rep, all spooltype.CostReport
	a.do(tk.acme, "GET", "/v1/cost?by=tenant", "").json(t, 200, &rep)
	require.NotEmpty(t, rep.Rows)
	for _, row := range rep.Rows {
		require.Equal(t, "acme", row.Key, "acme's runs only")
	}
	a.do(tk.ops, "GET", "/v1/cost?by=tenant", "").json(t, 200, &all)
	require.Greater(t, all.Total.Runs, rep.Total.Runs, "an unbound token sees every tenant's")
	got := a.do(tk.acme, "GET", "/v1/cost?tenant=beta", "")
	want := a.do(tk.acme, "GET", "/v1/cost?tenant=zeta", "")
	require.Equal(t, http.StatusNotFound, want.status, want.body)
	got.sameAs(t, want, "beta", "zeta", "/v1/cost?tenant=")
}

// checkTenantBulkShow: another tenant's bulk operation answers a bound
// token byte for byte as an operation that does not exist.
func checkTenantBulkShow(t *testing.T, a tenantAPI, tk tenantTokens) {
	t.Helper()
	var op struct {
		Operation string `json:"operation"`
	}
	a.do(tk.beta, "POST", "/v1/bulk", `{"action": "approve", "tags": {"nothing": "here"}}`).json(t, 202, &op)
	require.NotEmpty(t, op.Operation)
	missing := op.Operation[:len(op.Operation)-8] + "00000000"
	got := a.do(tk.acme, "GET", "/v1/bulk/"+op.Operation, "")
	want := a.do(tk.acme, "GET", "/v1/bulk/"+missing, "")
	require.Equal(t, http.StatusNotFound, want.status, want.body)
	got.sameAs(t, want, op.Operation, missing, "GET /v1/bulk/{id}")
	require.Equal(t, http.StatusOK, a.do(tk.beta, "GET", "/v1/bulk/"+op.Operation, "").status, "its own tenant's")
	require.Equal(t, http.StatusOK, a.do(tk.ops, "GET", "/v1/bulk/"+op.Operation, "").status, "an unbound token's")
}

// checkTenantDeliveries: a bound token lists its tenant's webhook
// deliveries only, and another tenant's delivery answers its redeliver
// byte for byte as one that does not exist. The deliveries are made by
// relaying events put in the runs' outboxes (no worker runs here).
func checkTenantDeliveries(t *testing.T, e *spooltest.Env, a tenantAPI, tk tenantTokens, method, beta, acme string) {
	t.Helper()
	ctx := t.Context()
	rt := e.Orch.Runtime()
	for _, id := range []string{beta, acme} {
		require.NoError(t, rt.Services().Redis.XAdd(ctx, &redis.XAddArgs{Stream: rt.Services().Keys.Outbox(id),
			Values: []any{"thread", id, "type", "run.waiting_approval", "at", time.Now().UTC().Format(time.RFC3339Nano), "key", "tenant-test"}}).Err())
	}
	_, err := rt.RelayWebhooks(ctx, 100)
	require.NoError(t, err)
	var mine, all struct {
		Deliveries []orchestrator.WebhookDelivery `json:"deliveries"`
	}
	a.do(tk.acme, "GET", "/v1/webhooks/deliveries", "").json(t, 200, &mine)
	a.do(tk.ops, "GET", "/v1/webhooks/deliveries", "").json(t, 200, &all)
	require.NotEmpty(t, mine.Deliveries)
	var betaDelivery string
	for _, d := range mine.Deliveries {
		require.Equal(t, "acme", d.Tenant, "acme's only")
	}
	for _, d := range all.Deliveries {
		if d.Tenant == "beta" {
			betaDelivery = d.ID
		}
	}
	require.NotEmpty(t, betaDelivery, "an unbound token sees every tenant's")
	if method == "POST" {
		missing := "dlv_000000000000000000000000"
		got := a.do(tk.acme, "POST", "/v1/webhooks/deliveries/"+betaDelivery+"/redeliver", "")
		want := a.do(tk.acme, "POST", "/v1/webhooks/deliveries/"+missing+"/redeliver", "")
		require.Equal(t, http.StatusNotFound, want.status, want.body)
		got.sameAs(t, want, betaDelivery, missing, "POST /v1/webhooks/deliveries/{id}/redeliver")
		require.Equal(t, http.StatusOK, a.do(tk.beta, "POST", "/v1/webhooks/deliveries/"+betaDelivery+"/redeliver", "").status, "its own tenant's")
	}
}

// checkTenantBulkStart: a bound token's bulk operation counts its
// tenant's runs only, and a body naming another tenant is an unknown
// tenant.
func checkTenantBulkStart(t *testing.T, a tenantAPI, tk tenantTokens) {
	t.Helper()
	var mine, acme, all struct {
		Matched int `json:"matched"`
	}
	a.do(tk.acme, "POST", "/v1/bulk", `{"action": "cancel", "dry_run": true}`).json(t, 200, &mine)
	a.do(tk.ops, "POST", "/v1/bulk", `{"action": "cancel", "dry_run": true, "tenant": "acme"}`).json(t, 200, &acme)
	a.do(tk.ops, "POST", "/v1/bulk", `{"action": "cancel", "dry_run": true}`).json(t, 200, &all)
	require.Equal(t, acme.Matched, mine.Matched, "acme's runs only")
	require.Greater(t, all.Matched, mine.Matched, "an unbound token counts every tenant's")
	got := a.do(tk.acme, "POST", "/v1/bulk", `{"action": "cancel", "dry_run": true, "tenant": "beta"}`)
	want := a.do(tk.acme, "POST", "/v1/bulk", `{"action": "cancel", "dry_run": true, "tenant": "zeta"}`)
	require.Equal(t, http.StatusNotFound, want.status, want.body)
	got.sameAs(t, want, "beta", "zeta", "POST /v1/bulk tenant")
}

// checkTenantStart: a bound token's start is its tenant's; a body
// naming another tenant is 403; another tenant's parent answers as a
// parent that does not exist, and registers nothing.
func checkTenantStart(t *testing.T, e *spooltest.Env, a tenantAPI, tk tenantTokens, path, betaParent string) {
	t.Helper()
	body := `{"directive": "g/topic", "inputs": {"topic": "z"}%s}`
	if path == "/v1/graphs" {
		body = `{"graph": "g/review", "inputs": {"topics": ["z"]}%s}`
	}
	var rec registry.Record
	a.do(tk.acme, "POST", path, fmt.Sprintf(body, ``)).json(t, 201, &rec)
	require.Equal(t, "acme", rec.Tenant)
	a.do(tk.acme, "POST", path, fmt.Sprintf(body, `, "tenant": "acme"`)).json(t, 201, &rec)
	forbidden := a.do(tk.acme, "POST", path, fmt.Sprintf(body, `, "tenant": "beta"`))
	require.Equal(t, http.StatusForbidden, forbidden.status)
	require.Contains(t, forbidden.body, `"tenant_forbidden"`)
	require.NotContains(t, forbidden.body, "beta")

	runs := func() int {
		n, err := e.Orch.Threads(t.Context(), registry.Filter{})
		require.NoError(t, err)
		return len(n)
	}
	n := runs()
	got := a.do(tk.acme, "POST", path, fmt.Sprintf(body, `, "parent": "`+betaParent+`"`))
	want := a.do(tk.acme, "POST", path, fmt.Sprintf(body, `, "parent": "`+missingID(betaParent)+`"`))
	require.Equal(t, http.StatusUnprocessableEntity, want.status, want.body)
	require.Contains(t, want.body, `"parent_not_found"`)
	got.sameAs(t, want, betaParent, missingID(betaParent), path+" with beta's parent")
	require.Equal(t, n, runs(), "nothing registered")
}

// checkTenantAdmin: acme reads its own tenant only (another is an
// unknown tenant) and administers none; its admission view names no
// other tenant.
func checkTenantAdmin(t *testing.T, a tenantAPI, tk tenantTokens, method, path string) {
	t.Helper()
	switch {
	case path == "/v1/tenants":
		var ts []map[string]any
		a.do(tk.acme, "GET", path, "").json(t, 200, &ts)
		require.Len(t, ts, 1)
		require.Equal(t, "acme", ts[0]["tenant"])
		a.do(tk.ops, "GET", path, "").json(t, 200, &ts)
		names := []string{}
		for _, x := range ts {
			names = append(names, fmt.Sprint(x["tenant"]))
		}
		sort.Strings(names)
		require.Subset(t, names, []string{"acme", "beta"}, "an unbound token sees every tenant")
	case method == "GET" && path == "/v1/tenants/{tenant}":
		got := a.do(tk.acme, "GET", "/v1/tenants/beta", "")
		want := a.do(tk.acme, "GET", "/v1/tenants/zeta", "")
		require.Equal(t, http.StatusNotFound, want.status, want.body)
		got.sameAs(t, want, "beta", "zeta", "GET /v1/tenants/beta")
		var own map[string]any
		a.do(tk.acme, "GET", "/v1/tenants/acme", "").json(t, 200, &own)
		require.Equal(t, "acme", own["tenant"])
		a.do(tk.ops, "GET", "/v1/tenants/beta", "").json(t, 200, &own)
		require.Equal(t, "beta", own["tenant"])
	case method == "PATCH":
		for _, name := range []string{"acme", "beta"} {
			x := a.do(tk.acme, "PATCH", "/v1/tenants/"+name, `{"weight": 100}`)
			require.Equal(t, http.StatusForbidden, x.status, x.body)
			require.Contains(t, x.body, `"tenant_forbidden"`)
		}
	case path == "/v1/admission":
		x := a.do(tk.acme, "GET", path, "")
		require.Equal(t, http.StatusOK, x.status, x.body)
		require.NotContains(t, x.body, "beta")
	default:
		t.Fatalf("%s %s: no tenant check", method, path)
	}
}

// TestTenantBoundMCP: `spool mcp --tenant acme` is bound as an acme token
// is: a table over the tools it lists, so a new tool cannot skip it. Each
// tool naming a run answers beta's run as an id that does not exist;
// run_thread and run_graph start in acme and refuse to name beta;
// show_tenant shows acme only.
func TestTenantBoundMCP(t *testing.T) {
	t.Parallel()
	e := spooltest.New(t, spooltest.Options{Files: graphProject()})
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	beta := startRun(t, e, "thread", "run", "g/topic", "--input", "topic=x", "--tenant", "beta")
	betaGraph := startRun(t, e, "graph", "run", "g/review", "--inputs-json", `{"topics": ["a"]}`, "--tenant", "beta")

	sess, stderr := connectSpoolMCP(ctx, t, e, "mcp", "--tenant", "acme")
	defer func() {
		require.NoError(t, sess.Close())
		if t.Failed() {
			t.Logf("spool mcp stderr:\n%s", stderr.String())
		}
	}()
	call := func(name string, args map[string]any) *mcp.CallToolResult {
		t.Helper()
		res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		require.NoError(t, err)
		return res
	}
	tools, err := sess.ListTools(ctx, nil)
	require.NoError(t, err)
	for _, tool := range tools.Tools {
		switch tool.Name {
		case "run_thread", "run_graph":
			args := map[string]any{"directive": "g/topic", "inputs": map[string]any{"topic": "q"}}
			if tool.Name == "run_graph" {
				args = map[string]any{"graph": "g/review", "inputs": map[string]any{"topics": []string{"q"}}}
			}
			var rec registry.Record
			decodeResult(t, call(tool.Name, args), &rec)
			require.Equal(t, "acme", rec.Tenant)
			args["tenant"] = "beta"
			res := call(tool.Name, args)
			require.True(t, res.IsError)
			require.Contains(t, resultText(res), "tenant_forbidden")
		case "list_threads":
			var page struct {
				Threads []registry.Record `json:"threads"`
			}
			var own registry.Record
			decodeResult(t, call("run_thread", map[string]any{"directive": "g/topic", "inputs": map[string]any{"topic": "listed"}}), &own)
			decodeResult(t, call(tool.Name, map[string]any{"limit": 1000}), &page)
			require.NotEmpty(t, page.Threads, "acme's own runs")
			for _, r := range page.Threads {
				require.Equal(t, "acme", r.Tenant, "only the bound tenant's runs")
			}
			got, want := call(tool.Name, map[string]any{"tenant": "beta"}), call(tool.Name, map[string]any{"tenant": "zeta"})
			require.True(t, got.IsError)
			require.Equal(t, strings.ReplaceAll(resultText(want), "zeta", "beta"), resultText(got))
		case "show_tenant":
			got, want := call(tool.Name, map[string]any{"tenant": "beta"}), call(tool.Name, map[string]any{"tenant": "zeta"})
			require.True(t, want.IsError)
			require.Equal(t, strings.ReplaceAll(resultText(want), "zeta", "beta"), resultText(got))
			var own map[string]any
			decodeResult(t, call(tool.Name, map[string]any{}), &own)
			require.Equal(t, "acme", own["tenant"])
		case "bulk_action":
			// It counts (and would act on) acme's runs only.
			var dry struct {
				Matched int64 `json:"matched"`
			}
			decodeResult(t, call(tool.Name, map[string]any{"action": "cancel", "dry_run": true}), &dry)
			acme, err := e.Orch.StartBulk(ctx, orchestrator.BulkRequest{Action: "cancel", DryRun: true, Filter: orchestrator.BulkFilter{Tenant: "acme"}})
			require.NoError(t, err)
			all, err := e.Orch.StartBulk(ctx, orchestrator.BulkRequest{Action: "cancel", DryRun: true})
			require.NoError(t, err)
			require.Equal(t, acme.Matched, dry.Matched, "acme's runs only")
			require.Greater(t, all.Matched, dry.Matched, "beta's are not counted")
			got := call(tool.Name, map[string]any{"action": "cancel", "dry_run": true, "tenant": "beta"})
			want := call(tool.Name, map[string]any{"action": "cancel", "dry_run": true, "tenant": "zeta"})
			require.True(t, got.IsError)
			require.Equal(t, strings.ReplaceAll(resultText(want), "zeta", "beta"), resultText(got))
		case "show_bulk":
			op, err := e.Orch.StartBulk(ctx, orchestrator.BulkRequest{Action: "approve", By: "test",
				Filter: orchestrator.BulkFilter{Tenant: "beta", Tags: map[string]string{"nothing": "here"}}})
			require.NoError(t, err)
			missing := op.Operation[:len(op.Operation)-8] + "00000000"
			got := call(tool.Name, map[string]any{"operation": op.Operation})
			want := call(tool.Name, map[string]any{"operation": missing})
			require.True(t, want.IsError)
			require.True(t, got.IsError, "beta's operation")
			require.Equal(t, strings.ReplaceAll(resultText(want), missing, op.Operation), resultText(got))
		default:
			foreign := beta
			if strings.Contains(tool.Name, "graph") {
				foreign = betaGraph
			}
			args := map[string]any{"thread_id": foreign}
			props := schemaProperties(t, tool)
			require.Contains(t, props, "thread_id", "tool %s: no tenant check in this test; every tool must have one", tool.Name)
			// What each tool requires besides the id, so that the answer
			// is its tenant check's, not a missing argument's (and tree:
			// a pause or unpause of beta's whole tree is refused too).
			for k, v := range map[string]any{"reason": "no", "timeout": 1, "name": "go", "data": map[string]any{}, "tree": true} {
				if props[k] {
					args[k] = v
				}
			}
			got := call(tool.Name, args)
			args["thread_id"] = missingID(foreign)
			want := call(tool.Name, args)
			require.True(t, want.IsError, "%s of an unknown id", tool.Name)
			require.True(t, got.IsError, "%s of beta's run", tool.Name)
			require.Equal(t, strings.ReplaceAll(resultText(want), missingID(foreign), foreign), resultText(got), tool.Name)
			require.Contains(t, resultText(got), foreign, "%s: the answer is the unknown id's, not a missing argument's", tool.Name)
		}
	}
	for _, id := range []string{beta, betaGraph} {
		rec, err := e.Orch.Record(ctx, id)
		require.NoError(t, err)
		require.Equal(t, int64(1), rec.Version, "%s unchanged", id)
		require.False(t, rec.CancelRequested)
		require.False(t, rec.PauseRequested)
	}
}

// startRun runs a `spool ... run` that prints the run's id, and returns it.
func startRun(t *testing.T, e *spooltest.Env, args ...string) string {
	t.Helper()
	r := e.Spool(args...)
	require.Equal(t, 0, r.Code, r.Stderr)
	return strings.TrimSpace(r.Stdout)
}

// decodeResult decodes a tool result's structured content into v.
func decodeResult(t *testing.T, res *mcp.CallToolResult, v any) {
	t.Helper()
	require.False(t, res.IsError, "%s", resultText(res))
	b, err := json.Marshal(res.StructuredContent)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, v))
}

// schemaProperties are the properties of tool's input schema.
func schemaProperties(t *testing.T, tool *mcp.Tool) map[string]bool {
	t.Helper()
	b, err := json.Marshal(tool.InputSchema)
	require.NoError(t, err)
	var sch struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	require.NoError(t, json.Unmarshal(b, &sch))
	out := map[string]bool{}
	for k := range sch.Properties {
		out[k] = true
	}
	return out
}

// connectSpoolMCP runs `spool ARGS...` (an MCP server on stdio) in e's
// project and connects a client to it; its stderr is the buffer, to read
// once the session is closed.
func connectSpoolMCP(ctx context.Context, t *testing.T, e *spooltest.Env, args ...string) (*mcp.ClientSession, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(e.Bin, args...)
	cmd.Env = append(append(os.Environ(), e.Vars...), "GORACE=atexit_sleep_ms=0")
	cmd.Dir = e.Project
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	sess, err := mcp.NewClient(&mcp.Implementation{Name: "e2e-tenant", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	require.NoError(t, err)
	return sess, &stderr
}
