package thread

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func ip(v int) *int         { return &v }
func fp(v float64) *float64 { return &v }

func TestMergeLimits(t *testing.T) {
	t.Parallel()
	def := DefaultLimits() // turns 25, tokens 200000, spend 1.0, depth 10, spawns 10, duration 600
	tests := []struct {
		name      string
		directive Limits
		overrides Limits
		parent    *Resolved
		want      Resolved
		wantCode  string
	}{
		{name: "defaults only", want: def},
		{
			name:      "directive over defaults",
			directive: Limits{Turns: ip(5), Spend: fp(0.5)},
			want:      Resolved{Turns: 5, Tokens: 200000, Spend: 0.5, Depth: 10, Spawns: 10, Duration: 600},
		},
		{
			name:      "overrides over directive",
			directive: Limits{Turns: ip(5), Spend: fp(0.5)},
			overrides: Limits{Turns: ip(7), Tokens: ip(100), Duration: fp(30)},
			want:      Resolved{Turns: 7, Tokens: 100, Spend: 0.5, Depth: 10, Spawns: 10, Duration: 30},
		},
		{
			name:      "parent caps via min, depth decrements",
			directive: Limits{Turns: ip(50), Spend: fp(5), Spawns: ip(3)},
			parent:    &Resolved{Turns: 10, Tokens: 200000, Spend: 0.1, Depth: 5, Spawns: 10, Duration: 60},
			want:      Resolved{Turns: 10, Tokens: 200000, Spend: 0.1, Depth: 4, Spawns: 3, Duration: 60},
		},
		{
			name:      "child asking for a lower depth keeps it",
			directive: Limits{Depth: ip(2)},
			parent:    &Resolved{Turns: 25, Tokens: 4096, Spend: 1, Depth: 5, Spawns: 10, Duration: 600},
			want:      Resolved{Turns: 25, Tokens: 4096, Spend: 1, Depth: 2, Spawns: 10, Duration: 600},
		},
		{
			name:     "parent depth 0 gives child depth -1: depth_exceeded",
			parent:   &Resolved{Turns: 25, Tokens: 4096, Spend: 1, Depth: 0, Spawns: 10, Duration: 600},
			want:     Resolved{Turns: 25, Tokens: 4096, Spend: 1, Depth: -1, Spawns: 10, Duration: 600},
			wantCode: CodeDepthExceeded,
		},
		{
			name:      "negative override depth on a root: depth_exceeded",
			overrides: Limits{Depth: ip(-1)},
			want:      Resolved{Turns: 25, Tokens: 200000, Spend: 1, Depth: -1, Spawns: 10, Duration: 600},
			wantCode:  CodeDepthExceeded,
		},
		{
			name:   "parent depth 1 gives child depth 0: allowed",
			parent: &Resolved{Turns: 25, Tokens: 4096, Spend: 1, Depth: 1, Spawns: 10, Duration: 600},
			want:   Resolved{Turns: 25, Tokens: 4096, Spend: 1, Depth: 0, Spawns: 10, Duration: 600},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := MergeLimits(def, tt.directive, tt.overrides, tt.parent)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("MergeLimits (-want +got):\n%s", diff)
			}
			if tt.wantCode == "" {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if !errors.Is(err, &LimitError{Code: tt.wantCode}) {
				t.Fatalf("error %v, want LimitError %s", err, tt.wantCode)
			}
			if errors.Is(err, &LimitError{Code: CodeSpendExceeded}) {
				t.Fatalf("error %v matched a different code", err)
			}
		})
	}
}

func TestLimitErrorIs(t *testing.T) {
	t.Parallel()
	err := error(&LimitError{Code: CodeSpawnsExceeded, Current: 3, Max: 3})
	wrapped := errors.Join(errors.New("spawn"), err)
	if !errors.Is(wrapped, &LimitError{Code: CodeSpawnsExceeded}) {
		t.Error("wrapped spawns_exceeded not matched")
	}
	if errors.Is(wrapped, &LimitError{Code: CodeDepthExceeded}) {
		t.Error("spawns_exceeded matched depth_exceeded")
	}
	if errors.Is(err, errors.New("spawns_exceeded")) {
		t.Error("LimitError matched a plain error")
	}
	if got := err.Error(); got != `spawns_exceeded: 3 of 3 (to raise it: <limits spawns="..."> in the directive, --limit spawns=N, or limits: {spawns: N} in .ai/config/agent/resilience.yaml)` {
		t.Errorf("Error() = %q", got)
	}
}

