package hooks

import (
	"time"

	"github.com/spool-run/spool/thread"
)

// Events hooks can listen to.
const (
	EventThreadStarted   = "thread_started"
	EventThreadContinued = "thread_continued"
	EventAfterStep       = "after_step"
	EventAfterComplete   = "after_complete"
	EventError           = "error"
	EventLimit           = "limit"
	EventDirectiveReturn = "directive_return"
)

// Events lists every event, in lifecycle order.
var Events = []string{
	EventThreadStarted, EventThreadContinued, EventAfterStep, EventAfterComplete,
	EventError, EventLimit, EventDirectiveReturn,
}

// KnownEvent reports whether e is one of Events.
func KnownEvent(e string) bool {
	for _, k := range Events {
		if k == e {
			return true
		}
	}
	return false
}

// Error classifications carried in an error event's "classification".
const (
	ClassRateLimited = "rate_limited"
	ClassTransient   = "transient"
	ClassPermanent   = "permanent"
	ClassCancelled   = "cancelled"
	ClassLimit       = "limit"
)

// ErrorContext builds an error event's context. retryAfter <= 0 is left out.
func ErrorContext(threadID, message, classification string, attempt int, retryAfter time.Duration) map[string]any {
	m := map[string]any{"thread_id": threadID, "error": message, "classification": classification, "attempt": attempt}
	if retryAfter > 0 {
		m["retry_after"] = retryAfter.Seconds()
	}
	return m
}

// LimitContext builds a limit event's context from a *thread.LimitError.
func LimitContext(threadID string, le *thread.LimitError) map[string]any {
	return map[string]any{"thread_id": threadID, "limit_code": le.Code, "current_value": le.Current, "current_max": le.Max}
}
