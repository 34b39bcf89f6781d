package provider

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPricingLookup(t *testing.T) {
	t.Parallel()
	p := mustPricing(t, nil)
	cases := []struct {
		model  string
		in     float64
		out    float64
		window int
	}{
		{"claude-sonnet-4-5", 3, 15, 200000},
		{"claude-sonnet-4-5-20250929", 3, 15, 200000},
		{"anthropic/claude-opus-4-1", 15, 75, 200000},
		{"claude-haiku-4-5-20251001", 1, 5, 200000},
		{"claude-3-5-haiku-latest", 0.8, 4, 200000},
		{"claude-3-5-haiku-20241022", 0.8, 4, 200000},
		{"gpt-4o", 2.5, 10, 128000},
		{"gpt-4o-2024-08-06", 2.5, 10, 128000},
		{"gpt-4o-mini-2024-07-18", 0.15, 0.6, 128000},
		{"openai/gpt-4.1-mini", 0.4, 1.6, 1047576},
		{"o3", 2, 8, 200000},
		{"o4-mini", 1.1, 4.4, 200000},
	}
	for _, tc := range cases {
		pr, err := p.Lookup(tc.model)
		require.NoError(t, err, tc.model)
		require.Equal(t, tc.in, pr.InputPerMTok, tc.model)
		require.Equal(t, tc.out, pr.OutputPerMTok, tc.model)
		require.Equal(t, tc.window, pr.ContextWindow, tc.model)
		require.Equal(t, tc.window, p.ContextWindow(tc.model))
	}
	for _, unknown := range []string{"llama3.1:8b", "o3-pro", "gpt-4o-mini-tts", "claude-sonnet-9", ""} {
		_, err := p.Cost(unknown, Usage{InputTokens: 1})
		require.ErrorIs(t, err, ErrUnknownModel, unknown)
		require.Contains(t, err.Error(), "pricing.yaml")
		require.Zero(t, p.ContextWindow(unknown))
	}
}

func TestPricingCost(t *testing.T) {
	t.Parallel()
	p := mustPricing(t, nil)
	cases := []struct {
		model string
		u     Usage
		want  float64
	}{
		{"claude-sonnet-4-5", Usage{InputTokens: 1_000_000}, 3},
		{"claude-sonnet-4-5", Usage{OutputTokens: 1_000_000}, 15},
		{"claude-sonnet-4-5", Usage{CacheReadTokens: 1_000_000}, 0.30},
		{"claude-sonnet-4-5", Usage{CacheWriteTokens: 1_000_000}, 3.75},
		{"claude-sonnet-4-5", Usage{InputTokens: 472, OutputTokens: 91, CacheReadTokens: 8000, CacheWriteTokens: 1200},
			(472*3 + 91*15 + 8000*0.30 + 1200*3.75) / 1e6},
		{"gpt-4o", Usage{InputTokens: 86, OutputTokens: 300, CacheReadTokens: 1920}, (86*2.5 + 300*10 + 1920*1.25) / 1e6},
		{"gpt-4o", Usage{CacheWriteTokens: 1_000_000}, 2.5}, // no cache_write price: billed as input
	}
	for _, tc := range cases {
		got, err := p.Cost(tc.model, tc.u)
		require.NoError(t, err)
		require.InDelta(t, tc.want, got, 1e-12, "%s %+v", tc.model, tc.u)
	}
}

func TestPricingOverrides(t *testing.T) {
	t.Parallel()
	p := mustPricing(t, []byte(`
models:
  gpt-4o: {input_per_mtok: 1.0, output_per_mtok: 2.0, context_window: 64000}
  llama3.1:8b: {input_per_mtok: 0, output_per_mtok: 0, context_window: 131072}
  "mistral-*": {input_per_mtok: 0.5, output_per_mtok: 1.5, cache_read_per_mtok: 0.1}
`))
	c, err := p.Cost("gpt-4o", Usage{InputTokens: 1_000_000, OutputTokens: 1_000_000, CacheReadTokens: 1_000_000})
	require.NoError(t, err)
	require.InDelta(t, 1.0+2.0+1.0, c, 1e-12, "override replaces the entry; cache_read defaults to input")
	require.Equal(t, 64000, p.ContextWindow("gpt-4o"))

	c, err = p.Cost("llama3.1:8b", Usage{InputTokens: 5000, OutputTokens: 5000})
	require.NoError(t, err, "an explicit zero price is allowed")
	require.Zero(t, c)
	require.Equal(t, 131072, p.ContextWindow("llama3.1:8b"))

	c, err = p.Cost("mistral-large-2411", Usage{InputTokens: 2_000_000, CacheReadTokens: 1_000_000})
	require.NoError(t, err)
	require.InDelta(t, 1.1, c, 1e-12)

	// Built-ins not overridden remain.
	_, err = p.Lookup("claude-opus-4-5")
	require.NoError(t, err)

	// A catch-all is an explicit configured price.
	all := mustPricing(t, []byte("models:\n  '*': {input_per_mtok: 9, output_per_mtok: 9}\n"))
	c, err = all.Cost("some-local-model", Usage{InputTokens: 1_000_000})
	require.NoError(t, err)
	require.InDelta(t, 9.0, c, 1e-12)
	pr, _ := all.Lookup("claude-sonnet-4-5")
	require.Equal(t, 3.0, pr.InputPerMTok, "exact keys beat the catch-all")

	bad := map[string]string{
		"missing price": "models:\n  m: {input_per_mtok: 1}\n",
		"negative":      "models:\n  m: {input_per_mtok: -1, output_per_mtok: 1}\n",
		"inner glob":    "models:\n  'a*b': {input_per_mtok: 1, output_per_mtok: 1}\n",
		"not yaml":      "models: [",
	}
	for name, src := range bad {
		_, err := LoadPricing([]byte(src))
		require.Error(t, err, name)
		require.Contains(t, err.Error(), "pricing overrides", name)
	}
}

func TestProviderCostUsesPricing(t *testing.T) {
	t.Parallel()
	a, err := New("claude-haiku-4-5", Config{})
	require.NoError(t, err)
	c, err := a.Cost("", Usage{InputTokens: 1_000_000})
	require.NoError(t, err)
	require.InDelta(t, 1.0, c, 1e-12)
	require.Equal(t, 200000, a.ContextWindow(""))

	o, err := New("my-local-model", Config{OpenAIBaseURL: "http://127.0.0.1:1/v1"})
	require.NoError(t, err)
	_, err = o.Cost("", Usage{InputTokens: 1})
	require.True(t, errors.Is(err, ErrUnknownModel))

	o, err = New("my-local-model", Config{OpenAIBaseURL: "http://127.0.0.1:1/v1",
		PricingOverrides: []byte("models:\n  my-local-model: {input_per_mtok: 0, output_per_mtok: 0, context_window: 32768}\n")})
	require.NoError(t, err)
	c, err = o.Cost("", Usage{InputTokens: 1})
	require.NoError(t, err)
	require.Zero(t, c)
	require.Equal(t, 32768, o.ContextWindow(""))

	_, err = New("claude-x", Config{PricingOverrides: []byte("models: [")})
	require.Error(t, err)
}
