package admission

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spool-run/spool/config"
	"github.com/spool-run/spool/graph"
	"github.com/spool-run/spool/internal/spelling"
	"github.com/spool-run/spool/thread"
)

// Fields are the settings of a tenant, by their names in the policy file,
// in `tenant set` and in overrides.
var Fields = settingsKeys

// UnknownSetting is the error's words for f, which is no tenant setting:
// the setting it likely misspells and the ones there are ("unknown
// setting; did you mean max_running? (known: weight, ...)"); more names
// what else the caller takes (the API's "clear").
func UnknownSetting(f string, more ...string) string {
	known := strings.Join(append(slices.Clone(Fields), more...), ", ")
	if near := spelling.Nearest(f, Fields); near != "" {
		return "unknown setting; did you mean " + near + "? (known: " + known + ")"
	}
	return "unknown setting (known: " + known + ")"
}

// Sources of a tenant's setting (`tenant show` names them).
const (
	SourceOverride = "override"        // spool tenant set
	SourceTenant   = "tenant"          // the tenant's entry in the policy
	SourceDefaults = "tenant_defaults" // the policy's tenant_defaults
	SourceBuiltin  = "default"         // neither: the built-in default
)

// Settings are one tenant's settings in force: each field its override,
// else its entry's, else tenant_defaults', else the built-in default.
// A zero limit is unset.
type Settings struct {
	Weight          float64
	Priority        int
	MaxRunning      int
	SpendPerDay     *float64
	SpendPerMonth   *float64
	StartsPerMinute int
	RunsInFlight    int
	OnExhausted     string
	SpendGrant      float64
	// Source names where each field (Fields) came from.
	Source map[string]string
}

// Effective is tenant's settings under pol with overrides (field → value,
// as `tenant set` stores them; a value that does not parse is ignored).
// A nil pol gives the built-in defaults and the overrides.
func Effective(pol *Policy, tenant string, overrides map[string]string) Settings {
	var layers []layer
	if pol != nil {
		if ts, ok := pol.Tenants[tenant]; ok {
			layers = append(layers, layer{SourceTenant, ts})
		}
		layers = append(layers, layer{SourceDefaults, pol.TenantDefaults})
	}
	if len(overrides) > 0 {
		if o, err := ParseOverrides(overrides); err == nil {
			layers = append([]layer{{SourceOverride, o}}, layers...)
		}
	}
	s := Settings{Weight: DefaultWeight, Priority: thread.DefaultPriority, OnExhausted: OnExhaustedWait,
		SpendGrant: DefaultSpendGrant, Source: map[string]string{}}
	for _, f := range Fields {
		s.Source[f] = SourceBuiltin
	}
	for i := len(layers) - 1; i >= 0; i-- {
		s.apply(layers[i])
	}
	return s
}

// layer is one source of settings.
type layer struct {
	source string
	ts     TenantSettings
}

func (s *Settings) apply(l layer) {
	set := func(f string, ok bool) {
		if ok {
			s.Source[f] = l.source
		}
	}
	ts := l.ts
	if set("weight", ts.Weight != nil); ts.Weight != nil {
		s.Weight = *ts.Weight
	}
	if set("priority", ts.Priority != nil); ts.Priority != nil {
		s.Priority = *ts.Priority
	}
	if set("max_running", ts.MaxRunning != nil); ts.MaxRunning != nil {
		s.MaxRunning = *ts.MaxRunning
	}
	if set("spend_per_day", ts.SpendPerDay != nil); ts.SpendPerDay != nil {
		s.SpendPerDay = ts.SpendPerDay
	}
	if set("spend_per_month", ts.SpendPerMonth != nil); ts.SpendPerMonth != nil {
		s.SpendPerMonth = ts.SpendPerMonth
	}
	if set("starts_per_minute", ts.StartsPerMinute != nil); ts.StartsPerMinute != nil {
		s.StartsPerMinute = *ts.StartsPerMinute
	}
	if set("runs_in_flight", ts.RunsInFlight != nil); ts.RunsInFlight != nil {
		s.RunsInFlight = *ts.RunsInFlight
	}
	if set("on_exhausted", ts.OnExhausted != ""); ts.OnExhausted != "" {
		s.OnExhausted = ts.OnExhausted
	}
	if set("spend_grant", ts.SpendGrant != nil); ts.SpendGrant != nil {
		s.SpendGrant = *ts.SpendGrant
	}
}

// ParseOverrides reads overrides (field → value text) as settings,
// checking each value as the policy file's parser does; an unknown field
// or a bad value is an error naming it.
func ParseOverrides(m map[string]string) (TenantSettings, error) {
	var ts TenantSettings
	for f, v := range m {
		if err := ts.set(f, v); err != nil {
			return ts, err
		}
	}
	return ts, nil
}

// set sets field f of ts from its text v.
func (ts *TenantSettings) set(f, v string) error {
	var err error
	switch f {
	case "weight":
		ts.Weight, err = settingNumber(f, v, 0.01, 1000)
	case "priority":
		ts.Priority, err = settingWhole(f, v, thread.MinPriority, thread.MaxPriority)
	case "max_running":
		ts.MaxRunning, err = settingWhole(f, v, 1, math.MaxInt32)
	case "spend_per_day":
		ts.SpendPerDay, err = settingNumber(f, v, 0, math.MaxFloat64)
	case "spend_per_month":
		ts.SpendPerMonth, err = settingNumber(f, v, 0, math.MaxFloat64)
	case "starts_per_minute":
		ts.StartsPerMinute, err = settingWhole(f, v, 1, math.MaxInt32)
	case "runs_in_flight":
		ts.RunsInFlight, err = settingWhole(f, v, 1, math.MaxInt32)
	case "on_exhausted":
		if v != OnExhaustedWait && v != OnExhaustedRefuse {
			return badSetting(f, v, "wait or refuse")
		}
		ts.OnExhausted = v
	case "spend_grant":
		ts.SpendGrant, err = settingNumber(f, v, 0.000001, math.MaxFloat64)
	default:
		return fmt.Errorf("%q: %s", f, UnknownSetting(f))
	}
	return err
}