// Every limit error says how to raise its limit, in each place a limit is
// set, whatever its message; its code stays what callers branch on.
func TestLimitErrorSaysHowToRaise(t *testing.T) {
	t.Parallel()
	for code, name := range map[string]string{
		CodeTurnsExceeded: "turns", CodeTokensExceeded: "tokens", CodeSpendExceeded: "spend",
		CodeDurationExceeded: "duration", CodeSpawnsExceeded: "spawns", CodeDepthExceeded: "depth",
	} {
		for _, e := range []*LimitError{{Code: code, Current: 2, Max: 1}, {Code: code, Message: "no room left"}} {
			got := e.Error()
			for _, want := range []string{code + ": ", `<limits ` + name + `="...">`, "--limit " + name + "=N", "limits: {" + name + ": N}", ".ai/config/agent/resilience.yaml"} {
				if !strings.Contains(got, want) {
					t.Errorf("%s: Error() = %q, want it to contain %q", code, got, want)
				}
			}
		}
	}
	if got := (&LimitError{Code: "other", Current: 1, Max: 1}).Error(); got != "other: 1 of 1" {
		t.Errorf("a code that is no limit's: Error() = %q", got)
	}
}

// The built-in tokens limit lets a real agent run: it counts every turn's
// input and output, and 4096 stopped one after a turn or two.
func TestDefaultTokensLimit(t *testing.T) {
	t.Parallel()
	if got := DefaultLimits().Tokens; got != 200000 {
		t.Errorf("DefaultLimits().Tokens = %d, want 200000", got)
	}
}

func TestResolvedValidate(t *testing.T) {
	t.Parallel()
	ok := DefaultLimits()
	if err := ok.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	nan := math.NaN()
	bad := []Resolved{
		{Turns: -1}, {Tokens: -1}, {Spend: -0.1}, {Spend: nan}, {Spawns: -2}, {Duration: -1}, {Duration: nan},
	}
	for _, r := range bad {
		if err := r.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want error", r)
		}
	}
}

func TestCostCheckLimits(t *testing.T) {
	t.Parallel()
	l := Resolved{Turns: 3, Tokens: 100, Spend: 0.5, Duration: 60}
	tests := []struct {
		name string
		cost Cost
		code string
	}{
		{"under every limit", Cost{Turns: 2, InputTokens: 40, OutputTokens: 40, Spend: 0.4, ElapsedSeconds: 59}, ""},
		{"turns reached", Cost{Turns: 3}, CodeTurnsExceeded},
		{"tokens reached counting cache", Cost{InputTokens: 50, OutputTokens: 20, CacheReadTokens: 20, CacheWriteTokens: 10}, CodeTokensExceeded},
		{"spend reached", Cost{Spend: 0.5}, CodeSpendExceeded},
		{"duration reached", Cost{ElapsedSeconds: 60}, CodeDurationExceeded},
		{"turns checked first", Cost{Turns: 9, Spend: 9}, CodeTurnsExceeded},
	}
	for _, tt := range tests {
		err := tt.cost.CheckLimits(l)
		if tt.code == "" {
			if err != nil {
				t.Errorf("%s: %v", tt.name, err)
			}
			continue
		}
		if !errors.Is(err, &LimitError{Code: tt.code}) {
			t.Errorf("%s: got %v, want %s", tt.name, err, tt.code)
		}
	}
	// A zero limit allows nothing: a fresh thread stops before its first
	// turn, each limit with its own code.
	zero := Resolved{Turns: 0, Tokens: 100, Spend: 1, Duration: 60}
	for _, tt := range []struct {
		l    func(*Resolved)
		code string
	}{
		{func(r *Resolved) {}, CodeTurnsExceeded},
		{func(r *Resolved) { r.Turns, r.Tokens = 5, 0 }, CodeTokensExceeded},
		{func(r *Resolved) { r.Turns, r.Spend = 5, 0 }, CodeSpendExceeded},
		{func(r *Resolved) { r.Turns, r.Duration = 5, 0 }, CodeDurationExceeded},
	} {
		l := zero
		tt.l(&l)
		if err := (Cost{}).CheckLimits(l); !errors.Is(err, &LimitError{Code: tt.code}) {
			t.Errorf("zero limit %+v: got %v, want %s", l, err, tt.code)
		}
	}
}

func TestEstimateTokens(t *testing.T) {
	t.Parallel()
	if EstimateTokens("") != 0 || EstimateTokens("abc") != 1 || EstimateTokens("abcdefgh") != 3 {
		t.Error("EstimateTokens")
	}
	m := Message{Content: "abcd", ToolCalls: []ToolCall{{Name: "x", Input: []byte(`{}`)}}}
	if got := EstimateMessageTokens(m); got != 2+4+1+1+4 {
		t.Errorf("EstimateMessageTokens = %d", got)
	}
}
