package provider

import (
	"fmt"
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

func TestMissingKey(t *testing.T) {
	t.Parallel()
	cases := []struct {
		model string
		cfg   Config
		want  string
	}{
		{"claude-sonnet-4-5", Config{}, "ANTHROPIC_API_KEY"},
		{"anthropic/claude-opus-4-1", Config{OpenAIAPIKey: "o"}, "ANTHROPIC_API_KEY"},
		{"claude-sonnet-4-5", Config{AnthropicAPIKey: "a"}, ""},
		{"claude-sonnet-4-5", Config{AnthropicBaseURL: "http://127.0.0.1:1"}, ""}, // a compatible server may take no key
		{"gpt-4o", Config{}, "OPENAI_API_KEY"},
		{"openai/gpt-4.1", Config{AnthropicAPIKey: "a"}, "OPENAI_API_KEY"},
		{"gpt-4o", Config{OpenAIAPIKey: "o"}, ""},
		{"qwen2.5-coder:7b", Config{OpenAIBaseURL: "http://localhost:11434/v1"}, ""},
		{"script:x.yaml", Config{}, ""},
		{"nonsense", Config{}, ""},
	}
	for _, tc := range cases {
		require.Equal(t, tc.want, MissingKey(tc.model, tc.cfg), "%s %+v", tc.model, tc.cfg)
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	files := map[string]string{"ok.yaml": "directives:\n  '*':\n    - text: ok\n", "bad.yaml": "directives: [\n"}
	read := func(p string) ([]byte, error) {
		if s, ok := files[p]; ok {
			return []byte(s), nil
		}
		return nil, fmt.Errorf("open %s: no such file", p)
	}
	overrides := []byte("models:\n  llama-local: {input_per_mtok: 0, output_per_mtok: 0}\n")
	cases := []struct {
		model   string
		wantErr string
	}{
		{"claude-sonnet-4-5", ""},
		{"anthropic/claude-sonnet-4-5-20250929", ""},
		{"gpt-4o-mini", ""},
		{"llama-local", ""}, // priced; the worker's OPENAI_BASE_URL routes it
		{"script:ok.yaml", ""},
		{"gpt-9-ultra", `unknown model "gpt-9-ultra": add it to .ai/config/agent/pricing.yaml`},
		{"claude-unpriced-9", `unknown model "claude-unpriced-9"`},
		{"cluade-sonnet", `unknown model "cluade-sonnet": use claude-*`},
		{"script:nosuch.yaml", "no such file"},
		{"script:bad.yaml", "bad.yaml"},
	}
	for _, tc := range cases {
		err := Check(tc.model, Config{ReadFile: read, PricingOverrides: overrides})
		if tc.wantErr == "" {
			require.NoError(t, err, tc.model)
			continue
		}
		require.ErrorContains(t, err, tc.wantErr, tc.model)
	}
}
