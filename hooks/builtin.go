package hooks

import (
	"fmt"
	"time"

	"github.com/spool-run/spool/config"
)

// Builtin returns the builtin hooks (layer 2) of the reference defaults:
//
//   - builtin_wait_rate_limited: error events classified rate_limited (the
//     provider saying "slow down") are retried without a retry limit
//     (max_retries -1: the thread's duration limit ends the wait), after
//     retry_after when the provider gave one, else with the policy's
//     exponential backoff;
//   - builtin_retry_transient: error events classified transient are
//     retried with exponential backoff (policy), honouring retry_after, up
//     to the policy's max_retries;
//   - builtin_fail_error: any other error event fails the thread with the
//     classification as code;
//   - builtin_fail_limit: limit events fail the thread with the limit code.
//
// The worker counts the attempts of each class apart (the event's
// attempt), so waiting out rate limits uses up no transient retry.
func Builtin(policy config.RetryPolicy) []Hook {
	return []Hook{
		{
			ID: "builtin_wait_rate_limited", Event: EventError, Layer: LayerBuiltin,
			Condition:   &Condition{Path: "classification", Op: OpEq, Value: ClassRateLimited},
			Action:      Action{Primary: PrimaryRetry, Params: map[string]any{"max_retries": -1, "base": policy.Base, "max": policy.Max.Seconds()}},
			Description: "Wait out rate limits (429, overloaded) as the provider says, for as long as the thread may run",
		},
		{
			ID: "builtin_retry_transient", Event: EventError, Layer: LayerBuiltin,
			Condition:   &Condition{Path: "classification", Op: OpEq, Value: ClassTransient},
			Action:      Action{Primary: PrimaryRetry, Params: map[string]any{"max_retries": policy.MaxRetries, "base": policy.Base, "max": policy.Max.Seconds()}},
			Description: "Retry transient errors with exponential backoff",
		},
		{
			ID: "builtin_fail_error", Event: EventError, Layer: LayerBuiltin,
			Action:      Action{Primary: PrimaryFail, Params: map[string]any{"code": "${classification}"}},
			Description: "Fail the thread on permanent errors",
		},
		{
			ID: "builtin_fail_limit", Event: EventLimit, Layer: LayerBuiltin,
			Action:      Action{Primary: PrimaryFail, Params: map[string]any{"code": "${limit_code}"}},
			Description: "Fail the thread when a limit is exceeded",
		},
	}
}

// Verdict is what the thread does after an event.
type Verdict string

// Verdicts.
const (
	Continue Verdict = "continue"
	Retry    Verdict = "retry"
	Fail     Verdict = "fail"
)

// Decision is the outcome of Decide.
type Decision struct {
	Action Verdict
	// Delay before the retry (Retry only).
	Delay time.Duration
	// Code is the error code of a Fail: the limit code for limit events,
	// the classification for errors ("transient" when retries ran out).
	Code string
	// HookID names the hook that decided ("" for the fallback).
	HookID string
	// Params are the deciding action's params, interpolated (e.g. a
	// continue hook may carry new limits for the worker to apply).
	Params map[string]any
}

// Decide returns what the thread does after event (error or limit; other
// events give Continue unless a control hook says otherwise). The first
// matching control hook outside the builtin layer wins; otherwise the first
// matching builtin control hook; otherwise errors and limits fail and other
// events continue.
//
// Context keys read: classification, attempt (1-based number of the attempt
// that failed; default 1), retry_after (seconds) for error events;
// limit_code for limit events.
func Decide(hooks []Hook, event string, evctx map[string]any) Decision {
	matched, _ := Matching(hooks, event, evctx) // hooks whose condition errs do not match
	var builtin *Hook
	for i := range matched {
		h := &matched[i]
		if !h.Action.IsControl() {
			continue
		}
		if h.Layer != LayerBuiltin {
			return decision(h, event, evctx)
		}
		if builtin == nil {
			builtin = h
		}
	}
	if builtin != nil {
		return decision(builtin, event, evctx)
	}
	switch event {
	case EventError, EventLimit:
		return Decision{Action: Fail, Code: failCode(event, evctx, "")}
	}
	return Decision{Action: Continue}
}

// Decide is the package Decide over the dispatcher's hooks.
func (d *Dispatcher) Decide(event string, evctx map[string]any) Decision {
	return Decide(d.hooks, event, evctx)
}

func decision(h *Hook, event string, evctx map[string]any) Decision {
	params, _ := InterpolateValue(h.Action.Params, evctx).(map[string]any)
	d := Decision{HookID: h.ID, Params: params}
	switch h.Action.Primary {
	case PrimaryContinue:
		d.Action = Continue
	case PrimaryFail:
		d.Action = Fail
		code, _ := params["code"].(string)
		d.Code = failCode(event, evctx, code)
	case PrimaryRetry:
		p := config.DefaultRetryPolicy()
		if n, ok := toNumber(params["max_retries"]); ok {
			p.MaxRetries = int(n) // negative: no limit
		}
		if n, ok := toNumber(params["base"]); ok && n >= 1 {
			p.Base = n
		}
		if n, ok := toNumber(params["max"]); ok && n >= 0 {
			p.Max = time.Duration(n * float64(time.Second))
		}
		attempt := 1
		if n, ok := toNumber(evctx["attempt"]); ok && n >= 1 {
			attempt = int(n)
		}
		if p.MaxRetries >= 0 && attempt > p.MaxRetries {
			d.Action = Fail
			d.Code = failCode(event, evctx, "")
			return d
		}
		d.Action = Retry
		d.Delay = p.Delay(attempt)
		if ra, ok := toNumber(evctx["retry_after"]); ok && ra > 0 {
			d.Delay = time.Duration(ra * float64(time.Second))
		}
	}
	return d
}

// failCode picks a Fail's code: the hook's (when it interpolated to
// something), else the limit code or classification from the context.
func failCode(event string, evctx map[string]any, code string) string {
	if code != "" && !isPlaceholder(code) {
		return code
	}
	key := "classification"
	if event == EventLimit {
		key = "limit_code"
	}
	if v, ok := evctx[key]; ok && Format(v) != "" {
		return Format(v)
	}
	if event == EventLimit {
		return "limit_exceeded"
	}
	return "error"
}

func isPlaceholder(s string) bool {
	return len(s) > 3 && s[0] == '$' && s[1] == '{' && s[len(s)-1] == '}'
}

// String renders a decision for logs.
func (d Decision) String() string {
	switch d.Action {
	case Retry:
		return fmt.Sprintf("retry in %s", d.Delay)
	case Fail:
		return "fail: " + d.Code
	}
	return string(d.Action)
}
