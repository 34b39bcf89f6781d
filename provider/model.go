package provider

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"
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
	// StreamIdle is how long a streamed call may go without an event
	// before it is given up as a transient error (and retried). Default
	// DefaultStreamIdle; negative: no bound.
	StreamIdle time.Duration
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

// ForBundle is c for the threads of one project bundle: scripts read by
// readFile, and the bundle's pricing.yaml (pricing; nil keeps c's).
func (c Config) ForBundle(pricing []byte, readFile func(path string) ([]byte, error)) Config {
	c.ReadFile = readFile
	if pricing != nil {
		c.PricingOverrides = pricing
	}
	return c
}

func (c Config) httpClient() *http.Client {
	if c.HTTPClient != nil {
		return c.HTTPClient
	}
	return &http.Client{}
}

// The APIs a model string can route to.
const (
	apiScript    = "script"
	apiAnthropic = "anthropic"
	apiOpenAI    = "openai"
)

// route says which API serves a resolved model string, and the model's
// name there (see New).
func route(model string, cfg Config) (api, name string, err error) {
	model = strings.TrimSpace(model)
	if path, ok := strings.CutPrefix(model, "script:"); ok {
		return apiScript, path, nil
	}
	switch {
	case strings.HasPrefix(model, "anthropic/") || strings.HasPrefix(model, "claude-"):
		return apiAnthropic, wireName(apiAnthropic, model), nil
	case strings.HasPrefix(model, "openai/") || isOpenAIModel(model) || (cfg.OpenAIBaseURL != "" && model != ""):
		return apiOpenAI, wireName(apiOpenAI, model), nil
	}
	return "", "", fmt.Errorf("unknown model %q: use claude-*, gpt-*, anthropic/<model>, openai/<model> or script:PATH, or set OPENAI_BASE_URL for an OpenAI-compatible server", model)
}

// wireName is the name a call of model sends to api: the model string
// without the one prefix that routed it there ("anthropic/", "openai/"),
// whatever slashes the rest holds ("openai/meta-llama/Llama-3-8B" is
// sent as "meta-llama/Llama-3-8B"); a name routed by its own prefix
// ("claude-*", "gpt-*") or by OPENAI_BASE_URL is sent as written. Spool
// itself keys on the model as the thread names it (records, pricing,
// context windows, rate limits); only the provider sees this name.
func wireName(api, model string) string {
	return strings.TrimPrefix(strings.TrimSpace(model), api+"/")
}

// WireModel is the model name a thread on model sends to its provider
// (see wireName): model itself for a script or a model cfg cannot route.
func WireModel(model string, cfg Config) string {
	api, name, err := route(model, cfg)
	if err != nil || api == apiScript {
		return model
	}
	return name
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
	api, name, err := route(model, cfg)
	if err != nil {
		return nil, err
	}
	if api == apiScript {
		return NewScripted(name, cfg.ReadFile)
	}
	pricing, err := LoadPricing(cfg.PricingOverrides)
	if err != nil {
		return nil, err
	}
	if api == apiAnthropic {
		return NewAnthropic(strings.TrimSpace(model), cfg, pricing), nil
	}
	return NewOpenAI(strings.TrimSpace(model), cfg, pricing), nil
}

// Route names the API a model's calls go to ("anthropic", "openai",
// "script"; "" for an unknown model) and the API key they carry ("" for
// none), for rate limits that are per provider or per key.
func Route(model string, cfg Config) (api, key string) {
	api, _, err := route(model, cfg)
	switch {
	case err != nil:
		return "", ""
	case api == apiAnthropic:
		return "anthropic", cfg.AnthropicAPIKey
	case api == apiOpenAI:
		return "openai", cfg.OpenAIAPIKey
	}
	return "script", ""
}

// MissingKey names the environment variable with the API key that model's
// provider needs and cfg lacks: ANTHROPIC_API_KEY or OPENAI_API_KEY for
// the real Anthropic or OpenAI API, "" when the key is there or none is
// needed (a script; a server named by ANTHROPIC_BASE_URL or
// OPENAI_BASE_URL, such as a local vLLM or Ollama, may take none).
func MissingKey(model string, cfg Config) string {
	api, _, err := route(model, cfg)
	switch {
	case err != nil:
	case api == apiAnthropic && cfg.AnthropicAPIKey == "" && cfg.AnthropicBaseURL == "":
		return "ANTHROPIC_API_KEY"
	case api == apiOpenAI && cfg.OpenAIAPIKey == "" && cfg.OpenAIBaseURL == "":
		return "OPENAI_API_KEY"
	}
	return ""
}

// WarnKey is the key MissingKey names for model, for a process that does
// not run the thread (thread run and the API warn of it): "" as well when
// model names no model of the real provider (openai/mock-1, anthropic/x),
// which only a server named by OPENAI_BASE_URL or ANTHROPIC_BASE_URL where
// the workers run can serve, and such a server may take no key. A model
// of the real provider (gpt-4o, openai/gpt-4o, claude-*) goes to its
// default endpoint unless a base URL is set, and needs the key there.
func WarnKey(model string, cfg Config) string {
	key := MissingKey(model, cfg)
	if key == "" {
		return ""
	}
	api, name, _ := route(model, cfg)
	if (api == apiOpenAI && !isOpenAIModel(name)) || (api == apiAnthropic && !strings.HasPrefix(name, "claude-")) {
		return ""
	}
	return key
}

// Check reports whether a thread can run on model, before any thread is
// made: a script must load and parse (through cfg.ReadFile); any other
// model must have a price, as a worker refuses to call a model whose
// spend it could not charge. A priced model that cfg cannot route is
// accepted: the worker that runs it may set OPENAI_BASE_URL.
func Check(model string, cfg Config) error {
	api, _, routeErr := route(model, cfg)
	if api == apiScript {
		_, err := New(model, cfg)
		return err
	}
	pricing, err := LoadPricing(cfg.PricingOverrides)
	if err != nil {
		return err
	}
	if _, err := pricing.Lookup(model); err != nil {
		if routeErr != nil {
			return routeErr
		}
		return err
	}
	return nil
}

func isOpenAIModel(m string) bool {
	for _, p := range []string{"gpt-", "chatgpt-", "o1", "o3", "o4"} {
		if strings.HasPrefix(m, p) {
			return true
		}
	}
	return false
}
