// Package api serves spool's operations as JSON over HTTP (`spool api`),
// described by the OpenAPI 3.1 document it serves at /v1/openapi.json
// (openapi.json in this directory), the operations of the CLI:
//
//	POST /v1/threads                  run: {directive, inputs, model, limits, parent, queue} → 201, the record
//	GET  /v1/threads                  list: ?status= ?directive= ?parent= ?limit= → records, newest first
//	GET  /v1/threads/ID               show: the record
//	GET  /v1/threads/ID/tree          children and continuations, with status and spend
//	GET  /v1/threads/ID/chain         the continuation chain, first thread first
//	GET  /v1/threads/ID/budget        the live budget of the thread's subtree
//	GET  /v1/threads/ID/events        server-sent events: the transcript as it is appended
//	POST /v1/threads/ID/cancel        {cascade} → what the request did
//	POST /v1/threads/ID/pause         {tree} → what the request did: the run and its descendants pause
//	POST /v1/threads/ID/unpause       {tree} → what the request did: they go on where they were
//	POST /v1/threads/ID/resume        {message} → 201, the resume (its new thread)
//	POST /v1/threads/ID/approve       {call_id, reason, by} → the decision (every pending call without call_id)
//	POST /v1/threads/ID/deny          {call_id, reason, by} → the decision; the model gets the reason
//	POST /v1/threads/ID/send          {message, by} → the message queued for the model's next call
//	POST /v1/threads/ID/interrupt     {message, by} → the same, stopping the work in flight first
//	POST /v1/threads/ID/fork          {at_turn, message, model} → 201, the fork's record
//	POST /v1/graphs                   graph run: {graph, inputs, limits, parent, queue} → 201, the run's record
//	GET  /v1/graphs/ID                the run's record with nodes (its node table) and steps
//	GET  /v1/graphs/ID/state          ?step=N → {run_id, step, state}: the state after step N (default the last)
//	POST /v1/graphs/ID/cancel         {cascade} → what the request did
//	POST /v1/graphs/ID/pause          {tree} → what the request did (pause, as a thread's)
//	POST /v1/graphs/ID/unpause        {tree} → what the request did (unpause, as a thread's)
//	POST /v1/graphs/ID/resume         {from, set} → 201, the resume (its continuation run)
//	POST /v1/graphs/ID/fork           {at_step, from, set} → 201, the fork's record
//	GET  /v1/approvals                ?thread= → the tool calls waiting for a decision
//	GET  /v1/openapi.json             the OpenAPI document
//	GET  /healthz                     liveness
//
// The bodies are the JSON the CLI prints with --json (spooltype.Record,
// orchestrator.TreeNode, Chain, Budget, CancelResult, PauseResult,
// ResumeResult, PendingCall, DecideResult, SendResult; a fork answers the fork's
// record, as the client's Fork returns it), and the operations are the
// orchestrator's (a run is launch.Start, as `spool thread run`), so the
// API and the CLI agree; package client is a Go client over it.
//
// A graph run is a registry record (kind graph), so the thread routes
// take run ids too: its events (graph_started, step_completed, ... on the
// same stream), tree, budget, pause and unpause, and approve and deny for
// its approval nodes (pending calls of tool "graph:approval").
//
// Pause (orchestrator.Pause) stops a run and its unfinished descendants
// (with tree, the whole tree the run belongs to, from its root): a
// waiting one at once, a running one at its next boundary (before a
// turn, between graph steps); status paused, no worker slot held, and
// the time paused does not count against the duration limit. Unpause
// lets them go on where they were. Both answer what the request did
// (PauseResult); a run that has ended is 409 run_ended.
//
// Thread ids contain slashes (a directive name is their prefix): send them
// URL-escaped (demo%2Fhello-1700000000-ab12); unescaped works too, for an
// id never ends in a route's last segment (ids end in -<time>-<random>).
//
// Errors are RFC 9457 problem details (application/problem+json) with a
// machine-readable "code" member beside type, title, status and detail:
// not_found, bad_request, refused (a run the CLI refuses as bad usage: an
// unknown model, an undeclared input, ...), directive_not_found,
// parent_not_found, a limit code (spawns_exceeded, depth_exceeded,
// spend_exceeded), not_resumable, not_pending (no such call waits for a
// decision), finished (a message to a finished thread),
// transcript_damaged, no_budget, turn_not_recorded (a fork at a turn the
// thread does not have), graph_not_found, graph_invalid, not_graph (a
// graph route given a thread's id), step_not_recorded (a state or fork
// at a step the run has no checkpoint after), parent_finished (a fork of a child whose parent
// has finished), run_ended (a message to, or a pause or unpause of, a run
// that has ended), method_not_allowed,
// unsupported_media_type, body_too_large, unauthorized, forbidden,
// host_not_allowed, internal.
//
// The event stream has the guarantees of `spool thread transcript
// --follow` (orchestrator.Follow): every event once, in seq order, without
// gaps, the durable ones from the transcript's segments and, between
// checkpoints, the live ones its worker publishes. Each transcript event is
// one SSE message whose id is its seq and whose data is the event's JSON
// (the line `transcript --format jsonl` prints); a request with
// Last-Event-ID (or ?after=SEQ) resumes after that seq. The stream ends
// after the thread's last event with an "end" message ({thread_id, status,
// last_event_id}); a transcript that fails verification ends it with an
// "error" message holding a problem. A comment line keeps an idle stream
// open through proxies. As with --follow, the live part starts when the
// stream subscribes: an event its worker published before that and has not
// checkpointed yet comes with its turn's checkpoint, in its place.
//
// Security: New has no opinion on where it listens; `spool api` binds to
// loopback by default and refuses a non-loopback address without basic
// auth or a token (package httpauth, which the monitor shares). The
// credential is taken from the Authorization header only (a browser's
// EventSource sends basic auth, not a bearer token); /healthz and
// /v1/openapi.json need none. Unsafe cross-origin browser requests are
// refused (http.CrossOriginProtection), and on loopback Config.Hosts
// restricts the Host header against DNS rebinding.
package api
