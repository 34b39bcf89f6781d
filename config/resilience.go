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

	// Limits.
	var lim tree
	found := false
	for _, k := range []string{"limits.defaults", "limits", "defaults", "limit_defaults", "default_limits"} {
		t, ok, err := root.sub(k)
		if err != nil {
			return r, err
		}
		if ok {
			lim, found = t, true
			break
		}
	}
	if found {
		if err := readLimits(lim, &r.Limits); err != nil {
			return r, err
		}
	}

	// Retry.
	retry, _, err := root.sub("retry")
	if err != nil {
		return r, err
	}
	if err := retry.read(integer(&r.Retry.MaxRetries, notNegative, "retry.max_retries: %d is negative", "max_retries")); err != nil {
		return r, err
	}
	backoffs := []tree{retry}
	if b, ok, err := retry.sub("backoff"); err != nil {
		return r, err
	} else if ok {
		backoffs = append(backoffs, b)
	}
	if pol, ok, err := retry.sub("policies"); err != nil {
		return r, err
	} else if ok {
		names := []string{"exponential", "transient", "default"}
		if dp, ok, _ := retry.str("default_policy"); ok {
			names = append([]string{dp}, names...)
		}
		for _, n := range names {
			if p, ok, err := pol.sub(n); err != nil {
				return r, err
			} else if ok {
				backoffs = append(backoffs, p)
				break
			}
		}
	}
	for _, b := range backoffs {
		if err := b.read(
			number(&r.Retry.Base, func(f float64) bool { return f >= 1 }, "retry base %g is below 1", "base"),
			seconds(&r.Retry.Max, notNegative, "retry max %g is negative", "max", "max_delay"),
		); err != nil {
			return r, err
		}
	}

	// Child policy.
	for _, k := range []string{"child_policy", "children"} {
		cp, ok, err := root.sub(k)
		if err != nil {
			return r, err
		}
		if !ok {
			continue
		}
		for key, dst := range map[string]*string{
			"on_parent_cancel":   &r.Children.OnParentCancel,
			"on_parent_error":    &r.Children.OnParentError,
			"on_parent_complete": &r.Children.OnParentComplete,
		} {
			s, ok, err := cp.str(key)
			if err != nil {
				return r, err
			}
			if !ok {
				continue
			}
			switch s {
			case ChildCascadeCancel, "cascade":
				*dst = ChildCascadeCancel
			case ChildAllow:
				*dst = ChildAllow
			default:
				return r, fmt.Errorf("%s: %s.%s: %q is not cascade_cancel or allow", path, k, key, s)
			}
		}
		break
	}
	return r, nil
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
