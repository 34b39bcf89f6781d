package admission

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/spool-run/spool/config"
	"github.com/spool-run/spool/graph"
	"github.com/spool-run/spool/thread"
)

// Paths are where a project keeps its admission policy, first found wins.
var Paths = []string{".ai/config/agent/admission.yaml", ".ai/config/admission.yaml"}

// Refusal codes of the policy.
const (
	// CodePolicyInvalid refuses a policy file that does not parse or
	// validate (`spool admission apply`: exit 1, nothing published).
	CodePolicyInvalid = "admission_policy_invalid"
	// CodeTenantUnknown refuses a root of a tenant the policy does not
	// list while its open_tenants is false.
	CodeTenantUnknown = "tenant_unknown"
	// CodeConcurrencyDeadlock refuses a blocking spawn whose key only its
	// own ancestors hold: it would wait for them while they wait for it.
	CodeConcurrencyDeadlock = "concurrency_deadlock"
	// CodeTenantBudgetExhausted, CodeTenantRateExceeded and
	// CodeTenantRunsExceeded refuse, under on_exhausted: refuse, a root
	// whose first admission meets its tenant's spend window,
	// starts_per_minute or runs_in_flight: the root is registered and
	// ends error with the code (HTTP 429).
	CodeTenantBudgetExhausted = "tenant_budget_exhausted"
	CodeTenantRateExceeded    = "tenant_rate_exceeded"
	CodeTenantRunsExceeded    = "tenant_runs_exceeded"
)

func init() {
	thread.AdmissionCodes[CodePolicyInvalid] = thread.AdmissionCode{Exit: 1, HTTP: 422}
	thread.AdmissionCodes[CodeTenantUnknown] = thread.AdmissionCode{Exit: 2, HTTP: 422}
	thread.AdmissionCodes[CodeConcurrencyDeadlock] = thread.AdmissionCode{Exit: 1, HTTP: 409}
	for _, c := range refusalCodes {
		thread.AdmissionCodes[c] = thread.AdmissionCode{Exit: 1, HTTP: 429}
	}
}

// refusalCodes are the codes of a refusal by the ceiling a root waits
// for under on_exhausted: wait.
var refusalCodes = map[string]string{
	WaitTenantBudget: CodeTenantBudgetExhausted,
	WaitTenantRate:   CodeTenantRateExceeded,
	WaitTenantRuns:   CodeTenantRunsExceeded,
}

// RefusalCode is the refusal code of ceiling (a wait reason:
// tenant_budget, tenant_rate, tenant_runs).
func RefusalCode(ceiling string) string {
	if c, ok := refusalCodes[ceiling]; ok {
		return c
	}
	return ceiling
}

// Durability values of grants.durability.
const (
	DurabilityReplica = "replica"
	DurabilityNone    = "none"
)

// On-exhausted values.
const (
	OnExhaustedWait   = "wait"
	OnExhaustedRefuse = "refuse"
)

// Policy is an admission policy: the file's contents, validated, with
// every default filled in. Its JSON is what `admission apply` publishes
// and `admission show --json` prints.
type Policy struct {
	Version        int                       `json:"version"`
	Idempotency    Idempotency               `json:"idempotency"`
	FairShare      FairShare                 `json:"fair_share"`
	Grants         Grants                    `json:"grants"`
	OpenTenants    bool                      `json:"open_tenants"`
	TenantDefaults TenantSettings            `json:"tenant_defaults"`
	Tenants        map[string]TenantSettings `json:"tenants"`
	Concurrency    []Rule                    `json:"concurrency"`
}

// Idempotency is the policy's idempotency section.
type Idempotency struct {
	Retention Duration `json:"retention"`
}

// FairShare is the policy's fair_share section.
type FairShare struct {
	Interval   Duration `json:"interval"`
	YieldAfter Duration `json:"yield_after"`
}

// Grants is the policy's grants section.
type Grants struct {
	TTL        Duration `json:"ttl"`
	Durability string   `json:"durability"`
}

// TenantSettings are the settings of tenant_defaults or of one tenant; a
// nil field (and an empty OnExhausted) is unset there.
type TenantSettings struct {
	Weight          *float64 `json:"weight,omitempty"`
	Priority        *int     `json:"priority,omitempty"`
	MaxRunning      *int     `json:"max_running,omitempty"`
	SpendPerDay     *float64 `json:"spend_per_day,omitempty"`
	SpendPerMonth   *float64 `json:"spend_per_month,omitempty"`
	StartsPerMinute *int     `json:"starts_per_minute,omitempty"`
	RunsInFlight    *int     `json:"runs_in_flight,omitempty"`
	OnExhausted     string   `json:"on_exhausted,omitempty"`
	SpendGrant      *float64 `json:"spend_grant,omitempty"`
}

