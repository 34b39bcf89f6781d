package registry

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/spool-run/spool/telemetry"
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
	CancelCascade bool  `json:"cancel_cascade,omitempty"`
	Activation    int64 `json:"activation"`
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
	// "approval" (CLI.md "People in the loop"); empty otherwise.
	WaitingFor string `json:"waiting_for,omitempty"`
	// PendingApprovals are the tool calls a thread waiting for approval
	// waits on.
	PendingApprovals []PendingApproval `json:"pending_approvals,omitempty"`
	// Stalled, while set, says what a running thread is stuck on (the
	// blob store, whose operations its worker tries again through an
	// outage): Activations.MarkStalled, cleared once the store answers.
	Stalled *Stall `json:"stalled,omitempty"`
	// StartedAt is when the first activation claimed the thread; the
	// duration limit counts from here. A thread not started yet (created)
	// has none, and its JSON no started_at.
	StartedAt time.Time `json:"started_at,omitzero"`
	// Transcript is how much of the thread's transcript is known to be
	// durable (Changes.Transcript): a verifier requires at least that
	// much. While the thread runs it lags the transcript by up to one
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
	// Extra holds every other hash field (Changes.Fields, and fields other
	// packages keep on the thread hash), raw.
	Extra map[string]string `json:"-"`
}

// Record kinds.
const (
	KindThread = "thread"
	KindGraph  = "graph"
)

// IsGraph reports whether r is a graph run.
func (r *Record) IsGraph() bool { return r.Kind == KindGraph }

// Graph run hash fields a graph's checkpoint commits (Changes.Fields).
const (
	CurrentNodeField      = "current_node"
	StepField             = "step"
	SuppressedErrorsField = "suppressed_errors"
	ItemsDoneField        = "items_done"
	ItemsTotalField       = "items_total"
	StateSHA256Field      = "state_sha256"
)

// ArtifactsDeletedField is the hash field (in Record.Extra) that retention
// sets, to the RFC 3339 time, on a finished thread whose persisted
// artifacts (transcript, thread.json, capabilities.md, ...) it deleted.
const ArtifactsDeletedField = "artifacts_deleted_at"

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
		GraphStep            *int    `json:"step,omitempty"`
		GraphNode            *string `json:"current_node,omitempty"`
		// ForkStep is a graph fork's step (its fork_turn), by the name
		// the graph spec gives it.
		ForkStep *int `json:"fork_step,omitempty"`
	}
	if r.Outputs == nil {
		r.Outputs = map[string]any{}
	}
	o := out{recordJSON: recordJSON(r), ParentID: nullable(r.ParentID),
		ContinuationOf: nullable(r.ContinuationOf), ContinuationThreadID: nullable(r.ContinuationThreadID)}
	if o.Kind == "" {
		o.Kind = KindThread
	}
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
	}
	v := in{recordJSON: (*recordJSON)(r)}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	r.ParentID, r.ContinuationOf, r.ContinuationThreadID = deref(v.ParentID), deref(v.ContinuationOf), deref(v.ContinuationThreadID)
	if r.Kind == "" {
		r.Kind = KindThread // written before records had a kind
	}
	return nil
}

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

// knownFields are the hash fields Record decodes; the rest go to Extra.
var knownFields = map[string]bool{
	"trace_parent": true, "trace_caller": true,
	"thread_id": true, "directive": true, "parent_id": true, "status": true, "continuation_thread_id": true,
	"continuation_of": true, "chain_root_id": true, "result": true, "outputs": true, "error": true, "cost": true,
	"limits": true, "model": true, "capabilities": true, "dropped_capabilities": true, "bundle": true, "inputs": true, "queue": true,
	"ancestors": true, "depth": true, "previous_thread_id": true, "created_at": true, "updated_at": true,
	"version": true, "cancel_requested": true, "cancel_cascade": true, "activation": true, "chain_index": true, "continuation_kind": true,
	"continuation_message": true, "started_at": true, "ledger_path": true, "waiting_for": true, "pending_approvals": true, StalledField: true, "model_override": true, "transcript_segments": true, "transcript_chain_hash": true,
	"forked_from": true, "fork_turn": true, "fork_segment": true, "fork_chain_hash": true, "fork_message": true, "workspace": true,
	"kind": true, "graph_digest": true, CurrentNodeField: true, StepField: true, "max_steps": true, SuppressedErrorsField: true,
	ItemsDoneField: true, ItemsTotalField: true, StateSHA256Field: true,
}

