package worker

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/config"
	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/keyspace"
	"github.com/spool-run/spool/provider"
	"github.com/spool-run/spool/ratelimit"
)

// gateBundle is a rateGate of a thread of the fake model under the rate
// limits of a yaml, on real Redis and a clock the test moves.
type gateBundle struct {
	t       *testing.T
	ctx     context.Context
	clock   *testenv.Clock
	limiter *ratelimit.Limiter
	metrics *Metrics
	reg     *prometheus.Registry
}

func newGateBundle(t *testing.T) *gateBundle {
	t.Helper()
	r := testenv.NewRedis(t)
	clk := testenv.NewClock(time.Unix(1_800_000_000, 0))
	reg := prometheus.NewRegistry()
	return &gateBundle{t: t, ctx: context.Background(), clock: clk, reg: reg,
		limiter: ratelimit.New(r.Client, keyspace.New(r.Namespace), clk.Now), metrics: NewMetrics(reg)}
}

// counted is the worker's counter name for rule (its label "rule").
func (b *gateBundle) counted(name, rule string) float64 {
	b.t.Helper()
	mfs, err := b.reg.Gather()
	require.NoError(b.t, err)
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "rule" && l.GetValue() == rule {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	return total
}

// gate is the gate of activation holder under the limits of yaml.
func (b *gateBundle) gate(holder, yaml string) *rateGate {
	b.t.Helper()
	limits, err := config.ParseRateLimits("rate_limits.yaml", []byte(yaml))
	require.NoError(b.t, err)
	return &rateGate{limiter: b.limiter, metrics: b.metrics, log: slog.New(slog.DiscardHandler), holder: holder,
		leaseTTL: 2 * time.Second, handBackAfter: time.Second, model: fakeModel, providers: &provider.Config{}, limits: limits}
}

// TestRateGate: the gate finds the rules of its thread's model once,
// admits a call the rules allow, returns a refusal it should not wait
// out in the slot instead of waiting, and settles a call so that the
// concurrency slot it held frees.
func TestRateGate(t *testing.T) {
	t.Parallel()

	t.Run("rules", func(t *testing.T) {
		t.Parallel()
		b := newGateBundle(t)
		g := b.gate("t/x-1/a", "rate_limits: [{match: 'script:*', requests_per_minute: 60}, {match: 'claude-*', requests_per_minute: 1}]")
		rules := g.rules()
		require.Len(t, rules, 1, "the rule of the thread's model only")
		require.Equal(t, "script:*", rules[0].Match)
		require.NotEmpty(t, rules[0].ID, "the rule's budget")
		none := b.gate("t/x-1/a", "rate_limits: [{match: 'claude-*', requests_per_minute: 1}]")
		require.NotNil(t, none.rules(), "looked up: no rule is not nil")
		require.Empty(t, none.rules())
		adm, err := none.admit(b.ctx, 10, 10)
		require.NoError(t, err)
		require.True(t, adm.OK, "no rule admits every call")
	})

	t.Run("either spelling of the model", func(t *testing.T) {
		t.Parallel()
		b := newGateBundle(t)
		yaml := "rate_limits: [{match: 'claude-*', requests_per_minute: 1}, {match: 'anthropic/*', requests_per_minute: 2}, " +
			"{match: 'meta-llama/*', requests_per_minute: 3}, {match: 'openai/*', requests_per_minute: 4}, {match: 'gpt-*', requests_per_minute: 5}]"
		for model, want := range map[string][]int{
			"anthropic/claude-sonnet-4-5":  {1, 2}, // as the thread names it, and as it is sent
			"claude-sonnet-4-5":            {1},
			"openai/meta-llama/Llama-3-8B": {3, 4},
			"openai/gpt-4o":                {4, 5},
			"gpt-4o":                       {5},
		} {
			g := b.gate("t/x-1/a", yaml)
			g.model = model
			var got []int
			for _, r := range g.rules() {
				got = append(got, r.RequestsPerMinute)
			}
			require.Equal(t, want, got, model)
		}
	})

	t.Run("a long wait is the caller's", func(t *testing.T) {
		t.Parallel()
		b := newGateBundle(t)
		g := b.gate("t/x-1/a", "rate_limits: [{match: 'script:*', requests_per_minute: 1, burst: 1}]")
		adm, err := g.admit(b.ctx, 100, 10)
		require.NoError(t, err)
		require.True(t, adm.OK)
		require.Len(t, adm.Reserved, 1)
		start := time.Now()
		adm, err = g.admit(b.ctx, 100, 10)
		require.NoError(t, err)
		require.False(t, adm.OK, "refused")
		require.Equal(t, "req", adm.Kind)
		require.GreaterOrEqual(t, adm.Wait, g.handBackAfter, "too long to wait in the slot")
		require.Less(t, time.Since(start), g.handBackAfter, "returned, not waited")
		rule := g.rules()[0].ID
		require.InDelta(t, 1, b.counted("spool_ratelimit_admitted_total", rule), 0)
		require.InDelta(t, 1, b.counted("spool_ratelimit_throttled_total", rule), 0)
		g.handedBack(b.ctx, adm)
		require.InDelta(t, 1, b.counted("spool_ratelimit_waiting_total", rule), 0)
	})

	t.Run("settle frees the slot", func(t *testing.T) {
		t.Parallel()
		b := newGateBundle(t)
		const limits = "rate_limits: [{match: 'script:*', concurrent: 1}]"
		first, second := b.gate("t/x-1/a", limits), b.gate("t/x-2/b", limits)
		adm, err := first.admit(b.ctx, 100, 10)
		require.NoError(t, err)
		require.True(t, adm.OK)
		release := first.holdLease(adm)
		refused, err := second.admit(b.ctx, 100, 10)
		require.NoError(t, err)
		require.False(t, refused.OK, "the slot is held")
		require.Equal(t, "conc", refused.Kind, "a concurrency refusal is not waited in the slot")
		release()
		first.settle(b.ctx, adm, &provider.Response{Usage: provider.Usage{InputTokens: 80, OutputTokens: 5}}, nil)
		again, err := second.admit(b.ctx, 100, 10)
		require.NoError(t, err)
		require.True(t, again.OK, "settled: the slot is free")
		second.settle(b.ctx, again, nil, nil)
	})
}
