package ratelimit

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/config"
)

// TestStatusCounters: the admission and settlement scripts count, per
// budget and across the fleet, the calls admitted and refused (by what
// refused them), the tokens reserved and then used (a settlement that
// corrects an over-estimate counts what was used), and Status reads them
// with the budget's state now.
func TestStatusCounters(t *testing.T) {
	t.Parallel()
	l, c, ctx := setup(t)
	rl, err := config.ParseRateLimits("r.yaml", []byte(`rate_limits:
  - {match: 'claude-*', requests_per_minute: 60, burst: 1, input_tokens_per_minute: 1000, output_tokens_per_minute: 1000, concurrent: 2}
  - {match: 'gpt-*', requests_per_minute: 10}
`))
	require.NoError(t, err)
	rs := rl.Match([]string{"claude-x"}, "anthropic", "")
	require.Len(t, rs, 1)

	a, err := l.Admit(ctx, rs, Call{Holder: "a", InputTokens: 600, OutputTokens: 900, LeaseTTL: time.Minute})
	require.NoError(t, err)
	require.True(t, a.OK)
	for range 2 {
		b, err := l.Admit(ctx, rs, Call{Holder: "b", InputTokens: 10, OutputTokens: 10, LeaseTTL: time.Minute})
		require.NoError(t, err)
		require.False(t, b.OK)
		require.Equal(t, "req", b.Kind)
		require.Equal(t, rs[0].ID, b.Rule)
	}
	require.NoError(t, l.HandedBack(ctx, rs[0].ID))

	st, err := l.Status(ctx, rl)
	require.NoError(t, err)
	require.Len(t, st, 2)
	require.Equal(t, rs[0].ID, st[0].Rule.ID)
	require.Equal(t, "claude-*", st[0].Rule.Match)
	if d := cmp.Diff(Counters{Admitted: 1, Throttled: 2, ThrottledBy: map[string]int64{"req": 2}, Waiting: 1,
		InputReserved: 600, OutputReserved: 900}, st[0].Counters); d != "" {
		t.Fatalf("counters after admissions (-want +got):\n%s", d)
	}
	require.InDelta(t, 1, st[0].Requests, 0.01, "one request in the minute")
	require.InDelta(t, 600, st[0].InputTokens, 0.5, "the reservation holds the minute's input tokens")
	require.InDelta(t, 900, st[0].OutputTokens, 0.5)
	require.Equal(t, int64(1), st[0].InFlight)
	require.Equal(t, int64(1), st[0].Waiters, "b waits")
	require.Equal(t, rl.Rules[1].BudgetID(""), st[1].Rule.ID)
	require.Equal(t, Counters{}, st[1].Counters, "a rule no call used")

	// The call used 100 input tokens and 50 output: the settlement gives
	// back the rest and counts what was used beside what was reserved.
	require.NoError(t, l.Settle(ctx, a, "a", 100, 50))
	c.Add(time.Second)
	b, err := l.Admit(ctx, rs, Call{Holder: "b", InputTokens: 10, OutputTokens: 20, LeaseTTL: time.Minute})
	require.NoError(t, err)
	require.True(t, b.OK)
	st, err = l.Status(ctx, rl)
	require.NoError(t, err)
	if d := cmp.Diff(Counters{Admitted: 2, Settled: 1, Throttled: 2, ThrottledBy: map[string]int64{"req": 2}, Waiting: 1,
		InputReserved: 610, InputUsed: 100, OutputReserved: 920, OutputUsed: 50}, st[0].Counters); d != "" {
		t.Fatalf("counters after the settlement (-want +got):\n%s", d)
	}
	// 100 + 10 input tokens less a second's worth (1000/60) gone by.
	require.InDelta(t, 110-1000.0/60, st[0].InputTokens, 0.5, "the settlement corrected the minute's input tokens")
	require.InDelta(t, 70-1000.0/60, st[0].OutputTokens, 0.5)
	require.Equal(t, int64(1), st[0].InFlight, "a released its lease, b holds one")
	require.Equal(t, int64(0), st[0].Waiters, "b was admitted")

	// A provider's 429 blocks the budget: refusals counted as block.
	require.NoError(t, l.Block(ctx, rs, 5*time.Second))
	x, err := l.Admit(ctx, rs, Call{Holder: "x"})
	require.NoError(t, err)
	require.False(t, x.OK)
	st, err = l.Status(ctx, rl)
	require.NoError(t, err)
	require.Equal(t, c.Now().Add(5*time.Second).UTC(), st[0].BlockedUntil)
	require.Equal(t, map[string]int64{"req": 2, "block": 1}, st[0].Counters.ThrottledBy)
	require.Equal(t, int64(3), st[0].Counters.Throttled)
}

// TestStatusPerKey: a per_key rule has a budget per API key, and Status
// finds each one the fleet used.
func TestStatusPerKey(t *testing.T) {
	t.Parallel()
	l, _, ctx := setup(t)
	rl, err := config.ParseRateLimits("r.yaml", []byte("rate_limits: [{match: 'claude-*', per_key: true, concurrent: 5}]"))
	require.NoError(t, err)
	st, err := l.Status(ctx, rl)
	require.NoError(t, err)
	require.Len(t, st, 1)
	require.Empty(t, st[0].Rule.ID, "no budget yet")
	for _, key := range []string{"k1", "k2", "k2"} {
		a, err := l.Admit(ctx, rl.Match([]string{"claude-x"}, "anthropic", key), Call{Holder: "h", InputTokens: 7})
		require.NoError(t, err)
		require.True(t, a.OK)
	}
	st, err = l.Status(ctx, rl)
	require.NoError(t, err)
	require.Len(t, st, 2)
	got := map[string]int64{}
	for _, s := range st {
		require.Equal(t, s.Rule.BudgetID(s.Rule.KeyID), s.Rule.ID)
		got[s.Rule.KeyID] = s.Counters.InputReserved
	}
	require.Equal(t, map[string]int64{"k1": 7, "k2": 14}, got)
}
