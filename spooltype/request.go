package spooltype

import (
	"encoding/json"

	"github.com/spool-run/spool/thread"
)

// RunRequest is the body of POST /v1/threads: what `spool thread run`
// takes as its argument and flags.
type RunRequest struct {
	// Directive is the directive's name, e.g. "demo/hello". Required.
	Directive string `json:"directive"`
	// Inputs are the directive's inputs.
	Inputs map[string]any `json:"inputs,omitempty"`
	// Model overrides the directive's model ("script:PATH" for the
	// scripted provider).
	Model string `json:"model,omitempty"`
	// Limits override the directive's limits (turns, tokens, spend, depth,
	// spawns, duration).
	Limits *thread.Limits `json:"limits,omitempty"`
	// Parent is the parent thread's id; "" starts a root.
	Parent string `json:"parent,omitempty"`
	// Queue is the asynq queue; default the parent's, else "default".
	Queue string `json:"queue,omitempty"`
	// Tenant is the root's tenant (default "default"; a bound token's
	// tenant); a child has its parent's.
	Tenant string `json:"tenant,omitempty"`
	// Priority is 1 (highest) to 5; default the tenant's. A child has its
	// parent's.
	Priority int `json:"priority,omitempty"`
	// Tags label a root and every run of its tree (key=value); a child
	// has its root's.
	Tags map[string]string `json:"tags,omitempty"`
	// Notify is an http(s) URL told of the run's events (completed,
	// error, cancelled, waiting for approval) as webhooks.yaml's
	// endpoints are; a child has its root's.
	Notify string `json:"notify,omitempty"`
}

// CancelRequest is the (optional) body of POST /v1/threads/ID/cancel.
type CancelRequest struct {
	// Cascade cancels the thread's children too, where the project's
	// child policy says so. Default true.
	Cascade *bool `json:"cascade,omitempty"`
}

// PauseRequest is the (optional) body of POST /v1/threads/ID/pause and
// /unpause (and of a graph run's /v1/graphs/ID/pause and /unpause).
type PauseRequest struct {
	// Tree acts on the whole tree the run belongs to, from its root;
	// without it, on the run (the one its continuation chain has reached)
	// and its descendants.
	Tree bool `json:"tree,omitempty"`
}

// ResumeRequest is the body of POST /v1/threads/ID/resume.
type ResumeRequest struct {
	// Message is the user message the thread resumes with. Required.
	Message string `json:"message"`
}

// ApproveRequest is the (optional) body of POST /v1/threads/ID/approve.
type ApproveRequest struct {
	// CallID is the pending tool call of this thread (never of its
	// continuation); "" approves every pending call.
	CallID string `json:"call_id,omitempty"`
	// RequestID, with CallID, decides the call only while its pending
	// request is this one (the pending call's request_id).
	RequestID string `json:"request_id,omitempty"`
	// Reason is recorded in the transcript.
	Reason string `json:"reason,omitempty"`
	// By is who decides, recorded in the transcript. Default: the basic
	// auth user, else "api".
	By string `json:"by,omitempty"`
}

// DenyRequest is the body of POST /v1/threads/ID/deny.
type DenyRequest struct {
	// CallID is the pending tool call; "" denies every pending call.
	CallID string `json:"call_id,omitempty"`
	// RequestID is ApproveRequest.RequestID.
	RequestID string `json:"request_id,omitempty"`
	// Reason is returned to the model as the tool's error. Required.
	Reason string `json:"reason"`
	// By is who decides (ApproveRequest.By).
	By string `json:"by,omitempty"`
}

// SendRequest is the body of POST /v1/threads/ID/send and /interrupt.
type SendRequest struct {
	// Message is queued; the model sees it before its next call (an
	// interrupt first stops the call or tool in flight). Required.
	Message string `json:"message"`
	// By is who sends (ApproveRequest.By).
	By string `json:"by,omitempty"`
}

// ForkRequest is the body of POST /v1/threads/ID/fork.
type ForkRequest struct {
	// AtTurn is the last turn of the thread's verified transcript the
	// fork keeps. Required.
	AtTurn  int    `json:"at_turn"`
	Message string `json:"message,omitempty"`
	Model   string `json:"model,omitempty"`
}

// GraphRunRequest is the body of POST /v1/graphs: what `spool graph run`
// takes as its argument and flags.
type GraphRunRequest struct {
	// Graph is the graph's name, e.g. "review/pr" (.ai/graphs/review/pr.yaml).
	// Required.
	Graph string `json:"graph"`
	// Inputs are checked against the graph's inputs schema.
	Inputs map[string]any `json:"inputs,omitempty"`
	// Limits override the graph's limits: spend, duration, depth,
	// spawns, turns, tokens, and max_steps.
	Limits map[string]any `json:"limits,omitempty"`
	// Parent is the parent thread or run; "" starts a root run.
	Parent string `json:"parent,omitempty"`
	// Queue is the asynq queue; default the parent's, else "default".
	Queue string `json:"queue,omitempty"`
	// Tenant, Priority and Tags are RunRequest's.
	Tenant   string            `json:"tenant,omitempty"`
	Priority int               `json:"priority,omitempty"`
	Tags     map[string]string `json:"tags,omitempty"`
	// Notify is a URL told of the run's events (completed, error,
	// cancelled, waiting for approval) as webhooks.yaml's endpoints are.
	Notify string `json:"notify,omitempty"`
}

// GraphResumeRequest is the (optional) body of POST /v1/graphs/ID/resume.
type GraphResumeRequest struct {
	// From is the node to go on from; default the checkpoint's.
	From string `json:"from,omitempty"`
	// Set edits state keys (never inputs or _ keys).
	Set map[string]any `json:"set,omitempty"`
}

// GraphForkRequest is the body of POST /v1/graphs/ID/fork.
type GraphForkRequest struct {
	// AtStep is the step (from 1) whose checkpoint the fork starts from.
	// Required.
	AtStep int `json:"at_step"`
	// From is the node to go on from; default the checkpoint's.
	From string `json:"from,omitempty"`
	// Set edits state keys (never inputs or _ keys).
	Set map[string]any `json:"set,omitempty"`
}

// GraphMessageRequest is the body of POST /v1/graphs/ID/messages: a
// message for the run's wait_message nodes of its name (spool graph send).
type GraphMessageRequest struct {
	// Name is the message's name; the graph must wait for it. Required.
	Name string `json:"name"`
	// Data is the message's data (any JSON; null when absent), checked
	// against the schema of each wait_message node of that name.
	Data json.RawMessage `json:"data,omitempty"`
	// ID makes the send idempotent: the run keeps one message of each id,
	// and a send of an id it has is answered as a duplicate.
	ID string `json:"id,omitempty"`
	// By is who sends (ApproveRequest.By).
	By string `json:"by,omitempty"`
}

// MessageSent is what a message sent to a graph run did (POST
// /v1/graphs/ID/messages, spool graph send --json).
type MessageSent struct {
	// RunID is the run that keeps it: the run named, or the run of its
	// chain that carries it on.
	RunID string `json:"run_id"`
	Name  string `json:"name"`
	// Seq orders the run's messages; a duplicate has the first one's.
	Seq int64  `json:"seq"`
	ID  string `json:"id,omitempty"`
	// Duplicate: a message of this id was sent to the run before; this
	// one was not kept again.
	Duplicate bool `json:"duplicate"`
	// Status is the run's status when the message was kept.
	Status string `json:"status"`
	// Woken: the run was waiting for this message and was woken to take
	// it.
	Woken bool `json:"woken"`
}
