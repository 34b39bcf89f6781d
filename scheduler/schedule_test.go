package scheduler

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/thread"
)

func TestParse(t *testing.T) {
	t.Parallel()
	src := `
# comment
schedules:
  - id: nightly
    directive: reports/nightly.md
    cron: "0 3 * * *"
    inputs: {scope: all, n: 3, nested: {a: [1, 2]}}
    queue: low
    model: script:scripts/s.yaml
    limits: {turns: 10, spend: 0.5, duration: 90}
  - id: often.1_x
    directive: demo/hello
    cron: "@every 30s"
  - id: hourly
    directive: demo/hello
    cron: "CRON_TZ=Asia/Tokyo @hourly"
    tenant: acme.eu
    priority: 1
    tags: {team: ops, batch: "7"}
`
	got, err := Parse("s.yaml", []byte(src))
	require.NoError(t, err)
	turns, spend, dur := 10, 0.5, 90.0
	want := []Entry{
		{ID: "nightly", Directive: "reports/nightly", Cron: "0 3 * * *", Queue: "low", Model: "script:scripts/s.yaml",
			Inputs: map[string]any{"scope": "all", "n": 3, "nested": map[string]any{"a": []any{1, 2}}},
			Limits: thread.Limits{Turns: &turns, Spend: &spend, Duration: &dur}},
		{ID: "often.1_x", Directive: "demo/hello", Cron: "@every 30s"},
		{ID: "hourly", Directive: "demo/hello", Cron: "CRON_TZ=Asia/Tokyo @hourly", Tenant: "acme.eu", Priority: 1,
			Tags: map[string]string{"team": "ops", "batch": "7"}},
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreUnexported(Entry{})); diff != "" {
		t.Fatalf("entries (-want +got):\n%s", diff)
	}
	// The top-level list form and an empty file.
	got, err = Parse("s.yaml", []byte("- {id: a, directive: x/y, cron: '@daily'}\n"))
	require.NoError(t, err)
	require.Len(t, got, 1)
	for _, empty := range []string{"", "# nothing\n", "schedules:\n", "schedules: []\n"} {
		got, err = Parse("s.yaml", []byte(empty))
		require.NoError(t, err, "%q", empty)
		require.Empty(t, got, "%q", empty)
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	entry := func(body string) string { return "schedules:\n  - " + body + "\n" }
	tests := []struct {
		name, src string
		want      []string // substrings of the one-line error
	}{
		{"yaml syntax", "schedules: [\n", []string{"bad.yaml:", "did not find expected"}},
		{"unknown top key", "schedule:\n  - id: a\n", []string{"bad.yaml:1:", `unknown key "schedule"`}},
		{"not a list", "schedules: {id: a}\n", []string{"bad.yaml:1:", "must be a list"}},
		{"entry not a mapping", "schedules:\n  - just-a-string\n", []string{"bad.yaml:2:", "schedules[0]", "must be a mapping"}},
		{"missing id", entry("{directive: a/b, cron: '@daily'}"), []string{"bad.yaml:2:", "schedules[0]", "id: required"}},
		{"bad id", entry("{id: 'a b', directive: a/b, cron: '@daily'}"), []string{"schedules[0]", `id "a b"`}},
		{"missing directive", entry("{id: a, cron: '@daily'}"), []string{`entry "a"`, "directive: required"}},
		{"bad directive", entry("{id: a, directive: ../etc/passwd, cron: '@daily'}"), []string{`entry "a"`, `directive "../etc/passwd"`}},
		{"missing cron", entry("{id: a, directive: a/b}"), []string{`entry "a"`, "cron: required"}},
		{"four fields", entry("{id: a, directive: a/b, cron: '0 3 * *'}"), []string{`entry "a"`, `cron "0 3 * *"`, "expected exactly 5 fields"}},
		{"bad field", entry("{id: a, directive: a/b, cron: '61 * * * *'}"), []string{`cron "61 * * * *"`, "above maximum"}},
		{"every too short", entry("{id: a, directive: a/b, cron: '@every 500ms'}"), []string{`entry "a"`, "at least 1s"}},
		{"every garbage", entry("{id: a, directive: a/b, cron: '@every soon'}"), []string{`entry "a"`, "@every"}},
		{"never fires", entry("{id: a, directive: a/b, cron: '0 0 30 2 *'}"), []string{`cron "0 0 30 2 *"`, "never fires"}},
		{"unknown descriptor", entry("{id: a, directive: a/b, cron: '@sometimes'}"), []string{`cron "@sometimes"`}},
		{"unknown key", entry("{id: a, directive: a/b, cron: '@daily', crons: x}"), []string{`entry "a"`, `unknown key "crons"`}},
		{"tags not a map", entry("{id: a, directive: a/b, cron: '@daily', tags: [x]}"), []string{`entry "a"`, "tags: must be a mapping"}},
		{"bad tag key", entry("{id: a, directive: a/b, cron: '@daily', tags: {'a b': x}}"), []string{`entry "a"`, `tag key "a b"`}},
		{"inputs not a map", entry("{id: a, directive: a/b, cron: '@daily', inputs: [1]}"), []string{`entry "a"`, "inputs"}},
		{"unknown limit", entry("{id: a, directive: a/b, cron: '@daily', limits: {turn: 3}}"), []string{`entry "a"`, `unknown limit "turn"`}},
		{"negative limit", entry("{id: a, directive: a/b, cron: '@daily', limits: {spend: -1}}"), []string{"limit spend: -1 is negative"}},
		{"fractional turns", entry("{id: a, directive: a/b, cron: '@daily', limits: {turns: 2.5}}"), []string{"turns", "whole number"}},
		{"bad queue", entry("{id: a, directive: a/b, cron: '@daily', queue: 'x y'}"), []string{`queue "x y"`}},
		{"id not a string", entry("{id: [a], directive: a/b, cron: '@daily'}"), []string{"id: must be a string"}},
		{"bad tenant", entry("{id: a, directive: a/b, cron: '@daily', tenant: Acme}"), []string{"bad.yaml:2:", `entry "a"`, `tenant "Acme": want 1 to 63 of a-z`}},
		{"tenant not a string", entry("{id: a, directive: a/b, cron: '@daily', tenant: [acme]}"), []string{`entry "a"`, "tenant: must be a string"}},
		{"priority zero", entry("{id: a, directive: a/b, cron: '@daily', priority: 0}"), []string{"bad.yaml:2:", `entry "a"`, `priority "0": want a whole number from 1 (highest) to 5`}},
		{"priority six", entry("{id: a, directive: a/b, cron: '@daily', priority: 6}"), []string{`priority "6"`}},
		{"priority a word", entry("{id: a, directive: a/b, cron: '@daily', priority: high}"), []string{`priority "high"`}},
		{"duplicate id", "schedules:\n  - {id: a, directive: a/b, cron: '@daily'}\n  - {id: a, directive: a/c, cron: '@daily'}\n",
			[]string{"bad.yaml:3:", `entry "a"`, "duplicate id (first at line 2)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse("bad.yaml", []byte(tt.src))
			require.Error(t, err)
			msg := err.Error()
			require.NotContains(t, msg, "\n", "one line")
			for _, w := range tt.want {
				require.Contains(t, msg, w)
			}
		})
	}
}

func TestEveryAlignedAcrossProcesses(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for _, d := range []time.Duration{time.Second, 1500 * time.Millisecond, 30 * time.Second, 7 * time.Minute, 24 * time.Hour} {
		e := Every(d)
		for range 200 {
			at := time.Unix(0, r.Int64N(4e18)-1e18) // before and after the epoch
			next := e.Next(at)
			require.True(t, next.After(at), "%s: Next(%s) = %s", d, at, next)
			require.LessOrEqual(t, next.Sub(at), d)
			require.Zero(t, next.UnixNano()%int64(d), "%s: %s is not a multiple", d, next)
			// A process that started elsewhere in the same interval, or
			// in another zone, computes the same tick.
			other := at.Add(-time.Duration(r.Int64N(int64(next.Sub(at))))).In(time.FixedZone("X", 5*3600))
			if !other.Equal(at) && other.Before(at) && e.Next(other).After(at) {
				require.True(t, e.Next(other).Equal(next))
			}
		}
	}
}

func TestCronSpecsAreUTC(t *testing.T) {
	t.Parallel()
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	require.NoError(t, err)
	at := time.Date(2026, 3, 10, 12, 0, 0, 0, tokyo) // 03:00 UTC
	s, err := ParseSpec("0 3 * * *")
	require.NoError(t, err)
	require.True(t, s.Next(at).Equal(time.Date(2026, 3, 11, 3, 0, 0, 0, time.UTC)), "got %s", s.Next(at).UTC())
	s, err = ParseSpec("CRON_TZ=Asia/Tokyo 0 3 * * *")
	require.NoError(t, err)
	require.True(t, s.Next(at).Equal(time.Date(2026, 3, 11, 3, 0, 0, 0, tokyo)), "got %s", s.Next(at))
	s, err = ParseSpec("@hourly")
	require.NoError(t, err)
	require.True(t, s.Next(at).Equal(at.Add(time.Hour)))
}

func TestTickThreadID(t *testing.T) {
	t.Parallel()
	tick := time.Unix(1_800_000_000, 0)
	id := TickThreadID("demo/hello", "e1", tick)
	require.Equal(t, id, TickThreadID("demo/hello", "e1", tick.In(time.FixedZone("X", 3600))), "deterministic")
	require.True(t, strings.HasPrefix(id, "demo/hello-1800000000-"), id)
	require.Equal(t, "demo/hello", thread.DirectiveFromID(id))
	require.Len(t, strings.TrimPrefix(id, "demo/hello-1800000000-"), 10)
	seen := map[string]bool{id: true}
	for _, other := range []string{
		TickThreadID("demo/hello", "e2", tick),
		TickThreadID("demo/hello", "e1", tick.Add(time.Second)),
		TickThreadID("demo/hello", "e1", tick.Add(500*time.Millisecond)),
	} {
		require.False(t, seen[other], "collision %s", other)
		seen[other] = true
	}
}

// FuzzParse: Parse never panics, and what it accepts is usable: unique
// ids, a directive, and a schedule whose next tick is in the future.
func FuzzParse(f *testing.F) {
	f.Add([]byte("schedules:\n  - {id: a, directive: a/b, cron: '@every 1s', limits: {turns: 1}}\n"))
	f.Add([]byte("- {id: a, directive: a/b, cron: '*/5 * * * 1-5', inputs: {x: 1}}\n"))
	f.Add([]byte("schedules: [{id: b, directive: c, cron: 'CRON_TZ=UTC @daily'}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, err := Parse("f.yaml", data)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("multi-line error: %q", err)
			}
			return
		}
		ids := map[string]bool{}
		now := time.Unix(1_800_000_000, 0)
		for _, e := range entries {
			if e.ID == "" || e.Directive == "" || ids[e.ID] {
				t.Fatalf("bad entry accepted: %+v", e)
			}
			ids[e.ID] = true
			if n := e.Next(now); !n.After(now) {
				t.Fatalf("%s: next %s not after %s", e.Cron, n, now)
			}
		}
	})
}
