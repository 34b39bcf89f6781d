package config

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// RateLimitsPath is where a project declares its fleet-wide model limits.
const RateLimitsPath = ".ai/config/agent/rate_limits.yaml"

// RateLimits is rate_limits.yaml (CLI.md "Rate limits"):
//
//	rate_limits:
//	  - match: "claude-*"              # glob over the resolved model id ("script:*" matches scripts)
//	    provider: anthropic            # optional: anthropic | openai | script
//	    key: 1a2b3c4d                  # optional: only calls with the API key of this fingerprint
//	    per_key: true                  # optional: a budget per API key (two keys, two budgets)
//	    requests_per_minute: 50
//	    input_tokens_per_minute: 40000
//	    output_tokens_per_minute: 8000
//	    concurrent: 20
//	    burst: 5                       # optional: requests admitted at once (default: a second's worth)
//	    output_estimate: 1000          # optional: output tokens reserved per call (default: max_tokens)
//
// Every rule that matches a call applies, and all must admit it.
type RateLimits struct {
	Rules []RateRule `yaml:"rate_limits"`
}

// RateRule is one limit over the calls it matches. A zero limit field is
// no limit of that kind.
type RateRule struct {
	Match                 string `yaml:"match" json:"match"`
	Provider              string `yaml:"provider" json:"provider,omitempty"`
	Key                   string `yaml:"key" json:"key,omitempty"`
	PerKey                bool   `yaml:"per_key" json:"per_key,omitempty"`
	RequestsPerMinute     int    `yaml:"requests_per_minute" json:"requests_per_minute,omitempty"`
	InputTokensPerMinute  int    `yaml:"input_tokens_per_minute" json:"input_tokens_per_minute,omitempty"`
	OutputTokensPerMinute int    `yaml:"output_tokens_per_minute" json:"output_tokens_per_minute,omitempty"`
	Concurrent            int    `yaml:"concurrent" json:"concurrent,omitempty"`
	Burst                 int    `yaml:"burst" json:"burst,omitempty"`
	OutputEstimate        int    `yaml:"output_estimate" json:"output_estimate,omitempty"`
	// ID names the rule's state in Redis: a digest of what it matches, so
	// every worker and project that declares the same rule shares one
	// budget (and a key's budget, with per_key, is its own).
	ID string `yaml:"-" json:"id,omitempty"`
	// KeyID is the API key fingerprint of a per_key budget (Match sets it
	// with ID); "" for a rule without per_key.
	KeyID string `yaml:"-" json:"key_id,omitempty"`
}

// MatchesModel reports whether the rule's glob matches the model id (its
// provider and key aside). In a model glob `*` matches any run of
// characters, slashes included (model ids are not paths: "script:*"
// matches script:scripts/demo.yaml, "openai/*" every model of an
// OpenAI-compatible gateway's namespace), `?` one character, and `[...]`
// a class as in path.Match; `\` quotes the next character.
func (r RateRule) MatchesModel(model string) bool {
	re, err := compiledGlob(r.Match)
	return err == nil && re.MatchString(model)
}

// globs holds the compiled model globs (glob → compiled): a worker
// matches every rule against a model on each activation, and the monitor
// for each waiting thread; the globs are the few the rate limits name.
var globs sync.Map

// compiled is a glob's regular expression, or why it has none.
type compiled struct {
	re  *regexp.Regexp
	err error
}

// compiledGlob is modelGlob, compiled once per glob.
func compiledGlob(glob string) (*regexp.Regexp, error) {
	if v, ok := globs.Load(glob); ok {
		c, _ := v.(compiled)
		return c.re, c.err
	}
	re, err := modelGlob(glob)
	globs.Store(glob, compiled{re, err})
	return re, err
}