// Rule is one concurrency rule: at most Max admitted activations per
// value of Key among the runs its globs match, per tenant.
type Rule struct {
	Name       string   `json:"name"`
	Directives []string `json:"directives,omitempty"`
	Graphs     []string `json:"graphs,omitempty"`
	Key        string   `json:"key"`
	Max        int      `json:"max"`
}

// Duration is a time.Duration whose JSON is its text ("1m30s").
type Duration time.Duration

// D is d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// MarshalJSON writes d as text.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads d from text.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := parseDuration(s)
	*d = Duration(v)
	return err
}

// Defaults of the policy file (CLI.md "Admission and tenants").
const (
	DefaultRetention  = 24 * time.Hour
	DefaultInterval   = time.Second
	DefaultYieldAfter = 60 * time.Second
	DefaultGrantTTL   = 60 * time.Second
	DefaultWeight     = 1.0
	DefaultSpendGrant = 0.10
)

// Error is a policy file's first problem: the file, the line, the key
// (a dotted path, "tenants.acme.weight", "concurrency[1].max") and what
// is wrong.
type Error struct {
	File string
	Line int
	Key  string
	Msg  string
}

func (e *Error) Error() string {
	if e.Key == "" {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s:%d: %s: %s", e.File, e.Line, e.Key, e.Msg)
}

// Load reads the project's policy file from fsys (the first of Paths);
// nil, "" when it has none.
func Load(fsys fs.FS) (*Policy, string, error) {
	for _, p := range Paths {
		data, err := fs.ReadFile(fsys, p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, p, fmt.Errorf("read %s: %w", p, err)
		}
		pol, err := Parse(p, data)
		return pol, p, err
	}
	return nil, "", nil
}

// Parse parses and validates a policy file named file. Any problem is an
// *Error: an unknown key, a value of the wrong type or out of range, a
// duplicate key or rule, a glob or key expression that does not parse.
func Parse(file string, data []byte) (*Policy, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{File: file, Line: 1, Msg: "the file is empty (version: 1 is required)"}
		}
		return nil, &Error{File: file, Line: yamlLine(err), Msg: yamlMessage(err)}
	}
	p := parser{file: file}
	pol := &Policy{Tenants: map[string]TenantSettings{}}
	if err := p.policy(doc.Content[0], pol); err != nil {
		return nil, err
	}
	pol.fillDefaults()
	if !p.yieldSet {
		pol.FairShare.YieldAfter = Duration(DefaultYieldAfter)
	}
	return pol, nil
}

// yamlLine is the line a yaml error names, else 1.
func yamlLine(err error) int {
	if m := regexp.MustCompile(`line (\d+)`).FindStringSubmatch(err.Error()); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n
	}
	return 1
}

// yamlMessage is a yaml error without its "yaml: line N:" prefix.
func yamlMessage(err error) string {
	s := strings.TrimPrefix(err.Error(), "yaml: ")
	return regexp.MustCompile(`^line \d+: `).ReplaceAllString(s, "")
}

// fillDefaults gives every unset section its default.
func (pol *Policy) fillDefaults() {
	if pol.Idempotency.Retention == 0 {
		pol.Idempotency.Retention = Duration(DefaultRetention)
	}
	if pol.FairShare.Interval == 0 {
		pol.FairShare.Interval = Duration(DefaultInterval)
	}
	if pol.Grants.TTL == 0 {
		pol.Grants.TTL = Duration(DefaultGrantTTL)
	}
	if pol.Grants.Durability == "" {
		pol.Grants.Durability = DurabilityReplica
	}
	if pol.Concurrency == nil {
		pol.Concurrency = []Rule{}
	}
}

// parser walks a policy document, naming file and line in its errors.
type parser struct {
	file     string
	yieldSet bool // fair_share.yield_after was given (0 is a value)
}

func (p *parser) errf(n *yaml.Node, key, format string, args ...any) error {
	return &Error{File: p.file, Line: n.Line, Key: key, Msg: fmt.Sprintf(format, args...)}
}

