package spooltype

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/spool-run/spool/thread"
)

// ErrorInfo is a thread's error: a code (the spec's limit codes, or e.g.
// "provider_error") and a message.
type ErrorInfo struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Record is a thread's registry record. Its JSON is the shape `spool thread
// run --wait --json` prints (CLI.md): empty parent_id, continuation_of,
// continuation_thread_id and a nil error are null.
type Record struct {
	ThreadID             string          `json:"thread_id"`
	Directive            string          `json:"directive"`
	Status               thread.Status   `json:"status"`
	ParentID             string          `json:"parent_id"`
	ChainRootID          string          `json:"chain_root_id"`
	ContinuationOf       string          `json:"continuation_of"`
	ContinuationThreadID string          `json:"continuation_thread_id"`
	Result               string          `json:"result"`
	Outputs              map[string]any  `json:"outputs"`
	Error                *ErrorInfo      `json:"error"`
	Cost                 thread.Cost     `json:"cost"`
	Limits               thread.Resolved `json:"limits"`

	Model        string         `json:"model,omitempty"`
	Capabilities []string       `json:"capabilities,omitempty"`
	Bundle       string         `json:"bundle,omitempty"`
	Inputs       map[string]any `json:"inputs,omitempty"`
	Queue        string         `json:"queue,omitempty"`
	Ancestors    []string       `json:"ancestors,omitempty"` // root first, without the thread itself
	// DroppedCapabilities are the capabilities the thread's directive
	// asks for that its parent does not hold, which a child runs without
	// (a child never holds more than its parent); empty for a root.
	DroppedCapabilities []string `json:"dropped_capabilities,omitempty"`
	// LedgerPath is the ledger entries above the thread's own, parent's
	// first, up to the root's: each ancestor's entry is its chain's
	// (LedgerID), so a child of a continuation charges the chain it
	// belongs to.
	LedgerPath       []string  `json:"ledger_path,omitempty"`
	Depth            int       `json:"depth"` // 0 for a root
	PreviousThreadID string    `json:"previous_thread_id,omitempty"`
	CreatedAt        time.Time `json:"created_at"`
	UpdatedAt        time.Time `json:"updated_at"`
	Version          int64     `json:"version"`
	CancelRequested  bool      `json:"cancel_requested,omitempty"`
	// CancelCascade: the cancel request may reach the thread's children
	// (RequestCancel's cascade).
	CancelCascade bool `json:"cancel_cascade,omitempty"`
	// PauseRequested: a person paused the thread (`spool thread pause`):
	// it is paused, or pauses at its next boundary.
	PauseRequested bool `json:"pause_requested,omitempty"`
	// PausedMS is how long the thread has been paused, in milliseconds,
	// over its past pauses: its duration limit does not count it.
	PausedMS   int64 `json:"paused_ms,omitempty"`
	Activation int64 `json:"activation"`
	// ChainIndex is 0 for the first thread of a continuation chain, 1 for
	// its first continuation, ...
	ChainIndex int `json:"chain_index"`
	// ContinuationKind is "handoff" or "resume" for a continuation, and
	// ContinuationMessage a resume's user message.
	ContinuationKind    string `json:"continuation_kind,omitempty"`
	ContinuationMessage string `json:"continuation_message,omitempty"`
	// ModelOverride is the explicit model its tree was started with (a
	// root's --model), which its children run unless their directive or
	// spawn names a model; "" for none.
	ModelOverride string `json:"model_override,omitempty"`
	// TraceID is the id of the thread's trace: its whole tree's
	// (package telemetry), from TraceParent.
	TraceID string `json:"trace_id,omitempty"`
	// TraceParent is the W3C traceparent of the thread's span, which
	// every activation of the thread is a child of, and TraceCaller that
	// of the span that started the thread (the thread span's parent; ""
	// for a root an untraced process started). Set when the thread is
	// registered and never changed; see package telemetry.
	TraceParent string `json:"-"`
	TraceCaller string `json:"-"`
	// WaitingFor says what a waiting thread waits for: "children" or
	// "approval" (CLI.md "People in the loop"), or, held by admission,
	// capacity, concurrency, tenant_concurrency, tenant_budget,
	// tenant_rate or tenant_runs; empty otherwise.
	WaitingFor string `json:"waiting_for,omitempty"`
	// While admission holds the run (read live from its tenant's state):
	// the concurrency key it waits on (RULE=VALUE), since when it waits,
	// and its place in line (1: next).
	WaitingKey   string     `json:"waiting_key,omitempty"`
	WaitingSince *time.Time `json:"waiting_since,omitempty"`
	Position     int        `json:"position,omitempty"`
	// PendingApprovals are the tool calls a thread waiting for approval
	// waits on.
	PendingApprovals []PendingApproval `json:"pending_approvals,omitempty"`
	// Stalled, while set, says what a running thread is stuck on (the
	// blob store, whose operations its worker tries again through an
	// outage): registry.Activations.MarkStalled, cleared once the store
	// answers.
	Stalled *Stall `json:"stalled,omitempty"`
	// StartedAt is when the first activation claimed the thread; the
	// duration limit counts from here. A thread not started yet (created)
	// has none, and its JSON no started_at.
	StartedAt time.Time `json:"started_at,omitzero"`
	// Transcript is how much of the thread's transcript is known to be
	// durable (registry.Changes.Transcript): a verifier requires at least
	// that much. While the thread runs it lags the transcript by up to one
	// segment (a checkpoint commits before its segment is written); once
	// the thread has finished it is exact (see the worker package doc).
	Transcript TranscriptMark `json:"transcript,omitzero"`
	// ForkedFrom is the thread a fork was forked from (`spool thread
	// fork`), and ForkTurn the turn of it the fork carries the
	// conversation up to; ForkSegment and ForkChainHash name the source's
	// transcript segment that holds the end of that turn and its chain
	// hash (the fork's thread_forked event repeats them), ForkMessage is
	// the message the fork adds. Empty for a thread that is not a fork.
	ForkedFrom    string `json:"forked_from,omitempty"`
	ForkTurn      int    `json:"fork_turn,omitempty"`
	ForkSegment   int64  `json:"fork_segment,omitempty"`
	ForkChainHash string `json:"fork_chain_hash,omitempty"`
	ForkMessage   string `json:"fork_message,omitempty"`
	// Workspace names the thread's file workspace when it is not its
	// tree's (WorkspaceID): a fork has its own, and its children and
	// continuations share it.
	Workspace string `json:"workspace,omitempty"`
	// Kind is KindGraph for a graph run (a registry record like a
	// thread's, walking a graph: package graph), KindThread otherwise.
	Kind string `json:"kind"`
	// The fields of a graph run (spec: state graphs): GraphDigest pins
	// its definition, CurrentNode and Step are the cursor after its last
	// checkpoint (while a step is in flight, that step's node), MaxSteps
	// its resolved step limit, SuppressedErrors the step failures
	// on_error: continue let through, ItemsDone and ItemsTotal the
	// progress of an in-flight foreach, StateSHA256 the last
	// checkpointed state's snapshot.
	GraphDigest      string `json:"graph_digest,omitempty"`
	CurrentNode      string `json:"current_node,omitempty"`
	Step             int    `json:"step,omitempty"`
	MaxSteps         int    `json:"max_steps,omitempty"`
	SuppressedErrors int    `json:"suppressed_errors,omitempty"`
	ItemsDone        int    `json:"items_done,omitempty"`
	ItemsTotal       int    `json:"items_total,omitempty"`
	StateSHA256      string `json:"state_sha256,omitempty"`
	// Tenant is the party the run's tree runs for, and Priority (1
	// highest .. 5) how its activations rank among its tenant's: both its
	// root's, set at registration and never changed. A record written
	// before tenants has thread.DefaultTenant and thread.DefaultPriority.
	Tenant   string `json:"tenant"`
	Priority int    `json:"priority"`
	// IdempotencyKey is the key the run was started with (thread run
	// --idempotency-key, the API's Idempotency-Key header); "" (null)
	// for none.
	IdempotencyKey string `json:"idempotency_key"`
	// ConcurrencyKeys are the run's values of the admission policy's
	// concurrency rules, computed once at registration (its
	// continuations carry them); empty when no rule applies.
	ConcurrencyKeys []ConcurrencyKey `json:"concurrency_keys"`
	// Tags are the labels its root was started with (`--tag key=value`),
	// carried by every run of the tree: `thread list --tag` finds them.
	Tags map[string]string `json:"tags"`
	// Notify is the URL its root was started with (`--notify`), told of
	// the run's events as webhooks.yaml's endpoints are; Webhooks is set
	// when its tree has somewhere to send them (the URL, or endpoints in
	// webhooks.yaml when the root started): only then do its events go
	// to the outbox. Both are carried by every run of the tree.
	Notify   string `json:"notify,omitempty"`
	Webhooks bool   `json:"webhooks,omitempty"`
	// Existing is set only on the answer of a start that carried an
	// idempotency key: false for the start that registered the run, true
	// for a start that found it registered. It is not stored.
	Existing *bool `json:"existing,omitempty"`
	// Extra holds every other hash field (registry.Changes.Fields, and
	// fields other packages keep on the thread hash), raw.
	Extra map[string]string `json:"-"`
}

