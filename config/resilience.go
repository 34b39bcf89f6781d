package config

import (
	"fmt"
	"io/fs"
	"math"
	"time"

	"github.com/spool-run/spool/thread"
)

// Child policy actions.
const (
	ChildCascadeCancel = "cascade_cancel"
	ChildAllow         = "allow"
)

// RetryPolicy is how failed model calls are retried.
type RetryPolicy struct {
	// MaxRetries is how many retries follow the first failure. Default 3.
	MaxRetries int
	// Base of the exponential backoff, in seconds: the n-th retry waits
	// Base^n seconds. Default 2.
	Base float64
	// Max caps one backoff delay. Default 120 s.
	Max time.Duration
}

// DefaultRetryPolicy is the reference retry policy.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{MaxRetries: 3, Base: 2, Max: 120 * time.Second}
}

// Delay is the backoff before retry number attempt (1-based):
// min(Base^attempt seconds, Max). Base 2 gives 2 s, 4 s, 8 s, ...
func (p RetryPolicy) Delay(attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	secs := math.Pow(p.Base, float64(attempt))
	if p.Max > 0 && (math.IsInf(secs, 0) || secs > p.Max.Seconds()) {
		return p.Max
	}
	return time.Duration(secs * float64(time.Second))
}

// ChildPolicy is what happens to running children when their parent ends.
// Each field is ChildCascadeCancel or ChildAllow.
type ChildPolicy struct {
	OnParentCancel   string // default cascade_cancel
	OnParentError    string // default cascade_cancel
	OnParentComplete string // default allow
}

// DefaultChildPolicy is the reference child policy.
func DefaultChildPolicy() ChildPolicy {
	return ChildPolicy{OnParentCancel: ChildCascadeCancel, OnParentError: ChildCascadeCancel, OnParentComplete: ChildAllow}
}

// Resilience is resilience.yaml.
type Resilience struct {
	// Limits are the limit defaults, the first layer of thread.MergeLimits.
	// Default thread.DefaultLimits().
	Limits   thread.Resolved
	Retry    RetryPolicy
	Children ChildPolicy
}

// DefaultResilience is what a project without resilience.yaml gets.
func DefaultResilience() Resilience {
	return Resilience{Limits: thread.DefaultLimits(), Retry: DefaultRetryPolicy(), Children: DefaultChildPolicy()}
}

// LoadResilience reads resilience.yaml from the project fsys (see the
// package doc for locations); a missing file gives DefaultResilience.
func LoadResilience(fsys fs.FS) (Resilience, error) {
	return load(fsys, DefaultResilience(), ParseResilience, agentPaths("resilience")...)
}

// ParseResilience parses resilience.yaml; path names the file in errors.
// Keys accepted, at the top level or under "resilience:" (values missing
// from the file keep their defaults):
//
//	limits: {defaults: {...}} | limits: {...} | defaults: {...} | limit_defaults: {...}
//	    turns, tokens, spend, spawns, depth, duration | duration_seconds
//	retry:
//	    max_retries
//	    base, max | max_delay                  (flat)
//	    backoff: {base, max | max_delay}
//	    policies: {<default_policy>|exponential|transient|default: {base, max | max_delay}}
//	child_policy | children: on_parent_cancel, on_parent_error, on_parent_complete
//	    (cascade_cancel | cascade | allow)
func ParseResilience(path string, data []byte) (Resilience, error) {
	r := DefaultResilience()
	root, err := parseTree(path, data, "resilience")
	if err != nil {
		return r, err
	}
	if err := readLimitDefaults(root, &r.Limits); err != nil {
		return r, err
	}
	if err := readRetry(root, &r.Retry); err != nil {
		return r, err
	}
	if err := readChildPolicy(root, &r.Children); err != nil {
		return r, err
	}
	return r, nil
}

// readLimitDefaults applies the limit defaults to dst, from the first of
// the keys that may hold them.
func readLimitDefaults(root tree, dst *thread.Resolved) error {
	lim, key, err := root.firstSub("limits.defaults", "limits", "defaults", "limit_defaults", "default_limits")
	if err != nil || key == "" {
		return err
	}
	return readLimits(lim, dst)
}

