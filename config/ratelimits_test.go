package config

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestModelGlobs: a rate limit's match is a glob over model ids in which
// `*` crosses slashes (CLI.md: "script:*" matches scripts), and a bad
// glob is refused when the file is read.
func TestModelGlobs(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		glob, model string
		want        bool
	}{
		{"script:*", "script:scripts/demo.yaml", true},
		{"script:*", "script:demo.yaml", true},
		{"script:*", "claude-sonnet-4-5", false},
		{"claude-*", "claude-sonnet-4-5", true},
		{"claude-*", "xclaude-sonnet", false},
		{"*", "openai/gpt-4o", true},
		{"openai/*", "openai/gpt-4o/mini", true},
		{"gpt-4?", "gpt-4o", true},
		{"gpt-4?", "gpt-4o-mini", false},
		{"gpt-[34]*", "gpt-4o", true},
		{"gpt-[!34]*", "gpt-4o", false},
		{"gpt-[^34]*", "gpt-5", true},
		{"a.b", "axb", false},
		{`claude\*`, "claude*", true},
		{`claude\*`, "claude-x", false},
		{"claude-sonnet-4-5", "claude-sonnet-4-5", true},
	} {
		require.Equal(t, c.want, RateRule{Match: c.glob}.MatchesModel(c.model), "%q ~ %q", c.glob, c.model)
	}
	for glob, msg := range map[string]string{
		"gpt-[4":  "rate_limits[0]: match \"gpt-[4\": a character class [...] is not closed",
		`gpt-\`:   "a trailing backslash quotes nothing",
		"gpt-[]x": "not closed",
	} {
		_, err := ParseRateLimits("r.yaml", []byte("rate_limits:\n  - match: '"+glob+"'\n    concurrent: 1\n"))
		require.ErrorContains(t, err, msg, glob)
	}
}