// ConcurrencyKey is a run's value of one concurrency rule of the
// admission policy: at most the rule's max activations of the tenant
// hold the same value at once.
type ConcurrencyKey struct {
	Rule  string `json:"rule"`
	Value string `json:"value"`
}

// Record kinds.
const (
	KindThread = "thread"
	KindGraph  = "graph"
)

// IsGraph reports whether r is a graph run.
func (r *Record) IsGraph() bool { return r.Kind == KindGraph }

// TranscriptMark is a point of a thread's transcript that the registry
// recorded as durable: the first Segments segments exist, and the chain
// hash of segment Segments (the SHA-256 of every transcript byte up to its
// end, transcript.SegmentInfo.ChainHash) is ChainHash. Kept in the thread
// hash as transcript_segments and transcript_chain_hash.
type TranscriptMark struct {
	Segments  int64  `json:"segments"`
	ChainHash string `json:"chain_hash,omitempty"`
}

// TreeID is the root of the thread's spawn tree: the first thread of the
// root's continuation chain (a handoff or resume of a root thread carries
// on in the same tree, and so do the children of its continuations), read
// from the end of the ledger path; for a record without one, the first
// ancestor; for a thread without a parent, the first thread of its chain.
// Tools share a workspace per tree, and coordination reaches only the
// threads of the caller's tree.
func (r *Record) TreeID() string {
	if n := len(r.LedgerPath); n > 0 {
		return r.LedgerPath[n-1]
	}
	if len(r.Ancestors) > 0 {
		return r.Ancestors[0]
	}
	if r.ChainRootID != "" {
		return r.ChainRootID
	}
	return r.ThreadID
}