// fields calls f for each key/value pair of mapping n (at path key),
// refusing a node that is no mapping, a duplicate key and a key not in
// known.
func (p *parser) fields(n *yaml.Node, key string, known []string, f func(k string, v *yaml.Node) error) error {
	if n.Kind != yaml.MappingNode {
		if n.Tag == "!!null" {
			return nil
		}
		return p.errf(n, key, "want a mapping")
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := n.Content[i], n.Content[i+1]
		path := join(key, kn.Value)
		if seen[kn.Value] {
			return p.errf(kn, path, "duplicate key")
		}
		seen[kn.Value] = true
		if known != nil && !slices.Contains(known, kn.Value) {
			return p.errf(kn, path, "unknown key (known: %s)", strings.Join(known, ", "))
		}
		if err := f(kn.Value, vn); err != nil {
			return err
		}
	}
	return nil
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "." + b
}

func (p *parser) policy(n *yaml.Node, pol *Policy) error {
	known := []string{"version", "idempotency", "fair_share", "grants", "open_tenants", "tenant_defaults", "tenants", "concurrency"}
	pol.OpenTenants = true
	err := p.fields(n, "", known, func(k string, v *yaml.Node) error {
		switch k {
		case "version":
			ver, err := p.integer(v, k, 1, 1)
			pol.Version = ver
			return err
		case "idempotency":
			return p.fields(v, k, []string{"retention"}, func(_ string, v *yaml.Node) error {
				d, err := p.duration(v, "idempotency.retention", time.Minute, 30*24*time.Hour, false)
				pol.Idempotency.Retention = Duration(d)
				return err
			})
		case "fair_share":
			return p.fairShare(v, &pol.FairShare)
		case "grants":
			return p.grants(v, &pol.Grants)
		case "open_tenants":
			return p.boolean(v, k, &pol.OpenTenants)
		case "tenant_defaults":
			return p.settings(v, k, &pol.TenantDefaults)
		case "tenants":
			return p.tenants(v, pol.Tenants)
		}
		return p.rules(v, &pol.Concurrency)
	})
	if err != nil {
		return err
	}
	if pol.Version == 0 {
		return p.errf(n, "version", "required (version: 1)")
	}
	return nil
}

func (p *parser) fairShare(n *yaml.Node, fs *FairShare) error {
	return p.fields(n, "fair_share", []string{"interval", "yield_after"}, func(k string, v *yaml.Node) error {
		if k == "interval" {
			d, err := p.duration(v, "fair_share.interval", 100*time.Millisecond, time.Minute, false)
			fs.Interval = Duration(d)
			return err
		}
		d, err := p.duration(v, "fair_share.yield_after", 0, 365*24*time.Hour, true)
		fs.YieldAfter, p.yieldSet = Duration(d), true // 0 disables yielding
		return err
	})
}

func (p *parser) grants(n *yaml.Node, g *Grants) error {
	return p.fields(n, "grants", []string{"ttl", "durability"}, func(k string, v *yaml.Node) error {
		if k == "ttl" {
			d, err := p.duration(v, "grants.ttl", 5*time.Second, time.Hour, false)
			g.TTL = Duration(d)
			return err
		}
		s, err := p.choice(v, "grants.durability", DurabilityReplica, DurabilityNone)
		g.Durability = s
		return err
	})
}

// settingsKeys are the keys of a tenant's settings.
var settingsKeys = []string{"weight", "priority", "max_running", "spend_per_day", "spend_per_month", "starts_per_minute",
	"runs_in_flight", "on_exhausted", "spend_grant"}

func (p *parser) settings(n *yaml.Node, key string, s *TenantSettings) error {
	return p.fields(n, key, settingsKeys, func(k string, v *yaml.Node) error {
		path := key + "." + k
		var err error
		switch k {
		case "weight":
			s.Weight, err = p.floatPtr(v, path, 0.01, 1000)
		case "priority":
			s.Priority, err = p.intPtr(v, path, thread.MinPriority, thread.MaxPriority)
		case "max_running":
			s.MaxRunning, err = p.intPtr(v, path, 1, math.MaxInt32)
		case "spend_per_day":
			s.SpendPerDay, err = p.floatPtr(v, path, 0, math.MaxFloat64)
		case "spend_per_month":
			s.SpendPerMonth, err = p.floatPtr(v, path, 0, math.MaxFloat64)
		case "starts_per_minute":
			s.StartsPerMinute, err = p.intPtr(v, path, 1, math.MaxInt32)
		case "runs_in_flight":
			s.RunsInFlight, err = p.intPtr(v, path, 1, math.MaxInt32)
		case "on_exhausted":
			s.OnExhausted, err = p.choice(v, path, OnExhaustedWait, OnExhaustedRefuse)
		case "spend_grant":
			s.SpendGrant, err = p.floatPtr(v, path, 0.000001, math.MaxFloat64)
		}
		return err
	})
}

