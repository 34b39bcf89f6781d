package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/config"
	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/keyspace"
)

func TestMain(m *testing.M) { testenv.MainLeakFree(m) }

func setup(t *testing.T) (*Limiter, *testenv.Clock, context.Context) {
	t.Helper()
	r := testenv.NewRedis(t)
	c := testenv.NewClock(time.Unix(1_800_000_000, 0))
	return New(r.Client, keyspace.New(r.Namespace), c.Now), c, context.Background()
}

func rules(t *testing.T, yaml string) []config.RateRule {
	t.Helper()
	rl, err := config.ParseRateLimits("r.yaml", []byte(yaml))
	require.NoError(t, err)
	return rl.Match([]string{"claude-x"}, "anthropic", "k1")
}

func TestRequestsPerMinute(t *testing.T) {
	t.Parallel()
	l, c, ctx := setup(t)
	rs := rules(t, "rate_limits: [{match: 'claude-*', requests_per_minute: 60, burst: 2}]")
	call := Call{Holder: "a"}
	for i := range 2 {
		adm, err := l.Admit(ctx, rs, call)
		require.NoError(t, err)
		require.True(t, adm.OK, "burst %d", i)
	}
	adm, err := l.Admit(ctx, rs, call)
	require.NoError(t, err)
	require.False(t, adm.OK)
	require.Equal(t, "req", adm.Kind)
	require.Equal(t, time.Second, adm.Wait, "one request a second")
	c.Add(time.Second)
	adm, err = l.Admit(ctx, rs, call)
	require.NoError(t, err)
	require.True(t, adm.OK)
	// Over a minute the rate holds: 60 more requests, one a second.
	admitted := 0
	for range 600 {
		c.Add(100 * time.Millisecond)
		if adm, _ := l.Admit(ctx, rs, call); adm.OK {
			admitted++
		}
	}
	require.InDelta(t, 60, admitted, 1)
}

// TestTokensSettle: tokens are reserved before the call and settled to
// what it used: an over-estimate gives back its excess.
func TestTokensSettle(t *testing.T) {
	t.Parallel()
	l, _, ctx := setup(t)
	rs := rules(t, "rate_limits: [{match: 'claude-*', input_tokens_per_minute: 1000, output_tokens_per_minute: 1000}]")
	a1, err := l.Admit(ctx, rs, Call{Holder: "a", InputTokens: 600, OutputTokens: 900})
	require.NoError(t, err)
	require.True(t, a1.OK)
	a2, err := l.Admit(ctx, rs, Call{Holder: "b", InputTokens: 600, OutputTokens: 10})
	require.NoError(t, err)
	require.False(t, a2.OK, "600 + 600 input tokens do not fit a minute of 1000")
	require.Equal(t, "in", a2.Kind)
	require.InDelta(t, 12*time.Second, a2.Wait, float64(50*time.Millisecond))
	// The first call used 100 input tokens, 50 output: the rest comes back.
	require.NoError(t, l.Settle(ctx, a1, "a", 100, 50))
	a2, err = l.Admit(ctx, rs, Call{Holder: "b", InputTokens: 600, OutputTokens: 10})
	require.NoError(t, err)
	require.True(t, a2.OK, "the settlement corrected the over-estimate")
	// An under-estimate is a debt the next calls wait for.
	require.NoError(t, l.Settle(ctx, a2, "b", 600, 1000))
	a3, err := l.Admit(ctx, rs, Call{Holder: "c", InputTokens: 10, OutputTokens: 100})
	require.NoError(t, err)
	require.False(t, a3.OK)
	require.Equal(t, "out", a3.Kind)
}

// TestConcurrentLeases: a concurrency slot is held from admission to
// settlement, and a holder that dies frees it when its lease lapses.
func TestConcurrentLeases(t *testing.T) {
	t.Parallel()
	l, c, ctx := setup(t)
	rs := rules(t, "rate_limits: [{match: 'claude-*', concurrent: 1}]")
	a, err := l.Admit(ctx, rs, Call{Holder: "a", LeaseTTL: 2 * time.Second})
	require.NoError(t, err)
	require.True(t, a.OK)
	b, err := l.Admit(ctx, rs, Call{Holder: "b", LeaseTTL: 2 * time.Second})
	require.NoError(t, err)
	require.False(t, b.OK)
	require.Equal(t, "conc", b.Kind)
	require.NoError(t, l.Settle(ctx, a, "a", 0, 0))
	b, err = l.Admit(ctx, rs, Call{Holder: "b", LeaseTTL: 2 * time.Second})
	require.NoError(t, err)
	require.True(t, b.OK, "released by the settlement")
	// b's worker dies: its lease lapses after its TTL unless renewed.
	c.Add(time.Second)
	require.NoError(t, l.Renew(ctx, b, "b", 2*time.Second))
	c.Add(1500 * time.Millisecond)
	x, err := l.Admit(ctx, rs, Call{Holder: "x", LeaseTTL: 2 * time.Second})
	require.NoError(t, err)
	require.False(t, x.OK, "renewed: still held")
	c.Add(time.Second)
	x, err = l.Admit(ctx, rs, Call{Holder: "x", LeaseTTL: 2 * time.Second})
	require.NoError(t, err)
	require.True(t, x.OK, "the dead holder's lease lapsed")
}