// WorkspaceID names the workspace of the thread's file tools
// (blobkey.WorkspaceFile): its tree's (TreeID), unless it has its own
// (Workspace: a fork, and the threads of the fork's tree).
func (r *Record) WorkspaceID() string {
	if r.Workspace != "" {
		return r.Workspace
	}
	return r.TreeID()
}

// LedgerID is the id of the thread's budget ledger entry: one per
// continuation chain, keyed by the chain's first thread, so a handoff or
// resume goes on under the same ceiling.
func (r *Record) LedgerID() string {
	if r.ChainRootID != "" {
		return r.ChainRootID
	}
	return r.ThreadID
}

// BudgetPath returns the ledger entries above the thread's own, parent's
// first, up to the root's: the path the ledger takes (LedgerPath; for a
// record written before it existed, the ancestors, parent first).
func (r *Record) BudgetPath() []string {
	if len(r.LedgerPath) > 0 || len(r.Ancestors) == 0 {
		return r.LedgerPath
	}
	out := make([]string, len(r.Ancestors))
	for i, a := range r.Ancestors {
		out[len(r.Ancestors)-1-i] = a
	}
	return out
}

type recordJSON Record

// MarshalJSON renders empty pointers as null, as CLI.md shows.
func (r Record) MarshalJSON() ([]byte, error) {
	type out struct {
		recordJSON
		ParentID             *string `json:"parent_id"`
		ContinuationOf       *string `json:"continuation_of"`
		ContinuationThreadID *string `json:"continuation_thread_id"`
		IdempotencyKey       *string `json:"idempotency_key"`
		GraphStep            *int    `json:"step,omitempty"`
		GraphNode            *string `json:"current_node,omitempty"`
		// ForkStep is a graph fork's step (its fork_turn), by the name
		// the graph spec gives it.
		ForkStep *int `json:"fork_step,omitempty"`
	}
	if r.Outputs == nil {
		r.Outputs = map[string]any{}
	}
	if r.ConcurrencyKeys == nil {
		r.ConcurrencyKeys = []ConcurrencyKey{}
	}
	if r.Tags == nil {
		r.Tags = map[string]string{}
	}
	o := out{recordJSON: recordJSON(r), ParentID: nullable(r.ParentID),
		ContinuationOf: nullable(r.ContinuationOf), ContinuationThreadID: nullable(r.ContinuationThreadID),
		IdempotencyKey: nullable(r.IdempotencyKey)}
	if o.Kind == "" {
		o.Kind = KindThread
	}
	o.Tenant, o.Priority = r.TenantOrDefault(), r.PriorityOrDefault()
	if r.IsGraph() {
		// A graph run's cursor is always there, step 0 and all.
		o.GraphStep, o.GraphNode = &r.Step, &r.CurrentNode
		if r.ForkedFrom != "" {
			o.ForkStep = &r.ForkTurn
		}
	}
	return json.Marshal(o)
}