// parseRecord decodes a thread hash.
func parseRecord(m map[string]string) (*Record, error) {
	r := &Record{
		ThreadID: m["thread_id"], Directive: m["directive"], ParentID: m["parent_id"], Status: thread.Status(m["status"]),
		ContinuationThreadID: m["continuation_thread_id"], ContinuationOf: m["continuation_of"], ChainRootID: m["chain_root_id"],
		Result: m["result"], Model: m["model"], Bundle: m["bundle"], Queue: m["queue"],
		PreviousThreadID: m["previous_thread_id"], CancelRequested: m["cancel_requested"] == "1",
		CancelCascade:    m["cancel_cascade"] == "1",
		ContinuationKind: m["continuation_kind"], ContinuationMessage: m["continuation_message"], WaitingFor: m["waiting_for"], ModelOverride: m["model_override"],
		Transcript: TranscriptMark{ChainHash: m["transcript_chain_hash"]},
		ForkedFrom: m["forked_from"], ForkChainHash: m["fork_chain_hash"], ForkMessage: m["fork_message"], Workspace: m["workspace"],
		Kind: m["kind"], GraphDigest: m["graph_digest"], CurrentNode: m[CurrentNodeField], StateSHA256: m[StateSHA256Field],
	}
	if r.Kind == "" {
		r.Kind = KindThread
	}
	bad := func(field string, err error) error {
		return fmt.Errorf("thread %q: registry field %s: %w", r.ThreadID, field, err)
	}
	for _, jf := range []struct {
		name string
		v    any
	}{{"outputs", &r.Outputs}, {"cost", &r.Cost}, {"limits", &r.Limits}, {"capabilities", &r.Capabilities}, {"dropped_capabilities", &r.DroppedCapabilities},
		{"inputs", &r.Inputs}, {"ancestors", &r.Ancestors}, {"ledger_path", &r.LedgerPath}, {"pending_approvals", &r.PendingApprovals},
		{StalledField, &r.Stalled}} {
		if s := m[jf.name]; s != "" {
			if err := json.Unmarshal([]byte(s), jf.v); err != nil {
				return nil, bad(jf.name, err)
			}
		}
	}
	r.TraceParent, r.TraceCaller = m["trace_parent"], m["trace_caller"]
	r.TraceID = telemetry.TraceID(r.TraceParent)
	if s := m["error"]; s != "" {
		r.Error = &ErrorInfo{}
		if err := json.Unmarshal([]byte(s), r.Error); err != nil {
			return nil, bad("error", err)
		}
	}
	for _, f := range []struct {
		name string
		p    *int64
	}{{"version", &r.Version}, {"activation", &r.Activation}, {"transcript_segments", &r.Transcript.Segments}, {"fork_segment", &r.ForkSegment}} {
		if s := m[f.name]; s != "" {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return nil, bad(f.name, err)
			}
			*f.p = n
		}
	}
	for _, f := range []struct {
		name string
		p    *int
	}{{"depth", &r.Depth}, {"chain_index", &r.ChainIndex}, {"fork_turn", &r.ForkTurn}, {StepField, &r.Step}, {"max_steps", &r.MaxSteps},
		{SuppressedErrorsField, &r.SuppressedErrors}, {ItemsDoneField, &r.ItemsDone}, {ItemsTotalField, &r.ItemsTotal}} {
		if s := m[f.name]; s != "" {
			n, err := strconv.Atoi(s)
			if err != nil {
				return nil, bad(f.name, err)
			}
			*f.p = n
		}
	}
	for _, f := range []struct {
		name string
		p    *time.Time
	}{{"created_at", &r.CreatedAt}, {"updated_at", &r.UpdatedAt}, {"started_at", &r.StartedAt}} {
		if s := m[f.name]; s != "" {
			t, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				return nil, bad(f.name, err)
			}
			*f.p = t
		}
	}
	for k, v := range m {
		if !knownFields[k] {
			if r.Extra == nil {
				r.Extra = map[string]string{}
			}
			r.Extra[k] = v
		}
	}
	return r, nil
}

// parseFlat decodes a script's HGETALL reply (a flat field/value list).
func parseFlat(v any) (*Record, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("registry script: HGETALL reply is %T", v)
	}
	m := make(map[string]string, len(list)/2)
	for i := 0; i+1 < len(list); i += 2 {
		k, _ := list[i].(string)
		s, _ := list[i+1].(string)
		m[k] = s
	}
	return parseRecord(m)
}
