package provider

import (
	_ "embed"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"

	"gopkg.in/yaml.v3"
)

// ErrUnknownModel is returned (wrapped, naming the model) when a model has
// no price: neither in the embedded table nor in the project's overrides.
var ErrUnknownModel = errors.New("unknown model")

//go:embed pricing.yaml
var builtinPricing []byte

// Price is one model's entry: USD per million tokens and the context window.
type Price struct {
	InputPerMTok      float64 `yaml:"input_per_mtok"`
	OutputPerMTok     float64 `yaml:"output_per_mtok"`
	CacheReadPerMTok  float64 `yaml:"cache_read_per_mtok"`  // defaults to InputPerMTok
	CacheWritePerMTok float64 `yaml:"cache_write_per_mtok"` // defaults to InputPerMTok
	ContextWindow     int     `yaml:"context_window"`       // 0 = unknown
}

// Cost prices u in USD.
func (p Price) Cost(u Usage) float64 {
	return (float64(u.InputTokens)*p.InputPerMTok +
		float64(u.OutputTokens)*p.OutputPerMTok +
		float64(u.CacheReadTokens)*p.CacheReadPerMTok +
		float64(u.CacheWriteTokens)*p.CacheWritePerMTok) / 1e6
}

// Pricing is a model → Price table. Lookup order for a model name: the exact
// key; the name without an "anthropic/" or "openai/" prefix; the name without
// a date ("-20250929", "-2024-08-06") or "-latest" suffix; then the longest
// matching "prefix*" glob key ("*" alone is a catch-all). Safe for
// concurrent use (read-only after LoadPricing).
type Pricing struct {
	exact map[string]Price
	globs []glob // longest prefix first
}

type glob struct {
	prefix string
	price  Price
}

type pricingFile struct {
	Models map[string]rawPrice `yaml:"models"`
}

type rawPrice struct {
	Input         *float64 `yaml:"input_per_mtok"`
	Output        *float64 `yaml:"output_per_mtok"`
	CacheRead     *float64 `yaml:"cache_read_per_mtok"`
	CacheWrite    *float64 `yaml:"cache_write_per_mtok"`
	ContextWindow int      `yaml:"context_window"`
}

var builtinTable = sync.OnceValues(func() (map[string]Price, error) {
	return parsePricing(builtinPricing, "embedded pricing.yaml")
})

// LoadPricing returns the embedded table with overrides applied. overrides
// is the content of .ai/config/agent/pricing.yaml (nil or empty for none),
// same format as the embedded pricing.yaml; an override entry replaces the
// built-in entry of the same key. Every entry must give input_per_mtok and
// output_per_mtok explicitly (0 is allowed when written).
func LoadPricing(overrides []byte) (*Pricing, error) {
	base, err := builtinTable()
	if err != nil {
		return nil, err
	}
	all := make(map[string]Price, len(base))
	for k, v := range base {
		all[k] = v
	}
	if len(strings.TrimSpace(string(overrides))) > 0 {
		over, err := parsePricing(overrides, "pricing overrides")
		if err != nil {
			return nil, err
		}
		for k, v := range over {
			all[k] = v
		}
	}
	p := &Pricing{exact: map[string]Price{}}
	for k, v := range all {
		if prefix, ok := strings.CutSuffix(k, "*"); ok {
			p.globs = append(p.globs, glob{prefix: prefix, price: v})
		} else {
			p.exact[k] = v
		}
	}
	sort.Slice(p.globs, func(i, j int) bool { return len(p.globs[i].prefix) > len(p.globs[j].prefix) })
	return p, nil
}

func parsePricing(data []byte, name string) (map[string]Price, error) {
	var f pricingFile
	if err := yaml.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("parse %s: %w", name, err)
	}
	out := make(map[string]Price, len(f.Models))
	for k, r := range f.Models {
		if k == "" || strings.Contains(strings.TrimSuffix(k, "*"), "*") {
			return nil, fmt.Errorf("parse %s: model key %q: only a trailing * glob is allowed", name, k)
		}
		if r.Input == nil || r.Output == nil {
			return nil, fmt.Errorf("parse %s: model %q: input_per_mtok and output_per_mtok are required", name, k)
		}
		p := Price{InputPerMTok: *r.Input, OutputPerMTok: *r.Output, CacheReadPerMTok: *r.Input, CacheWritePerMTok: *r.Input, ContextWindow: r.ContextWindow}
		if r.CacheRead != nil {
			p.CacheReadPerMTok = *r.CacheRead
		}
		if r.CacheWrite != nil {
			p.CacheWritePerMTok = *r.CacheWrite
		}
		if p.InputPerMTok < 0 || p.OutputPerMTok < 0 || p.CacheReadPerMTok < 0 || p.CacheWritePerMTok < 0 || p.ContextWindow < 0 {
			return nil, fmt.Errorf("parse %s: model %q: prices and context_window must not be negative", name, k)
		}
		out[k] = p
	}
	return out, nil
}

var dateSuffix = regexp.MustCompile(`-(\d{8}|\d{4}-\d{2}-\d{2}|latest)$`)

// Lookup finds model's price; an unknown model is ErrUnknownModel.
func (p *Pricing) Lookup(model string) (Price, error) {
	cands := []string{model}
	for _, pre := range []string{"anthropic/", "openai/"} {
		if m, ok := strings.CutPrefix(model, pre); ok {
			cands = append(cands, m)
		}
	}
	for _, c := range cands {
		if d := dateSuffix.ReplaceAllString(c, ""); d != c {
			cands = append(cands, d)
		}
	}
	for _, c := range cands {
		if pr, ok := p.exact[c]; ok {
			return pr, nil
		}
	}
	for _, g := range p.globs {
		for _, c := range cands {
			if strings.HasPrefix(c, g.prefix) {
				return g.price, nil
			}
		}
	}
	return Price{}, fmt.Errorf("%w %q: add it to .ai/config/agent/pricing.yaml", ErrUnknownModel, model)
}

// Cost prices u for model in USD.
func (p *Pricing) Cost(model string, u Usage) (float64, error) {
	pr, err := p.Lookup(model)
	if err != nil {
		return 0, err
	}
	return pr.Cost(u), nil
}

// ContextWindow is model's context window, 0 when unknown.
func (p *Pricing) ContextWindow(model string) int {
	pr, err := p.Lookup(model)
	if err != nil {
		return 0
	}
	return pr.ContextWindow
}