func (p *parser) tenants(n *yaml.Node, out map[string]TenantSettings) error {
	return p.fields(n, "tenants", nil, func(k string, v *yaml.Node) error {
		if err := thread.CheckTenant(k); err != nil {
			return p.errf(v, "tenants."+k, "not a tenant name (1 to 63 of a-z, 0-9, '.', '_', '-', starting with a letter or digit)")
		}
		var s TenantSettings
		if err := p.settings(v, "tenants."+k, &s); err != nil {
			return err
		}
		out[k] = s
		return nil
	})
}

var ruleName = regexp.MustCompile(`^[a-z0-9_-]{1,64}$`)

// keyScopes are the names a key expression may start a path with (3.2).
var keyScopes = []string{"inputs", "tenant", "name", "kind", "parent", "root"}

func (p *parser) rules(n *yaml.Node, out *[]Rule) error {
	if n.Kind != yaml.SequenceNode {
		if n.Tag == "!!null" {
			return nil
		}
		return p.errf(n, "concurrency", "want a list of rules")
	}
	names := map[string]bool{}
	for i, rn := range n.Content {
		key := fmt.Sprintf("concurrency[%d]", i)
		var r Rule
		if err := p.rule(rn, key, &r); err != nil {
			return err
		}
		if names[r.Name] {
			return p.errf(rn, key+".name", "duplicate rule %q", r.Name)
		}
		names[r.Name] = true
		*out = append(*out, r)
	}
	return nil
}

func (p *parser) rule(n *yaml.Node, key string, r *Rule) error {
	err := p.fields(n, key, []string{"name", "directives", "graphs", "key", "max"}, func(k string, v *yaml.Node) error {
		path := key + "." + k
		var err error
		switch k {
		case "name":
			if r.Name, err = p.str(v, path); err == nil && !ruleName.MatchString(r.Name) {
				err = p.errf(v, path, "%q: want 1 to 64 of a-z, 0-9, '_', '-'", r.Name)
			}
		case "directives":
			r.Directives, err = p.globs(v, path)
		case "graphs":
			r.Graphs, err = p.globs(v, path)
		case "key":
			if r.Key, err = p.str(v, path); err == nil {
				err = p.keyExpr(v, path, r.Key)
			}
		case "max":
			r.Max, err = p.integer(v, path, 1, 100000)
		}
		return err
	})
	if err != nil {
		return err
	}
	for _, req := range []struct {
		ok   bool
		what string
	}{{r.Name != "", "name"}, {r.Key != "", "key"}, {r.Max != 0, "max"}, {len(r.Directives)+len(r.Graphs) > 0, "directives or graphs"}} {
		if !req.ok {
			return p.errf(n, key, "%s is required", req.what)
		}
	}
	return nil
}

// keyExpr refuses a key expression that does not parse or names a scope
// other than keyScopes.
func (p *parser) keyExpr(n *yaml.Node, key, expr string) error {
	roots, err := graph.References(expr)
	if err != nil {
		return p.errf(n, key, "%v", err)
	}
	for _, r := range roots {
		if !slices.Contains(keyScopes, r) {
			return p.errf(n, key, "${%s...}: a key reads only %s", r, strings.Join(keyScopes, ", "))
		}
	}
	return nil
}

func (p *parser) globs(n *yaml.Node, key string) ([]string, error) {
	var items []*yaml.Node
	switch n.Kind {
	case yaml.ScalarNode:
		items = []*yaml.Node{n}
	case yaml.SequenceNode:
		items = n.Content
	default:
		return nil, p.errf(n, key, "want a glob or a list of globs")
	}
	var out []string
	for _, it := range items {
		g, err := p.str(it, key)
		if err != nil {
			return nil, err
		}
		if g == "" {
			return nil, p.errf(it, key, "an empty glob")
		}
		if err := config.CheckGlob(g); err != nil {
			return nil, p.errf(it, key, "glob %q: %v", g, err)
		}
		out = append(out, g)
	}
	return out, nil
}

