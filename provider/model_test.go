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
		{model: "openai/meta-llama/Llama-3-8B", want: &OpenAI{}, wire: "meta-llama/Llama-3-8B"},
		{model: "qwen2.5-coder:7b", cfg: Config{OpenAIBaseURL: "http://localhost:11434/v1"}, want: &OpenAI{}, wire: "qwen2.5-coder:7b"},
		{model: "meta-llama/Llama-3-8B", cfg: Config{OpenAIBaseURL: "http://localhost:8000/v1"}, want: &OpenAI{}, wire: "meta-llama/Llama-3-8B"},
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
			require.Equal(t, tc.wire, x.wire(&Request{}))
		case *OpenAI:
			require.Equal(t, tc.wire, x.wire(&Request{}))
		}
		if tc.wire != "" {
			require.Equal(t, tc.wire, WireModel(tc.model, tc.cfg))
		}
	}
}

// TestModelOnTheWire: whatever spelling docs/models.md documents, the
// request names the model the provider knows, without the prefix that
// routed it, whether the worker passes the model in the request (as it
// does) or leaves the provider's own; pricing and the context window
// are looked up by the thread's spelling, the project's pricing.yaml
// keyed by either.
func TestModelOnTheWire(t *testing.T) {
	t.Parallel()
	pricing := []byte("models:\n" +
		"  openai/meta-llama/Llama-3-8B: {input_per_mtok: 1, output_per_mtok: 1, context_window: 8192}\n" +
		"  mock-1: {input_per_mtok: 2, output_per_mtok: 2, context_window: 4096}\n" +
		"  anthropic/x: {input_per_mtok: 3, output_per_mtok: 3, context_window: 1000}\n" +
		"  anthropic/claude-3.5-sonnet: {input_per_mtok: 3, output_per_mtok: 15, context_window: 200000}\n" +
		"  qwen2.5-coder:7b: {input_per_mtok: 0, output_per_mtok: 0, context_window: 32768}\n")
	cases := []struct {
		model, wire string
		anthropic   bool
		window      int
	}{
		{model: "claude-sonnet-4-5", wire: "claude-sonnet-4-5", anthropic: true, window: 200000},
		{model: "anthropic/claude-sonnet-4-5", wire: "claude-sonnet-4-5", anthropic: true, window: 200000},
		{model: "anthropic/x", wire: "x", anthropic: true, window: 1000},
		{model: "gpt-4o", wire: "gpt-4o", window: 128000},
		{model: "o4-mini", wire: "o4-mini", window: 200000},
		{model: "openai/gpt-4o", wire: "gpt-4o", window: 128000},
		{model: "openai/mock-1", wire: "mock-1", window: 4096},
		{model: "openai/meta-llama/Llama-3-8B", wire: "meta-llama/Llama-3-8B", window: 8192},
		{model: "openai/anthropic/claude-3.5-sonnet", wire: "anthropic/claude-3.5-sonnet", window: 200000}, // a gateway's namespace
		{model: "qwen2.5-coder:7b", wire: "qwen2.5-coder:7b", window: 32768},                               // routed by OPENAI_BASE_URL
	}
	for _, tc := range cases {
		answer := reply(200, openaiToolCallJSON)
		if tc.anthropic {
			answer = reply(200, anthropicToolUseJSON)
		}
		f := newFakeAPI(t, answer)
		p, err := New(tc.model, Config{AnthropicAPIKey: "k", AnthropicBaseURL: f.srv.URL, OpenAIAPIKey: "k",
			OpenAIBaseURL: f.srv.URL + "/v1", PricingOverrides: pricing})
		require.NoError(t, err, tc.model)
		for i, req := range []*Request{{Model: tc.model}, {}} {
			req.Messages = hi().Messages
			_, err := p.Complete(t.Context(), req, nil)
			require.NoError(t, err, tc.model)
			require.Equal(t, tc.wire, f.body(i)["model"], "%s (request model %q)", tc.model, req.Model)
		}
		require.Equal(t, tc.window, p.ContextWindow(tc.model), tc.model)
		require.Equal(t, tc.window, p.ContextWindow(""), tc.model)
		_, err = p.Cost(tc.model, Usage{InputTokens: 1})
		require.NoError(t, err, tc.model)
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

// TestWarnKey: thread run warns of a missing key only for a model of the
// real provider's, which goes to its default endpoint without a base URL:
// a model only a compatible server serves (openai/mock-1, anthropic/x)
// is served by the workers' OPENAI_BASE_URL or ANTHROPIC_BASE_URL, which
// may take no key; and a base URL set here takes none either.
func TestWarnKey(t *testing.T) {
	t.Parallel()
	cases := []struct {
		model string
		cfg   Config
		want  string
	}{
		{"gpt-4o", Config{}, "OPENAI_API_KEY"},
		{"openai/gpt-4o", Config{}, "OPENAI_API_KEY"},
		{"o4-mini", Config{AnthropicAPIKey: "a"}, "OPENAI_API_KEY"},
		{"claude-sonnet-4-5", Config{}, "ANTHROPIC_API_KEY"},
		{"anthropic/claude-sonnet-4-5", Config{}, "ANTHROPIC_API_KEY"},
		{"gpt-4o", Config{OpenAIAPIKey: "o"}, ""},
		{"gpt-4o", Config{OpenAIBaseURL: "http://localhost:8000/v1"}, ""},
		{"openai/mock-1", Config{OpenAIBaseURL: "http://localhost:8000/v1"}, ""},
		{"openai/mock-1", Config{}, ""},
		{"openai/meta-llama/Llama-3-8B", Config{}, ""},
		{"anthropic/x", Config{}, ""},
		{"qwen2.5-coder:7b", Config{}, ""},
		{"script:x.yaml", Config{}, ""},
	}
	for _, tc := range cases {
		require.Equal(t, tc.want, WarnKey(tc.model, tc.cfg), "%s %+v", tc.model, tc.cfg)
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
