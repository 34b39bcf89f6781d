package hooks

import (
	"time"
	"unicode/utf8"

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
	// EventApprovalRequested: a tool call waits for a person's decision
	// (context: thread_id, call_id, tool, input); EventApprovalDecided: it
	// was decided (context adds decision, by, reason).
	EventApprovalRequested = "approval_requested"
	EventApprovalDecided   = "approval_decided"
	// EventGraphStarted and EventGraphCompleted fire for graph runs only
	// (package graph), as do after_step, error and limit for a run's
	// steps; a project's hooks.yaml may listen to them.
	EventGraphStarted   = "graph_started"
	EventGraphCompleted = "graph_completed"
)

// Events lists every event, in lifecycle order.
var Events = []string{
	EventThreadStarted, EventThreadContinued, EventAfterStep, EventAfterComplete,
	EventError, EventLimit, EventDirectiveReturn, EventApprovalRequested, EventApprovalDecided,
	EventGraphStarted, EventGraphCompleted,
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

// Sources of an error event, in its context's "source": a condition
// {path: source, op: eq, value: tool} picks tool failures.
const (
	SourceModel = "model"
	SourceTool  = "tool"
)

// ErrorContext builds the context of an error event for a failed model
// call. retryAfter <= 0 is left out.
func ErrorContext(threadID, message, classification string, attempt int, retryAfter time.Duration) map[string]any {
	m := map[string]any{"thread_id": threadID, "error": message, "classification": classification, "attempt": attempt, "source": SourceModel}
	if retryAfter > 0 {
		m["retry_after"] = retryAfter.Seconds()
	}
	return m
}

// maxToolErrorBytes bounds a tool failure's message in the error context:
// a tool's output can be large, and hooks interpolate it into params.
const maxToolErrorBytes = 4 << 10

// ToolErrorContext builds the context of an error event for a tool call
// that ran and failed: the spec's error and classification, the tool and
// the call id. The message is cut to maxToolErrorBytes.
func ToolErrorContext(threadID, tool, callID, message, classification string) map[string]any {
	if len(message) > maxToolErrorBytes {
		cut := maxToolErrorBytes
		for cut > 0 && !utf8.RuneStart(message[cut]) {
			cut--
		}
		message = message[:cut] + "…"
	}
	return map[string]any{"thread_id": threadID, "error": message, "classification": classification, "attempt": 1,
		"source": SourceTool, "tool": tool, "call_id": callID}
}

// LimitContext builds a limit event's context from a *thread.LimitError.
func LimitContext(threadID string, le *thread.LimitError) map[string]any {
	return map[string]any{"thread_id": threadID, "limit_code": le.Code, "current_value": le.Current, "current_max": le.Max}
}
