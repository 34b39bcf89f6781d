package provider

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNewRouting(t *testing.T) {
	t.Parallel()
	script := func(string) ([]byte, error) { return []byte("directives:\n  '*':\n    - text: ok\n"), nil }
	cases := []struct {
		model   string
		cfg     Config
		want    any
		wire    string
		wantErr string
	}{
		{model: "script:x.yaml", cfg: Config{ReadFile: script}, want: &Scripted{}},
		{model: "claude-sonnet-4-5", want: &Anthropic{}, wire: "claude-sonnet-4-5"},
		{model: "anthropic/claude-opus-4-1", want: &Anthropic{}, wire: "claude-opus-4-1"},
		{model: "openai/gpt-4.1", want: &OpenAI{}, wire: "gpt-4.1"},
		{model: "gpt-4o-mini", want: &OpenAI{}, wire: "gpt-4o-mini"},
		{model: "o3", want: &OpenAI{}, wire: "o3"},
		{model: "o4-mini", want: &OpenAI{}, wire: "o4-mini"},
		{model: "qwen2.5-coder:7b", cfg: Config{OpenAIBaseURL: "http://localhost:11434/v1"}, want: &OpenAI{}, wire: "qwen2.5-coder:7b"},
		{model: "claude-sonnet-4-5", cfg: Config{OpenAIBaseURL: "http://localhost:11434/v1"}, want: &Anthropic{}, wire: "claude-sonnet-4-5"},
		{model: "qwen2.5-coder:7b", wantErr: `unknown model "qwen2.5-coder:7b"`},
		{model: "", wantErr: "unknown model"},
		{model: "script:", wantErr: "empty path"},
	}
	for _, tc := range cases {
		p, err := New(tc.model, tc.cfg)
		if tc.wantErr != "" {
			require.ErrorContains(t, err, tc.wantErr, tc.model)
			continue
		}
		require.NoError(t, err, tc.model)
		require.IsType(t, tc.want, p, tc.model)
		switch x := p.(type) {
		case *Anthropic:
			require.Equal(t, tc.wire, x.model)
		case *OpenAI:
			require.Equal(t, tc.wire, x.model)
		}
	}
}

func TestConfigFromEnv(t *testing.T) {
	t.Setenv("ANTHROPIC_API_KEY", "a-key")
	t.Setenv("ANTHROPIC_BASE_URL", "http://a")
	t.Setenv("OPENAI_API_KEY", "o-key")
	t.Setenv("OPENAI_BASE_URL", "http://o")
	require.Equal(t, Config{AnthropicAPIKey: "a-key", AnthropicBaseURL: "http://a", OpenAIAPIKey: "o-key", OpenAIBaseURL: "http://o"}, ConfigFromEnv())
}