// TestAllOrNothing: a call that one rule refuses is charged to none.
func TestAllOrNothing(t *testing.T) {
	t.Parallel()
	l, _, ctx := setup(t)
	rs := rules(t, `rate_limits:
  - {match: 'claude-*', requests_per_minute: 600, burst: 10}
  - {match: '*', concurrent: 1}
`)
	require.Len(t, rs, 2)
	a, err := l.Admit(ctx, rs, Call{Holder: "a"})
	require.NoError(t, err)
	require.True(t, a.OK)
	for range 20 {
		b, err := l.Admit(ctx, rs, Call{Holder: "b"})
		require.NoError(t, err)
		require.False(t, b.OK)
		require.Equal(t, "conc", b.Kind)
	}
	require.NoError(t, l.Settle(ctx, a, "a", 0, 0))
	for i := range 9 {
		b, err := l.Admit(ctx, rs, Call{Holder: "b"})
		require.NoError(t, err)
		require.True(t, b.OK, "the refused calls took no request from the first rule (%d)", i)
		require.NoError(t, l.Settle(ctx, b, "b", 0, 0))
	}
}

// TestBlockAfter429: a provider's 429 blocks every caller of the rule.
func TestBlockAfter429(t *testing.T) {
	t.Parallel()
	l, c, ctx := setup(t)
	rs := rules(t, "rate_limits: [{match: 'claude-*', requests_per_minute: 1000}]")
	require.NoError(t, l.Block(ctx, rs, 5*time.Second))
	a, err := l.Admit(ctx, rs, Call{Holder: "other thread"})
	require.NoError(t, err)
	require.False(t, a.OK)
	require.Equal(t, "block", a.Kind)
	require.Equal(t, 5*time.Second, a.Wait)
	c.Add(5 * time.Second)
	a, err = l.Admit(ctx, rs, Call{Holder: "other thread"})
	require.NoError(t, err)
	require.True(t, a.OK)
}

// TestPriority: while a caller of a higher priority waits on a rule, a
// lower one is not admitted before it.
func TestPriority(t *testing.T) {
	t.Parallel()
	l, _, ctx := setup(t)
	rs := rules(t, "rate_limits: [{match: 'claude-*', concurrent: 1}]")
	a, err := l.Admit(ctx, rs, Call{Holder: "a", Priority: 1})
	require.NoError(t, err)
	require.True(t, a.OK)
	hi, err := l.Admit(ctx, rs, Call{Holder: "hi", Priority: 6})
	require.NoError(t, err)
	require.False(t, hi.OK)
	require.NoError(t, l.Settle(ctx, a, "a", 0, 0))
	lo, err := l.Admit(ctx, rs, Call{Holder: "lo", Priority: 1})
	require.NoError(t, err)
	require.False(t, lo.OK, "a critical thread waits: it goes first")
	require.Equal(t, "priority", lo.Kind)
	hi, err = l.Admit(ctx, rs, Call{Holder: "hi", Priority: 6})
	require.NoError(t, err)
	require.True(t, hi.OK)
}

// TestWaiterThatStopsAsking: a waiter that stops asking (its worker died)
// is dropped after waiterTTL, so a waiter of a higher priority does not
// hold lower ones back for good; one that keeps asking stays registered
// however long it waits.
func TestWaiterThatStopsAsking(t *testing.T) {
	t.Parallel()
	l, c, ctx := setup(t)
	rs := rules(t, "rate_limits: [{match: 'claude-*', concurrent: 1}]")
	admit := func(holder string, priority int) Admission {
		t.Helper()
		adm, err := l.Admit(ctx, rs, Call{Holder: holder, Priority: priority})
		require.NoError(t, err)
		return adm
	}
	a := admit("a", 1)
	require.True(t, a.OK)
	require.False(t, admit("gone", 6).OK, "a critical caller waits, then its worker dies")
	require.False(t, admit("keeps", 5).OK)
	require.NoError(t, l.Settle(ctx, a, "a", 0, 0))
	// "keeps" asks every 30 s: behind the dead caller until waiterTTL,
	// then first, before "lo" who asks as often.
	admitted := false
	for range 6 {
		c.Add(30 * time.Second)
		lo := admit("lo", 1)
		require.False(t, lo.OK)
		require.Equal(t, "priority", lo.Kind)
		k := admit("keeps", 5)
		if k.OK {
			require.NoError(t, l.Settle(ctx, k, "keeps", 0, 0))
			admitted = true
			break
		}
		require.Equal(t, "priority", k.Kind, "behind the dead caller until waiterTTL")
	}
	require.True(t, admitted, "the dead caller was dropped after waiterTTL")
	st, err := l.Status(ctx, &config.RateLimits{Rules: rs})
	require.NoError(t, err)
	require.Equal(t, int64(1), st[0].Waiters, "lo waits; the dead caller is not counted")
	lo := admit("lo", 1)
	require.True(t, lo.OK, "the dead caller holds no one back after waiterTTL: %+v", lo)
}
