package main

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/thread"
)

// TestTenantStatusCountsInOneOrMany: `tenant show` says "1 root chain in
// flight", not "1 root chains".
func TestTenantStatusCountsInOneOrMany(t *testing.T) {
	t.Parallel()
	for n, want := range map[int]string{0: "runs       3 · 0 root chains in flight\n", 1: "runs       3 · 1 root chain in flight\n",
		2: "runs       3 · 2 root chains in flight\n"} {
		var b bytes.Buffer
		printTenantStatus(&b, &spooltype.Tenant{Tenant: "a", Runs: 3, RunsInFlight: n, Sources: map[string]string{}})
		require.Contains(t, b.String(), want)
	}
}

// TestTenantStatusShowsOverrun: `tenant show` gives each spend window's
// overrun beside what was spent and held, in USD as they are, and its
// JSON names it overrun.
func TestTenantStatusShowsOverrun(t *testing.T) {
	t.Parallel()
	limit := 2.5
	ts := &spooltype.Tenant{Tenant: "acme", Sources: map[string]string{}, Spend: map[string]spooltype.TenantSpend{
		"day":   {Window: "2026-12-02", Spent: 2.5, Held: 0, Limit: &limit, Overrun: 0.5},
		"month": {Window: "2026-12", Spent: 3.5, Held: 0.25, Overrun: 0.75}}}
	var b bytes.Buffer
	printTenantStatus(&b, ts)
	require.Contains(t, b.String(), "spend      day   2026-12-02: $2.5000 spent · $0.0000 held · $0.5000 overrun · limit $2.50\n")
	require.Contains(t, b.String(), "spend      month 2026-12: $3.5000 spent · $0.2500 held · $0.7500 overrun · limit none\n")
	b.Reset()
	require.NoError(t, printJSON(&b, ts))
	var got struct {
		Spend map[string]map[string]any `json:"spend"`
	}
	require.NoError(t, json.Unmarshal(b.Bytes(), &got))
	require.Equal(t, map[string]any{"window": "2026-12-02", "spent": 2.5, "held": 0.0, "limit": 2.5, "overrun": 0.5}, got.Spend["day"])
}

// TestBudgetWaitNotice: a wait on a run held for its tenant's spend
// window names the window with the least room, how full it is (what
// other runs hold of it too), and the tenant set flag that raises it.
func TestBudgetWaitNotice(t *testing.T) {
	t.Parallel()
	one, ten := 1.0, 10.0
	rec := &spooltype.Record{ThreadID: "b/x-1-a", Status: thread.StatusWaiting, WaitingFor: "tenant_budget"}
	for _, c := range []struct {
		day, month spooltype.TenantSpend
		want       string
	}{
		{spooltype.TenantSpend{Spent: 1, Limit: &one}, spooltype.TenantSpend{Spent: 1, Limit: &ten},
			"waiting for tenant acme's spend window (day 1.00 of 1.00 USD spent); raise it with spool tenant set acme --spend-per-day USD"},
		{spooltype.TenantSpend{Spent: 0.2}, spooltype.TenantSpend{Spent: 0.6, Held: 0.4, Limit: &one},
			"waiting for tenant acme's spend window (month 0.60 spent + 0.40 held of 1.00 USD); raise it with spool tenant set acme --spend-per-month USD"},
		{spooltype.TenantSpend{Spent: 0.5, Limit: &one}, spooltype.TenantSpend{Spent: 10, Limit: &ten},
			"waiting for tenant acme's spend window (month 10.00 of 10.00 USD spent); raise it with spool tenant set acme --spend-per-month USD"},
	} {
		b := budgetWait{rec: rec, tenant: &spooltype.Tenant{Tenant: "acme", Spend: map[string]spooltype.TenantSpend{"day": c.day, "month": c.month}}}
		require.Equal(t, c.want, b.notice())
	}
}

// TestAdmissionWaitNotice: a wait on a run admission holds says where it
// stands and what would start it, for each wait but the spend window's.
func TestAdmissionWaitNotice(t *testing.T) {
	t.Parallel()
	for why, want := range map[string]string{
		"capacity":           "it starts when a slot of its tenant's share of the fleet frees (more workers add slots)",
		"concurrency":        "it starts when a run holding that key ends",
		"tenant_concurrency": "raise it with spool tenant set acme --max-running N",
		"tenant_rate":        "raise it with spool tenant set acme --starts-per-minute N",
		"tenant_runs":        "raise it with spool tenant set acme --runs-in-flight N",
	} {
		a := admissionWait{rec: &spooltype.Record{ThreadID: "b/x-1-a", Tenant: "acme", WaitingFor: why}, line: why + " (where it stands)"}
		require.Equal(t, "waiting for admission: "+why+" (where it stands); "+want, a.notice())
		require.Contains(t, admissionHeld, why)
	}
	require.NotContains(t, admissionHeld, "tenant_budget", "budgetWait says that one")
	require.Empty(t, whose([]string{"b/x-1-a"}, "b/x-1-a"), "a wait on one run needs no name")
	require.Equal(t, "b/x-1-b is ", whose([]string{"b/x-1-a", "b/x-1-b"}, "b/x-1-b"), "a wait on several names the one held")
}
