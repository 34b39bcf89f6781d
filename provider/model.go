package provider

import (
	"fmt"
	"net/http"
	"os"
	"strings"
)

// Config holds what providers need from the environment. The zero value
// works for the scripted provider.
type Config struct {
	AnthropicAPIKey  string // default: none (ANTHROPIC_API_KEY via ConfigFromEnv)
	AnthropicBaseURL string // default: https://api.anthropic.com (ANTHROPIC_BASE_URL)
	OpenAIAPIKey     string // default: none (OPENAI_API_KEY)
	// OpenAIBaseURL points the OpenAI adapter at any compatible server (vLLM,
	// Ollama, llama.cpp, OpenRouter); when set, models that are neither
	// Anthropic nor scripted go to it. Default: https://api.openai.com/v1.
	OpenAIBaseURL string
	// HTTPClient carries the HTTP calls; default: a new http.Client without
	// a timeout (the ctx bounds each call).
	HTTPClient *http.Client
	// PricingOverrides is the content of .ai/config/agent/pricing.yaml;
	// default: none (the embedded table only).
	PricingOverrides []byte
	// ReadFile reads a scripted provider's script ("script:PATH"); the worker
	// reads from the directive bundle. Default: os.ReadFile.
	ReadFile func(path string) ([]byte, error)
}

// ConfigFromEnv reads ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL, OPENAI_API_KEY
// and OPENAI_BASE_URL.
func ConfigFromEnv() Config {
	return Config{
		AnthropicAPIKey:  os.Getenv("ANTHROPIC_API_KEY"),
		AnthropicBaseURL: os.Getenv("ANTHROPIC_BASE_URL"),
		OpenAIAPIKey:     os.Getenv("OPENAI_API_KEY"),
		OpenAIBaseURL:    os.Getenv("OPENAI_BASE_URL"),
	}
}

func (c Config) httpClient() *http.Client {
	if c.HTTPClient != nil {
		return c.HTTPClient
	}
	return &http.Client{}
}

// New returns the provider for a resolved model string:
//
//   - "script:PATH": the scripted provider, reading PATH with cfg.ReadFile;
//   - "anthropic/<m>" or "claude-*": Anthropic Messages, model <m>;
//   - "openai/<m>", "gpt-*", "chatgpt-*", "o1*", "o3*", "o4*": OpenAI
//     Chat Completions, model <m>;
//   - anything else when cfg.OpenAIBaseURL is set: the OpenAI-compatible
//     server at that URL, model as given.
//
// Anything else is an error. Pricing overrides are parsed here.
func New(model string, cfg Config) (Provider, error) {
	model = strings.TrimSpace(model)
	if path, ok := strings.CutPrefix(model, "script:"); ok {
		return NewScripted(path, cfg.ReadFile)
	}
	pricing, err := LoadPricing(cfg.PricingOverrides)
	if err != nil {
		return nil, err
	}
	switch {
	case strings.HasPrefix(model, "anthropic/"):
		return NewAnthropic(strings.TrimPrefix(model, "anthropic/"), cfg, pricing), nil
	case strings.HasPrefix(model, "claude-"):
		return NewAnthropic(model, cfg, pricing), nil
	case strings.HasPrefix(model, "openai/"):
		return NewOpenAI(strings.TrimPrefix(model, "openai/"), cfg, pricing), nil
	case isOpenAIModel(model) || (cfg.OpenAIBaseURL != "" && model != ""):
		return NewOpenAI(model, cfg, pricing), nil
	}
	return nil, fmt.Errorf("unknown model %q: use claude-*, gpt-*, anthropic/<model>, openai/<model> or script:PATH, or set OPENAI_BASE_URL for an OpenAI-compatible server", model)
}

func isOpenAIModel(m string) bool {
	for _, p := range []string{"gpt-", "chatgpt-", "o1", "o3", "o4"} {
		if strings.HasPrefix(m, p) {
			return true
		}
	}
	return false
}