// readRetry reads retry: its max_retries, then the backoff's base and max
// from each mapping that may hold them (see retryBackoffs), a later one
// over an earlier.
func readRetry(root tree, dst *RetryPolicy) error {
	retry, _, err := root.sub("retry")
	if err != nil {
		return err
	}
	if err := retry.read(integer(&dst.MaxRetries, notNegative, "retry.max_retries: %d is negative", "max_retries")); err != nil {
		return err
	}
	backoffs, err := retryBackoffs(retry)
	if err != nil {
		return err
	}
	for _, b := range backoffs {
		if err := b.read(
			number(&dst.Base, func(f float64) bool { return f >= 1 }, "retry base %g is below 1", "base"),
			seconds(&dst.Max, notNegative, "retry max %g is negative", "max", "max_delay"),
		); err != nil {
			return err
		}
	}
	return nil
}

// retryBackoffs returns the mappings of retry that may hold the backoff,
// in the order they are read: retry itself (flat), its backoff:, and of
// its policies: the first of default_policy's, exponential, transient and
// default.
func retryBackoffs(retry tree) ([]tree, error) {
	backoffs := []tree{retry}
	if b, ok, err := retry.sub("backoff"); err != nil {
		return nil, err
	} else if ok {
		backoffs = append(backoffs, b)
	}
	pol, ok, err := retry.sub("policies")
	if err != nil || !ok {
		return backoffs, err
	}
	names := []string{"exponential", "transient", "default"}
	if dp, ok, _ := retry.str("default_policy"); ok {
		names = append([]string{dp}, names...)
	}
	p, key, err := pol.firstSub(names...)
	if err != nil {
		return nil, err
	}
	if key != "" {
		backoffs = append(backoffs, p)
	}
	return backoffs, nil
}

// childActions are the spellings of the child policy actions.
var childActions = map[string]string{
	ChildCascadeCancel: ChildCascadeCancel,
	"cascade":          ChildCascadeCancel,
	ChildAllow:         ChildAllow,
}

// readChildPolicy reads the child policy into dst, from child_policy or,
// without it, children.
func readChildPolicy(root tree, dst *ChildPolicy) error {
	cp, k, err := root.firstSub("child_policy", "children")
	if err != nil || k == "" {
		return err
	}
	for key, field := range map[string]*string{
		"on_parent_cancel":   &dst.OnParentCancel,
		"on_parent_error":    &dst.OnParentError,
		"on_parent_complete": &dst.OnParentComplete,
	} {
		s, ok, err := cp.str(key)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		action, ok := childActions[s]
		if !ok {
			return fmt.Errorf("%s: %s.%s: %q is not cascade_cancel or allow", root.path, k, key, s)
		}
		*field = action
	}
	return nil
}

// readLimits applies the limits t names to dst, each value held to the
// one rule for limits (thread.Limits.SetLimit).
func readLimits(t tree, dst *thread.Resolved) error {
	var l thread.Limits
	// Each limit's name, then the other keys that spell it.
	for _, keys := range [][]string{{"turns"}, {"tokens"}, {"spawns"}, {"depth"}, {"spend"}, {"duration", "duration_seconds"}} {
		for _, k := range keys {
			v, ok := t.get(k)
			if !ok || v == nil {
				continue
			}
			if err := l.SetLimit(keys[0], v); err != nil {
				return fmt.Errorf("%s: %w", t.path, err)
			}
			break
		}
	}
	*dst = dst.Apply(l)
	return nil
}

// ResolveLimits resolves a thread's limits as the spec's step 4 with these
// defaults: thread.MergeLimits(r.Limits, directive, overrides, parent).
func (r Resilience) ResolveLimits(directive, overrides thread.Limits, parent *thread.Resolved) (thread.Resolved, error) {
	return thread.MergeLimits(r.Limits, directive, overrides, parent)
}
