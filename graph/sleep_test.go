package graph

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseSleepFor(t *testing.T) {
	t.Parallel()
	good := map[string]time.Duration{
		"0": 0, "0s": 0, "30": 30 * time.Second, "1.5": 1500 * time.Millisecond, "15m": 15 * time.Minute,
		"1h30m": 90 * time.Minute, "2d": 48 * time.Hour, "1d12h": 36 * time.Hour, "0.5d": 12 * time.Hour, "250ms": 250 * time.Millisecond,
	}
	for in, want := range good {
		d, err := ParseSleepFor(in)
		require.NoError(t, err, in)
		require.Equal(t, want, d, in)
	}
	for _, in := range []string{"", "soon", "-1s", "-5", "d", "1d-2h", "+1d", "1w", "3dd", "1e300"} {
		_, err := ParseSleepFor(in)
		require.Error(t, err, in)
	}
}

func TestParseSleepUntil(t *testing.T) {
	t.Parallel()
	want := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	for _, in := range []string{"2026-03-01T09:00:00Z", "2026-03-01T11:00:00+02:00", "2026-03-01T09:00:00", "2026-03-01 09:00:00", "2026-03-01T09:00"} {
		got, err := ParseSleepUntil(in)
		require.NoError(t, err, in)
		require.True(t, want.Equal(got), "%s: %s", in, got)
		require.Equal(t, time.UTC, got.Location(), in)
	}
	day, err := ParseSleepUntil("2026-03-01")
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), day)
	for _, in := range []string{"", "tomorrow", "15m", "2026-13-01T00:00:00Z", "1767225600"} {
		_, err := ParseSleepUntil(in)
		require.Error(t, err, in)
	}
}

func TestSleepNodeParses(t *testing.T) {
	t.Parallel()
	g := mustParse(t, withNodes("a: {type: sleep, for: 15m, next: b}\nb: {type: sleep, until: '${inputs.at}', next: c}\nc: {type: sleep, until: 2026-03-01T09:00:00Z, next: done}\ndone: {type: return}"))
	require.Equal(t, KindSleep, g.Nodes["a"].Kind)
	require.Equal(t, "15m", g.Nodes["a"].For)
	require.Equal(t, "${inputs.at}", g.Nodes["b"].Until)
	require.Equal(t, "2026-03-01T09:00:00Z", g.Nodes["c"].Until, "an unquoted YAML timestamp is read as written")
	// The canonical form keeps the sleep: it reads back the same, and a
	// different sleep is a different graph.
	b, err := g.Canonical()
	require.NoError(t, err)
	again := mustParse(t, string(b))
	require.Equal(t, g.Digest(), again.Digest())
	other := mustParse(t, withNodes("a: {type: sleep, for: 16m, next: b}\nb: {type: sleep, until: '${inputs.at}', next: c}\nc: {type: sleep, until: 2026-03-01T09:00:00Z, next: done}\ndone: {type: return}"))
	require.NotEqual(t, g.Digest(), other.Digest())
}

func TestSleepNodeErrors(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, node, key, msg string }{
		{"a: {type: sleep, next: done}", "a", "for", "missing: a sleep node needs for"},
		{"a: {type: sleep, for: 1m, until: '2026-03-01T09:00:00Z', next: done}", "a", "until", "not both"},
		{"a: {type: sleep, for: soon, next: done}", "a", "for", `"soon" is not a duration`},
		{"a: {type: sleep, for: -3s, next: done}", "a", "for", "negative"},
		{"a: {type: sleep, until: next tuesday, next: done}", "a", "until", "not an RFC 3339 time"},
		{"a: {type: sleep, for: '${stat.x}', next: done}", "a", "for", "unknown namespace `stat`"},
		{"a: {type: sleep, until: '${result.at}', next: done}", "a", "until", "`result` is not set yet"},
		{"a: {type: sleep, for: 1m, threads: '${inputs.t}', next: done}", "a", "threads", "belongs to wait nodes"},
		{"a: {type: gate, for: 1m, next: done}", "a", "for", "belongs to sleep nodes"},
	}
	for _, tt := range tests {
		_, r, err := Parse("x", []byte(withNodes(tt.name+"\ndone: {type: return}")))
		require.NoError(t, err)
		require.True(t, has(r.Errors, tt.node, tt.key, tt.msg), "%s: want %q at %s, got %v", tt.name, tt.msg, tt.key, r.Errors)
		require.NotContains(t, r.Err().Error(), "\n", "one line")
	}
}

func TestSleepWake(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	scope := map[string]any{"state": map[string]any{"wait": "90s", "at": "2026-03-01T10:00:00+01:00", "later": "2026-03-02T00:00:00", "bad": "whenever"}}
	cases := []struct {
		n    Node
		want time.Time
	}{
		{Node{For: "0"}, now},
		{Node{For: "${state.wait}"}, now.Add(90 * time.Second)},
		{Node{Until: "${state.at}"}, now},
		{Node{Until: "${state.later}"}, time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)},
		{Node{Until: "2020-01-01T00:00:00Z"}, now},
	}
	for _, c := range cases {
		got, err := SleepWake(&c.n, scope, now)
		require.NoError(t, err, "%+v", c.n)
		require.True(t, c.want.Equal(got), "%+v: %s", c.n, got)
	}
	for _, n := range []Node{{Name: "s", For: "${state.bad}"}, {Name: "s", Until: "${state.bad}"}} {
		_, err := SleepWake(&n, scope, now)
		var se *StepError
		require.True(t, errors.As(err, &se), "%v", err)
		require.Equal(t, CodeInvalidSleep, se.Code)
	}
}