// modelGlob compiles a model glob (RateRule.MatchesModel) to an anchored
// regular expression; a malformed class or a trailing backslash is an
// error.
func modelGlob(glob string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(glob); i++ {
		switch c := glob[i]; c {
		case '*':
			b.WriteString(".*")
		case '?':
			b.WriteString(".")
		case '\\':
			i++
			if i == len(glob) {
				return nil, errors.New("a trailing backslash quotes nothing")
			}
			b.WriteString(regexp.QuoteMeta(glob[i : i+1]))
		case '[':
			end := strings.IndexByte(glob[i+1:], ']')
			if end < 1 {
				return nil, errors.New("a character class [...] is not closed")
			}
			class := glob[i+1 : i+1+end]
			if class[0] == '!' || class[0] == '^' {
				class = "^" + class[1:]
			}
			if _, err := path.Match("["+class+"]", "x"); err != nil {
				return nil, fmt.Errorf("character class [%s]: %w", glob[i+1:i+1+end], err)
			}
			b.WriteString("[" + class + "]")
			i += end + 1
		default:
			b.WriteString(regexp.QuoteMeta(glob[i : i+1]))
		}
	}
	b.WriteString("$")
	return regexp.Compile(b.String())
}

// checkGlob refuses a rule (where) whose glob in field key is missing
// (hint says what it is) or does not compile (modelGlob).
func checkGlob(where, key, hint, glob string) error {
	if glob == "" {
		return fmt.Errorf("%s: %s is required%s", where, key, hint)
	}
	if _, err := compiledGlob(glob); err != nil {
		return fmt.Errorf("%s: %s %q: %w", where, key, glob, err)
	}
	return nil
}

// BudgetID is the ID of the rule's budget for calls with the API key of
// fingerprint keyID (which only a per_key rule tells apart).
func (r RateRule) BudgetID(keyID string) string {
	scope := r.Match + "|" + r.Provider + "|" + r.Key
	if r.PerKey {
		scope += "|" + keyID
	}
	sum := sha256.Sum256([]byte(scope))
	return hex.EncodeToString(sum[:6])
}

// Match returns the rules that apply to a call through provider with the
// API key of fingerprint keyID ("" for none), each with the ID of the
// budget the call counts against. models are the names of the call's
// model: as the thread names it, and as its provider is sent it
// ("anthropic/claude-sonnet-4-5", "claude-sonnet-4-5"); a rule that
// matches either applies, as pricing finds a model by either.
func (r *RateLimits) Match(models []string, provider, keyID string) []RateRule {
	if r == nil {
		return nil
	}
	var out []RateRule
	for _, rule := range r.Rules {
		if !slices.ContainsFunc(models, rule.MatchesModel) {
			continue
		}
		if rule.Provider != "" && rule.Provider != provider {
			continue
		}
		if rule.Key != "" && rule.Key != keyID {
			continue
		}
		rule.ID = rule.BudgetID(keyID)
		if rule.PerKey {
			rule.KeyID = keyID
		}
		out = append(out, rule)
	}
	return out
}

// LoadRateLimits reads rate_limits.yaml from the project fsys; a missing
// file limits nothing (nil).
func LoadRateLimits(fsys fs.FS) (*RateLimits, error) {
	return load(fsys, nil, ParseRateLimits, RateLimitsPath)
}

// ParseRateLimits parses rate_limits.yaml; an unknown key, a bad glob, a
// negative limit or a rule that limits nothing is an error naming the
// file and rule.
func ParseRateLimits(p string, data []byte) (*RateLimits, error) {
	var r RateLimits
	if err := decodeStrict(p, data, &r); err != nil {
		return nil, err
	}
	for i, rule := range r.Rules {
		where := fmt.Sprintf("%s: rate_limits[%d]", p, i)
		if err := checkGlob(where, "match", " (a glob over model ids)", rule.Match); err != nil {
			return nil, err
		}
		switch rule.Provider {
		case "", "anthropic", "openai", "script":
		default:
			return nil, fmt.Errorf("%s: provider %q is not anthropic, openai or script", where, rule.Provider)
		}
		for name, v := range map[string]int{"requests_per_minute": rule.RequestsPerMinute, "input_tokens_per_minute": rule.InputTokensPerMinute,
			"output_tokens_per_minute": rule.OutputTokensPerMinute, "concurrent": rule.Concurrent, "burst": rule.Burst, "output_estimate": rule.OutputEstimate} {
			if v < 0 {
				return nil, fmt.Errorf("%s: %s %d is negative", where, name, v)
			}
		}
		if rule.RequestsPerMinute == 0 && rule.InputTokensPerMinute == 0 && rule.OutputTokensPerMinute == 0 && rule.Concurrent == 0 {
			return nil, fmt.Errorf("%s: the rule limits nothing (set requests_per_minute, input_tokens_per_minute, output_tokens_per_minute or concurrent)", where)
		}
	}
	return &r, nil
}
