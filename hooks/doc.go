// Package hooks implements the spec's layered hooks: hooks from five layers
// (0 user, 1 directive, 2 builtin, 3 project, 4 infra) merged and sorted by
// layer then definition order; conditions over dotted paths into an event's
// context; actions that load, execute or search items through the worker's
// ActionRunner, with ${...} interpolation from the event context; and the
// builtin error/limit policy the worker asks for a Decision.
//
// Events and the context keys each carries (all keys are optional for a
// hook: a condition on a missing path is false, except ne and not):
//
//	thread_started    directive, directive_body, model, limits, inputs, thread_id
//	thread_continued  directive, directive_body, model, limits, inputs, thread_id, previous_thread_id
//	after_step        thread_id, cost, turn
//	after_complete    thread_id, cost, project_path, status
//	error             error (message), classification (rate_limited | transient |
//	                  permanent | cancelled | limit), retry_after (seconds, optional),
//	                  attempt (1-based number of the attempt that failed, counted
//	                  apart for rate_limited and for other classes), thread_id,
//	                  source (model: a model call failed; tool: a tool call ran and
//	                  failed, with tool and call_id)
//	limit             limit_code, current_value, current_max, thread_id
//	directive_return  thread_id, outputs
//
// Control actions. Besides the item actions of the spec (load, execute,
// search), an action's primary may be a control verb that decides what the
// thread does after an error or limit event: "retry" (params max_retries,
// negative for no limit, base, max), "fail" (param code) or "continue". Builtin hooks use them;
// any hook of another layer that matches with a control action overrides
// the builtin decision (the first such hook in layer order wins), so a
// user, directive or project hook can "handle" a limit event with
// primary: continue, or disable retries with primary: fail.
//
// Control actions decide failed model calls and exceeded limits only. A tool
// call that fails fires the error event with source "tool" so that item
// actions can react (record it, notify), but its result goes back to the
// model as an error tool message (spec runner step 7), and no control hook,
// builtin or not, turns it into a failed thread.
//
// Item actions run as the thread: the worker applies the thread's
// capabilities to them as it does to the model's tool calls, so a hook
// needs rye.execute.tool.<id> to execute a tool, rye.load.<type>.<id> to load
// (or execute) a knowledge or directive item, and rye.search.<type>.<id> for
// each item a search returns. A refused action is an error in its outcome
// (and a hook_fired event's error); the thread runs on.
package hooks
