package config

import (
	"errors"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/thread"
)

func TestDefaults(t *testing.T) {
	p, err := Load(fstest.MapFS{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Default(), p); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	want := Resilience{
		Limits:   thread.Resolved{Turns: 25, Tokens: 200000, Spend: 1.0, Spawns: 10, Depth: 10, Duration: 600},
		Retry:    RetryPolicy{MaxRetries: 3, Base: 2, Max: 120 * time.Second},
		Children: ChildPolicy{OnParentCancel: "cascade_cancel", OnParentError: "cascade_cancel", OnParentComplete: "allow"},
	}
	if diff := cmp.Diff(want, p.Resilience); diff != "" {
		t.Errorf("resilience (-want +got):\n%s", diff)
	}
	wantC := Coordination{TriggerThreshold: 0.9, ResumeCeilingTokens: 16000, WaitDefaultTimeout: 600 * time.Second, WaitMaxThreads: 50, TranscriptIntegrity: "strict", MaxContinuations: 20}
	if diff := cmp.Diff(wantC, p.Coordination); diff != "" {
		t.Errorf("coordination (-want +got):\n%s", diff)
	}
	if p, err := Load(nil); err != nil || p.Resilience.Limits != thread.DefaultLimits() {
		t.Errorf("nil fs: %v %v", p, err)
	}
}

func TestRetryDelay(t *testing.T) {
	p := DefaultRetryPolicy()
	want := []time.Duration{2 * time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, 64 * time.Second, 120 * time.Second, 120 * time.Second}
	for i, w := range want {
		if got := p.Delay(i); got != w {
			t.Errorf("Delay(%d) = %s, want %s", i, got, w)
		}
	}
	if got := p.Delay(5000); got != 120*time.Second {
		t.Errorf("Delay(huge) = %s", got)
	}
}

func TestParseResilience(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want func(r *Resilience)
	}{
		{"reference nesting", `
schema_version: "1.0.0"
resilience:
  retry:
    default_policy: exponential
    max_retries: 5
    policies:
      exponential: {type: exponential, base: 3.0, max: 60.0}
      fixed: {type: fixed, delay: 1}
  limits:
    defaults: {turns: 30, tokens: 8192, spend: 2.5, spawns: 4, depth: 3, duration_seconds: 900}
  child_policy:
    on_parent_cancel: cascade_cancel
    on_parent_error: allow
    on_parent_complete: allow
`, func(r *Resilience) {
			r.Retry = RetryPolicy{MaxRetries: 5, Base: 3, Max: 60 * time.Second}
			r.Limits = thread.Resolved{Turns: 30, Tokens: 8192, Spend: 2.5, Spawns: 4, Depth: 3, Duration: 900}
			r.Children.OnParentError = "allow"
		}},
		{"flat layout, partial", `
limits: {turns: 7}
retry: {base: 2.5, max_delay: 10}
children: {on_parent_complete: cascade}
`, func(r *Resilience) {
			r.Limits.Turns = 7
			r.Retry.Base, r.Retry.Max = 2.5, 10*time.Second
			r.Children.OnParentComplete = "cascade_cancel"
		}},
		{"defaults key, backoff block", `
defaults: {duration: 30, spend: "0.5"}
retry: {backoff: {base: 4, max: 1}}
`, func(r *Resilience) {
			r.Limits.Duration, r.Limits.Spend = 30, 0.5
			r.Retry.Base, r.Retry.Max = 4, time.Second
		}},
		{"empty file", "", func(*Resilience) {}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseResilience("r.yaml", []byte(tt.src))
			if err != nil {
				t.Fatal(err)
			}
			want := DefaultResilience()
			tt.want(&want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	requireRefused(t, ParseResilience, "r.yaml", map[string]string{
		"limits: {turns: abc}":                 `r.yaml: limit turns: "abc" is not a number`,
		"limits: {turns: 2.5}":                 "r.yaml: limit turns: 2.5 is not a whole number",
		"limits: {spend: -1}":                  "r.yaml: limit spend: -1 is negative",
		"limits: 3":                            "r.yaml: limits: not a mapping",
		"retry: {max_retries: -1}":             "retry.max_retries: -1 is negative",
		"retry: {base: 0.5}":                   "retry base 0.5 is below 1",
		"child_policy: {on_parent_error: die}": `child_policy.on_parent_error: "die" is not cascade_cancel or allow`,
		"child_policy: {on_parent_error: 3}":   "on_parent_error: 3 is not a string",
		"[unclosed":                            "r.yaml: yaml",
	})
}

// requireRefused parses each source as file name with parse: each must
// be refused with an error that names the file and contains its text.
func requireRefused[T any](t *testing.T, parse func(path string, data []byte) (T, error), name string, refusals map[string]string) {
	t.Helper()
	for src, want := range refusals {
		_, err := parse(name, []byte(src))
		require.Error(t, err, src)
		require.Contains(t, err.Error(), want, src)
		require.True(t, strings.HasPrefix(err.Error(), name), "names the file: %v", err)
	}
}

func TestParseCoordination(t *testing.T) {
	nested := `
coordination:
  continuation:
    trigger_threshold: 0.8
    resume_ceiling_tokens: 8000
    max_continuations: 5
  wait_threads:
    default_timeout: 300.0
    max_threads: 10
  transcript_integrity: lenient
`
	flat := `
trigger_threshold: 0.8
resume_ceiling_tokens: 8000
max_continuations: 5
wait_threads: {default_timeout: 300, max_threads: 10}
transcript_integrity: lenient
`
	want := Coordination{TriggerThreshold: 0.8, ResumeCeilingTokens: 8000, WaitDefaultTimeout: 300 * time.Second, WaitMaxThreads: 10, TranscriptIntegrity: "lenient", MaxContinuations: 5}
	for name, src := range map[string]string{"nested": nested, "flat": flat} {
		got, err := ParseCoordination("c.yaml", []byte(src))
		if err != nil {
			t.Fatal(name, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
	bad := map[string]string{
		"trigger_threshold: 1.5":             "trigger_threshold: 1.5 is not in (0, 1]",
		"resume_ceiling_tokens: 0":           "resume_ceiling_tokens: 0 is not positive",
		"max_continuations: -1":              "max_continuations: -1 is negative",
		"wait_threads: {default_timeout: 0}": "default_timeout: 0 is not positive",
		"transcript_integrity: loose":        `transcript_integrity: "loose" is not strict or lenient`,
		"coordination: [1]":                  "coordination: not a mapping",
	}
	for src, w := range bad {
		if _, err := ParseCoordination("c.yaml", []byte(src)); err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("ParseCoordination(%q) = %v, want %q", src, err, w)
		}
	}
}

func TestLoadPaths(t *testing.T) {
	fsys := fstest.MapFS{
		".ai/config/coordination.yaml":     {Data: []byte("trigger_threshold: 0.5")},
		".ai/config/agent/resilience.yaml": {Data: []byte("limits: {turns: 3}")},
		".ai/config/resilience.yaml":       {Data: []byte("limits: {turns: 99}")}, // shadowed by agent/
		".ai/config/agent/models.yaml":     {Data: []byte("tiers: {fast: \"script:scripts/all.yaml\", general: claude-sonnet-4-5}")},
	}
	p, err := Load(fsys)
	if err != nil {
		t.Fatal(err)
	}
	if p.Coordination.TriggerThreshold != 0.5 || p.Resilience.Limits.Turns != 3 || p.Models.Tiers["fast"] != "script:scripts/all.yaml" {
		t.Errorf("got %+v", p)
	}
	if _, err := Load(fstest.MapFS{".ai/config/agent/models.yaml": {Data: []byte("tiers: [")}}); err == nil || !strings.Contains(err.Error(), ".ai/config/agent/models.yaml") {
		t.Errorf("bad models.yaml: %v", err)
	}
	if _, err := Load(errFS{}); err == nil || errors.Is(err, fs.ErrNotExist) {
		t.Errorf("unreadable fs: %v", err)
	}
}

type errFS struct{}

func (errFS) Open(string) (fs.File, error) { return nil, fs.ErrPermission }

func TestModels(t *testing.T) {
	m, err := ParseModels("m.yaml", []byte("tiers:\n  fast: script:scripts/all.yaml\n  general: claude-sonnet-4-5\n  haiku: claude-3-5-haiku-20241022\n"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		explicit, id, tier, fbID, fbTier string
		want                             string
		err                              bool
	}{
		{"script:x.yaml", "id", "fast", "", "", "script:x.yaml", false},
		{"", "claude-x", "fast", "", "", "claude-x", false},
		{"", "", "fast", "", "", "script:scripts/all.yaml", false},
		{"", "", "haiku", "", "", "claude-3-5-haiku-20241022", false},
		{"", "", "opus", "", "", "claude-opus-4-1", false}, // default tier
		{"", "", "nope", "fb-id", "", "fb-id", false},
		{"", "", "nope", "", "general", "claude-sonnet-4-5", false},
		{"", "", "nope", "", "", "", true},
		{"", "", "", "", "", "", true},
	}
	for _, tt := range tests {
		got, err := m.ResolveModel(tt.explicit, tt.id, tt.tier, tt.fbID, tt.fbTier)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("ResolveModel(%q,%q,%q,%q,%q) = %q, %v; want %q err=%v", tt.explicit, tt.id, tt.tier, tt.fbID, tt.fbTier, got, err, tt.want, tt.err)
		}
		if err != nil && !errors.Is(err, ErrNoModel) {
			t.Errorf("error %v does not wrap ErrNoModel", err)
		}
	}
	if p, ok := ScriptPath("script:scripts/all.yaml"); !ok || p != "scripts/all.yaml" {
		t.Errorf("ScriptPath = %q %v", p, ok)
	}
	if _, ok := ScriptPath("claude-x"); ok {
		t.Error("ScriptPath of a model id")
	}
	if _, err := ParseModels("m.yaml", []byte("models: {tiers: {fast: ''}}")); err == nil || !strings.Contains(err.Error(), "tiers.fast: empty model id") {
		t.Errorf("empty tier: %v", err)
	}
	if m, err := ParseModels("m.yaml", []byte("models: {tiers: {fast: x}}")); err != nil || m.Tiers["fast"] != "x" {
		t.Errorf("nested models: %v %v", m, err)
	}
}

func TestResolveLimits(t *testing.T) {
	r, err := ParseResilience("r.yaml", []byte("limits: {turns: 30, depth: 4}"))
	if err != nil {
		t.Fatal(err)
	}
	six, half := 6, 0.5
	parent := &thread.Resolved{Turns: 10, Tokens: 100000, Spend: 0.4, Depth: 2, Spawns: 3, Duration: 100}
	got, err := r.ResolveLimits(thread.Limits{Turns: &six}, thread.Limits{Spend: &half}, parent)
	if err != nil {
		t.Fatal(err)
	}
	want := thread.Resolved{Turns: 6, Tokens: 100000, Spend: 0.4, Depth: 1, Spawns: 3, Duration: 100}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if _, err := r.ResolveLimits(thread.Limits{}, thread.Limits{}, &thread.Resolved{Depth: 0}); !errors.Is(err, &thread.LimitError{Code: thread.CodeDepthExceeded}) {
		t.Errorf("depth: %v", err)
	}
}
