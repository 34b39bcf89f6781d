package admission

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTenantScrape: a tenant's state hash read as metrics: per-queue
// counts (a tenant at max_running has its ready ones blocked on
// tenant_concurrency, its granted ones still ready), a negative count
// as none, reaps and refusals by kind, and each reason's
// wait histogram, cumulative, its last bucket past every bound counted in
// Count only, a bucket out of range skipped.
func TestTenantScrape(t *testing.T) {
	t.Parallel()
	state := map[string]string{
		"admitted": "2", "grants": "7", "unreplicated": "1", "fenced": "3",
		"n:ready:q1": "3", "n:granted:q1": "1", "n:running:q2": "2", "n:blocked:key_concurrency:q1": "4", "n:nowhere": "9",
		"reaped:granted": "1", "refused:tenant_rate_exceeded": "2",
		"wh:tenant_concurrency:1": "2", "wh:tenant_concurrency:3": "1", "ws:tenant_concurrency": "1.5",
		"wh:key_concurrency:14": "5", "wh:key_concurrency:0": "9", "wh:key_concurrency:15": "9", "wh:key_concurrency:x": "9",
		"wh:key_concurrency:2": "-4",
	}
	cum := func(counts ...uint64) []uint64 {
		return append(counts, make([]uint64, len(WaitBuckets)-len(counts))...)
	}
	want := TenantScrape{Tenant: "t", Grants: 7, Unreplicated: 1, Fenced: 3,
		Ready: map[string]int{"q1": 1}, Running: map[string]int{"q2": 2},
		Blocked: map[QueueReason]int{{"q1", WaitTenantConcurrency}: 3, {"q1", "key_concurrency"}: 4},
		Reaped:  map[string]int{"granted": 1}, Refusals: map[string]int{"tenant_rate_exceeded": 2},
		Wait: map[string]Histogram{
			WaitTenantConcurrency: {Counts: cum(2, 2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3), Count: 3, Sum: 1.5},
			"key_concurrency":     {Counts: cum(), Count: 5},
		}}
	var a *Admitter // no policy: no share
	require.Equal(t, want, a.tenantScrape("t", state, 2))

	// Under max_running its ready ones are ready.
	got := a.tenantScrape("t", state, 3)
	require.Equal(t, map[string]int{"q1": 4}, got.Ready)
	require.Equal(t, map[QueueReason]int{{"q1", "key_concurrency"}: 4}, got.Blocked)
}