func (p *parser) str(n *yaml.Node, key string) (string, error) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return "", p.errf(n, key, "want a string")
	}
	return n.Value, nil
}

func (p *parser) choice(n *yaml.Node, key string, choices ...string) (string, error) {
	s, err := p.str(n, key)
	if err != nil {
		return "", err
	}
	if !slices.Contains(choices, s) {
		return "", p.errf(n, key, "%q: want %s", s, strings.Join(choices, " or "))
	}
	return s, nil
}

func (p *parser) boolean(n *yaml.Node, key string, out *bool) error {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
		return p.errf(n, key, "want true or false")
	}
	*out = n.Value == "true"
	return nil
}

func (p *parser) number(n *yaml.Node, key string, lo, hi float64) (float64, error) {
	if n.Kind != yaml.ScalarNode || (n.Tag != "!!int" && n.Tag != "!!float") {
		return 0, p.errf(n, key, "want a number")
	}
	f, err := strconv.ParseFloat(n.Value, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, p.errf(n, key, "%q is not a number", n.Value)
	}
	if f < lo || f > hi {
		return 0, p.errf(n, key, "%s is outside %s", n.Value, bounds(lo, hi))
	}
	return f, nil
}

func bounds(lo, hi float64) string {
	if hi >= math.MaxInt32 {
		return fmt.Sprintf("≥ %g", lo)
	}
	return fmt.Sprintf("%g .. %g", lo, hi)
}

func (p *parser) integer(n *yaml.Node, key string, lo, hi int) (int, error) {
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
		return 0, p.errf(n, key, "want a whole number")
	}
	v, err := strconv.Atoi(n.Value)
	if err != nil {
		return 0, p.errf(n, key, "%q is not a whole number", n.Value)
	}
	if v < lo || v > hi {
		return 0, p.errf(n, key, "%d is outside %s", v, bounds(float64(lo), float64(hi)))
	}
	return v, nil
}

func (p *parser) floatPtr(n *yaml.Node, key string, lo, hi float64) (*float64, error) {
	f, err := p.number(n, key, lo, hi)
	return &f, err
}

func (p *parser) intPtr(n *yaml.Node, key string, lo, hi int) (*int, error) {
	v, err := p.integer(n, key, lo, hi)
	return &v, err
}

// duration reads a duration ("90s", "24h", "30d") within lo .. hi; zero
// is allowed only when zeroOK.
func (p *parser) duration(n *yaml.Node, key string, lo, hi time.Duration, zeroOK bool) (time.Duration, error) {
	s, err := p.str(n, key)
	if err != nil {
		return 0, err
	}
	d, err := parseDuration(s)
	if err != nil {
		return 0, p.errf(n, key, "%v", err)
	}
	if d == 0 && zeroOK {
		return 0, nil
	}
	if d < lo || d > hi {
		return 0, p.errf(n, key, "%s is outside %s .. %s", s, fmtDuration(lo), fmtDuration(hi))
	}
	return d, nil
}

// parseDuration is time.ParseDuration, plus whole days ("30d") and a bare 0.
func parseDuration(s string) (time.Duration, error) {
	if s == "0" {
		return 0, nil
	}
	if d, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(d)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("%q is not a duration (e.g. 90s, 24h, 30d)", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q is not a duration (e.g. 90s, 24h, 30d)", s)
	}
	return d, nil
}

func fmtDuration(d time.Duration) string {
	if d >= 24*time.Hour && d%(24*time.Hour) == 0 {
		return strconv.Itoa(int(d/(24*time.Hour))) + "d"
	}
	return strings.TrimSuffix(strings.TrimSuffix(d.String(), "0s"), "0m")
}

// Digest is the policy's SHA-256 over its JSON: two files that say the
// same (comments, order, defaults spelled out or not) have one digest.
func (pol *Policy) Digest() string {
	b, _ := json.Marshal(pol)
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// YieldAfter is how long an activation runs before it yields when its
// tenant is over its share (0: never).
func (pol *Policy) YieldAfter() time.Duration { return pol.FairShare.YieldAfter.D() }

// Listed reports whether tenant has an entry of its own.
func (pol *Policy) Listed(tenant string) bool {
	_, ok := pol.Tenants[tenant]
	return ok
}

// Admits reports whether the policy lets tenant start runs:
// open_tenants, or a listed tenant.
func (pol *Policy) Admits(tenant string) bool { return pol.OpenTenants || pol.Listed(tenant) }