// settingNumber reads setting f's text v as a number from lo to hi.
func settingNumber(f, v string, lo, hi float64) (*float64, error) {
	x, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(x) || x < lo || x > hi {
		return nil, badSetting(f, v, "a number, "+bounds(lo, hi))
	}
	return &x, nil
}

// settingWhole reads setting f's text v as a whole number from lo to hi.
func settingWhole(f, v string, lo, hi int) (*int, error) {
	x, err := strconv.Atoi(v)
	if err != nil || x < lo || x > hi {
		return nil, badSetting(f, v, "a whole number, "+bounds(float64(lo), float64(hi)))
	}
	return &x, nil
}

// badSetting is the error of setting f's text v, which is not what it
// wants.
func badSetting(f, v, want string) error { return fmt.Errorf("%s %q: want %s", f, v, want) }

// conf is what the tenant scripts read of a tenant's published settings
// (admission.lua's conf hash), as JSON: its ceilings (max_running,
// runs_in_flight, starts_per_minute, spend_per_day and spend_per_month
// in USD, as text so no digit is lost), on_exhausted and spend_grant,
// the grant TTL, how long a share stays fresh, and each rule's max.
func (pol *Policy) conf(tenant string) string {
	s := Effective(pol, tenant, nil)
	m := map[string]any{"grant_ttl": pol.Grants.TTL.D().Milliseconds(), "share_ttl": pol.shareTTL().Milliseconds(),
		"on_exhausted": s.OnExhausted, "spend_grant": strconv.FormatFloat(s.SpendGrant, 'f', -1, 64)}
	for f, v := range map[string]int{"max_running": s.MaxRunning, "runs_in_flight": s.RunsInFlight, "starts_per_minute": s.StartsPerMinute} {
		if v > 0 {
			m[f] = v
		}
	}
	for f, v := range map[string]*float64{"spend_per_day": s.SpendPerDay, "spend_per_month": s.SpendPerMonth} {
		if v != nil {
			m[f] = strconv.FormatFloat(*v, 'f', -1, 64)
		}
	}
	for _, r := range pol.Concurrency {
		m["rule:"+r.Name] = r.Max
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// shareTTL is how long a share the balancer wrote holds: three of its
// periods, at least 3 s; after that a tenant takes its provisional share
// (the balancer has stopped).
func (pol *Policy) shareTTL() time.Duration {
	return max(3*pol.FairShare.Interval.D(), 3*time.Second)
}

// RunFacts are what the concurrency rules read of a run (3.2): its kind
// (thread or graph), directive or graph name, validated inputs, tenant,
// parent ("" for a root) and root.
type RunFacts struct {
	Kind   string
	Name   string
	Inputs map[string]any
	Tenant string
	Parent string
	Root   string
}

// Matches reports whether rule r applies to run: a glob of its
// directives (for a thread) or of its graphs (for a graph run) matches
// the run's name.
func (r Rule) Matches(run RunFacts) bool {
	globs := r.Directives
	if run.Kind == "graph" {
		globs = r.Graphs
	}
	for _, g := range globs {
		if config.GlobMatch(g, run.Name) {
			return true
		}
	}
	return false
}

// Key is a run's value of one rule, as its record keeps it.
type Key struct {
	Rule  string `json:"rule"`
	Value string `json:"value"`
}

// Keys computes run's concurrency keys under pol: every matching rule's
// key expression interpolated over the run (a value that resolves to
// nothing is ""). Computed once, at registration.
func (pol *Policy) Keys(run RunFacts) []Key {
	if pol == nil {
		return nil
	}
	var out []Key
	scope := map[string]any{"inputs": run.Inputs, "tenant": run.Tenant, "name": run.Name, "kind": run.Kind,
		"parent": run.Parent, "root": run.Root}
	if run.Inputs == nil {
		scope["inputs"] = map[string]any{}
	}
	for _, r := range pol.Concurrency {
		if !r.Matches(run) {
			continue
		}
		v, err := graph.String(r.Key, scope)
		if err != nil {
			v = "" // a missing part: the run shares the key of runs that lack it
		}
		out = append(out, Key{Rule: r.Name, Value: v})
	}
	return out
}

// maxKeyValue is the longest value kept in Redis as it is.
const maxKeyValue = 128

// RedisKey is key as the tenant's state names it, RULE=VALUE, the value
// replaced by sha256:<hex> when longer than 128 bytes or holding a
// character outside [A-Za-z0-9._:/@-].
func RedisKey(rule, value string) string {
	if len(value) > maxKeyValue || !plainValue(value) {
		sum := sha256.Sum256([]byte(value))
		value = "sha256:" + hex.EncodeToString(sum[:])
	}
	return rule + "=" + value
}

func plainValue(v string) bool {
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("._:/@-", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// RuleMax is the max of the policy's rule name; 0 when it has none.
func (pol *Policy) RuleMax(name string) int {
	if pol == nil {
		return 0
	}
	for _, r := range pol.Concurrency {
		if r.Name == name {
			return r.Max
		}
	}
	return 0
}