// UnmarshalJSON accepts what MarshalJSON writes.
func (r *Record) UnmarshalJSON(b []byte) error {
	type in struct {
		*recordJSON
		ParentID             *string `json:"parent_id"`
		ContinuationOf       *string `json:"continuation_of"`
		ContinuationThreadID *string `json:"continuation_thread_id"`
		IdempotencyKey       *string `json:"idempotency_key"`
	}
	v := in{recordJSON: (*recordJSON)(r)}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	r.ParentID, r.ContinuationOf, r.ContinuationThreadID = deref(v.ParentID), deref(v.ContinuationOf), deref(v.ContinuationThreadID)
	r.IdempotencyKey = deref(v.IdempotencyKey)
	if r.Kind == "" {
		r.Kind = KindThread // written before records had a kind
	}
	// Written before tenants: the default tenant's.
	r.Tenant, r.Priority = r.TenantOrDefault(), r.PriorityOrDefault()
	return nil
}

// TenantOrDefault is the run's tenant: thread.DefaultTenant for a record
// written before tenants.
func (r *Record) TenantOrDefault() string { return thread.TenantOrDefault(r.Tenant) }

// PriorityOrDefault is the run's priority: thread.DefaultPriority for a
// record written before priorities.
func (r *Record) PriorityOrDefault() int { return thread.PriorityOrDefault(r.Priority) }

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// PendingApproval is a tool call waiting for a person's decision.
type PendingApproval struct {
	CallID string `json:"call_id"`
	// RequestID is the nonce of this request for a decision, made when the
	// call was gated: call ids repeat (call_1_1 in every thread of a
	// chain, again in a rerun turn), so a decision link carries it and
	// decides this request only (DecideRequest).
	RequestID   string          `json:"request_id,omitempty"`
	Tool        string          `json:"tool"`
	Input       json.RawMessage `json:"input"`
	RequestedAt time.Time       `json:"requested_at"`
	// Deadline, when set, is when OnTimeout decides the call.
	Deadline  time.Time `json:"deadline,omitzero"`
	OnTimeout string    `json:"on_timeout,omitempty"`
}

// Stall is what a running thread is stuck on, and since when.
type Stall struct {
	On    string    `json:"on"` // registry.StalledOnStorage
	Since time.Time `json:"since"`
	// Op is the operation that fails (put, get, list, ...) and Error its
	// last failure.
	Op    string `json:"op,omitempty"`
	Error string `json:"error,omitempty"`
}

// Line says the stall in one line, as of now: "on storage for 23s (put:
// connection refused)".
func (s *Stall) Line(now time.Time) string {
	line := fmt.Sprintf("on %s for %s", s.On, now.Sub(s.Since).Round(time.Second))
	switch {
	case s.Op != "" && s.Error != "":
		line += fmt.Sprintf(" (%s: %s)", s.Op, s.Error)
	case s.Error != "":
		line += fmt.Sprintf(" (%s)", s.Error)
	}
	return line
}

// Tidy returns the error with a message that does not repeat its code:
// a limit error's text begins with its code ("spend_exceeded: 0.6 of
// 0.5") and a provider error's with its class ("provider transient: HTTP
// 503: overloaded" under provider_transient), which "code: message" would
// say twice. Nil stays nil.
func (e *ErrorInfo) Tidy() *ErrorInfo {
	if e == nil {
		return nil
	}
	msg := e.Message
	spaced := strings.ReplaceAll(e.Code, "_", " ")
	for e.Code != "" {
		rest, ok := strings.CutPrefix(msg, e.Code+": ")
		if !ok {
			rest, ok = strings.CutPrefix(msg, spaced+": ")
		}
		if !ok || strings.TrimSpace(rest) == "" {
			break
		}
		msg = rest
	}
	return &ErrorInfo{Code: e.Code, Message: msg}
}

// Line is the error as one line, "code: message", each said once.
func (e *ErrorInfo) Line() string {
	t := e.Tidy()
	if t.Message == "" {
		return t.Code
	}
	return t.Code + ": " + t.Message
}
