// Package graph is the pure core of graph runs: it parses a graph file
// (YAML, in Spool's canonical form or the reference's form), normalizes
// and validates it, checks a run's inputs, interpolates ${...}
// expressions, and decides what one step does to the state and where the
// run goes next. It does no I/O: the worker runs actions, checkpoints and
// waits; this package tells it what the graph means.
//
// A graph run walks one cursor through the nodes. One step at node n:
//
//	        state (last checkpoint) + inputs + run
//	                      │
//	                      ▼
//	┌──────────── interpolate ────────────┐  Value / Params: action ids,
//	│ ${state.x}, ${inputs.y}, ${run.id}, │  params, inputs, over, prompt
//	│ ${item}/${loop.index} in a foreach  │  (no result yet: validation error)
//	└─────────────────┬───────────────────┘
//	                  ▼
//	┌──────────────── act ────────────────┐  worker: tool call, child
//	│ tool │ directive │ graph │ foreach  │  thread or run, approval, wait
//	│ gate and return do nothing here     │
//	└───────┬──────────────────────┬──────┘
//	   ok   │                      │ failed (*StepError code)
//	        ▼                      ▼
//	┌──── assign ────┐     retry? (Retryable, Retry.Delay)
//	│ every value    │     else state._last_error, then
//	│ reads the OLD  │     node on_error → that node
//	│ state; all keys│     config.on_error: NODE │ continue │ fail
//	│ written at once│           (continue skips assign, routes by next)
//	└───────┬────────┘
//	        ▼
//	┌──── route ─────┐  Route: first edge whose `when` holds on the NEW
//	│ next           │  state, else the default edge (last); no next is an
//	└───────┬────────┘  implicit return; no match is no_matching_edge
//	        ▼
//	checkpoint (state, cursor) ──▶ next step, or return: outputs
//
// # Choices where the specification is silent
//
// These follow what a LangGraph or Temporal user would expect.
//
//   - Escapes: "$${" is a literal "${", so a shell command can keep its own
//     ${VAR}. A "${" without a closing brace is plain text.
//   - An embedded reference that resolves to null (the path exists and
//     holds null) inserts "null", as compact JSON does; only a path that
//     does not resolve at all fails with unresolved_reference.
//   - Filters apply to non-null values; null passes through a filter
//     unchanged. length counts a string's characters (runes), a list's
//     elements and an object's keys, and fails on anything else; keys
//     returns an object's keys sorted; upper and lower work on the text
//     form. A filter that fails (from_json on text that is not JSON) is a
//     step failure with code interpolation_error, as is a malformed ${...}
//     at run time (validation reports it first).
//   - Reference conditions: a leaf without op means eq, a path may index
//     lists as files[0], and `when: {}` is no condition at all (the
//     reference treated an empty condition as true), so such an edge is
//     the default edge. Combinators follow hooks.Condition: the parts of
//     one condition are ANDed (the reference evaluated only the first of
//     any/all/not).
//   - retry without backoff waits 1s before the second attempt (Temporal's
//     initial interval), doubling up to max_backoff (10 × backoff).
//   - Durations are Go durations ("90s", "2m", "1h30m") or numbers of
//     seconds; limits.duration may be written either way and is kept in
//     seconds. A sleep's for also takes days ("2d", "1d12h") and 0; its
//     until reads a time without an offset as UTC (ParseSleepUntil).
//   - Inputs: a key given as null counts as absent (its default applies);
//     a nested object property that declares no properties is free-form
//     (additionalProperties true), while the top level and objects that
//     declare properties refuse unknown keys unless they say otherwise.
//   - An over or threads written as a YAML list is kept as its JSON text,
//     which ForeachItems reads as a list.
//   - Fields evaluated before the node has a result (over, threads,
//     prompt, show) treat ${result...} as the error it is inside an action.
//   - The reference's `comment` on a node is accepted and ignored with a
//     warning, like cache and cache_result; its `remote` is an error.
//   - Graph hooks may use the execute forms of actions, or the hook
//     primaries load and search (Hook.Item); the control primaries retry,
//     fail and continue are errors, since graph hooks only observe.
//   - A reference tool action that names a graph (item_id:
//     "tool:graphs/X") keeps Tool "graphs/X"; the runtime asks MaybeGraph,
//     and if its bundle has that graph runs AsGraph, whose inputs are the
//     params without the reference's run keys (capabilities, depth,
//     parent_thread_id; limits and async become the action's own). Either
//     the tool's or the graph's capability permits it.
//   - The node table's duration is the time spent in the node over all its
//     visits; its status is that of the last visit.
//   - Step failure codes this package adds to section 9's: interpolation_error
//     (a malformed ${...} or a failing filter), invalid_condition and
//     invalid_assign (both caught by validation first) and invalid_output
//     (a return output that is not an object). Retryable also retries
//     thread_lost, a child whose worker vanished.
//   - Missing version or description is a warning, not an error: the
//     validator's error list does not name them, and the reference's own
//     walker did not require them.
//
// # Using it
//
// The runtime parses once (Parse, then Digest to pin the definition),
// checks inputs (ValidateInputs, InitialState), and for each step builds
// a scope with NewScope (ItemScope per foreach item), interpolates the
// action with Params (ids and prompts with String, over with Value and
// ForeachItems), runs it, then calls Assign, checks StateSize, and
// routes with Route on a scope holding the new state. A return node's
// outputs come from Outputs. Failures are *StepError; Retryable and
// Retry.Delay decide retries. Nodes and Render turn the run's step
// records into the node table and the knowledge render.
package graph
