package transcript

import "encoding/json"

// Graph run events (spec: state graphs, transcript events). A graph run's
// transcript is a thread's (the envelope, segments, signatures), with
// these event types beside the shared ones (tool_call_start and
// tool_call_result for tool steps, child_spawned, child_refused,
// approval_requested, approval_decided, hook_fired, limit_exceeded and
// checkpoint).
const (
	TypeGraphStarted         = "graph_started"
	TypeStepStarted          = "step_started"
	TypeForeachItemCompleted = "foreach_item_completed"
	TypeForeachCompleted     = "foreach_completed"
	TypeStepCompleted        = "step_completed"
	TypeStateCheckpoint      = "state_checkpoint"
	TypeGraphWaiting         = "graph_waiting"
	TypeGraphCompleted       = "graph_completed"
	TypeGraphError           = "graph_error"
	TypeGraphCancelled       = "graph_cancelled"
	TypeGraphResumed         = "graph_resumed" // written in the old run when a user resumes it
)

// ArtifactGraphState names the state snapshot a graph checkpoint attests:
// its SHA-256 is the snapshot's content address.
const ArtifactGraphState = "graph_state"

// GraphStarted is the payload of graph_started.
type GraphStarted struct {
	Graph        string          `json:"graph"`
	GraphDigest  string          `json:"graph_digest"`
	Bundle       string          `json:"bundle"`
	StartNode    string          `json:"start_node"`
	Inputs       json.RawMessage `json:"inputs,omitempty"`
	Limits       json.RawMessage `json:"limits,omitempty"`
	Capabilities []string        `json:"capabilities,omitempty"`
	ResumedFrom  string          `json:"resumed_from,omitempty"`
	ForkedFrom   string          `json:"forked_from,omitempty"`
	ForkStep     int             `json:"fork_step,omitempty"`
	FromNode     string          `json:"from_node,omitempty"`
	StateEdits   []string        `json:"state_edits,omitempty"`
	// Tenant and Priority are the run's (its root's), as in
	// thread_started.
	Tenant   string `json:"tenant,omitempty"`
	Priority int    `json:"priority,omitempty"`
	// Tags are the run's (its root's), as in thread_started.
	Tags map[string]string `json:"tags,omitempty"`
}

// StepAction names what a step runs: one of Tool, Directive, Graph.
type StepAction struct {
	Tool      string `json:"tool,omitempty"`
	Directive string `json:"directive,omitempty"`
	Graph     string `json:"graph,omitempty"`
}

// StepStarted is the payload of step_started. Children are the planned
// child ids by item index ("0" for a single child), recorded before any
// of them starts.
type StepStarted struct {
	Step      int               `json:"step"`
	Node      string            `json:"node"`
	Kind      string            `json:"kind"`
	Attempt   int               `json:"attempt"`
	Action    *StepAction       `json:"action,omitempty"`
	Children  map[string]string `json:"children,omitempty"`
	StartedAt string            `json:"started_at"`
}

// ForeachItemCompleted is the payload of foreach_item_completed.
type ForeachItemCompleted struct {
	Step         int    `json:"step"`
	Node         string `json:"node"`
	Index        int    `json:"index"`
	Status       string `json:"status"` // ok | error
	ThreadID     string `json:"thread_id,omitempty"`
	ResultSHA256 string `json:"result_sha256,omitempty"`
	// Results is the address of the run's stored object holding this
	// item's result (one per batch of items settled together).
	Results string `json:"results,omitempty"`
	Error   *Error `json:"error,omitempty"`
}

// ForeachCompleted is the payload of foreach_completed.
type ForeachCompleted struct {
	Step      int    `json:"step"`
	Node      string `json:"node"`
	Items     int    `json:"items"`
	Succeeded int    `json:"succeeded"`
	Failed    int    `json:"failed"`
	NextNode  string `json:"next_node,omitempty"`
}

// StepCompleted is the payload of step_completed: a step ended ok, in
// error or for a retry, with the route it took.
type StepCompleted struct {
	Step         int             `json:"step"`
	Node         string          `json:"node"`
	Kind         string          `json:"kind,omitempty"`
	Status       string          `json:"status"`    // ok | error | retry
	RoutedBy     string          `json:"routed_by"` // next | on_error | continue | retry | return
	NextNode     string          `json:"next_node,omitempty"`
	ElapsedMS    int64           `json:"elapsed_ms"`
	ThreadIDs    []string        `json:"thread_ids,omitempty"`
	Error        *GraphStepError `json:"error,omitempty"`
	Result       json.RawMessage `json:"result,omitempty"` // bounded
	ResultSHA256 string          `json:"result_sha256,omitempty"`
	ResultBytes  int             `json:"result_bytes,omitempty"`
	Assigned     []string        `json:"assigned,omitempty"`
	// Unresolved names the assigned keys whose whole reference resolved
	// to nothing and so were assigned null (graph.Unresolved).
	Unresolved  []string `json:"unresolved,omitempty"`
	Attempt     int      `json:"attempt,omitempty"`
	StartedAt   string   `json:"started_at,omitempty"`
	ItemsDone   int      `json:"items_done,omitempty"`
	ItemsTotal  int      `json:"items_total,omitempty"`
	ItemsFailed int      `json:"items_failed,omitempty"`
}

// GraphStepError is a step's failure.
type GraphStepError struct {
	Code     string `json:"code"`
	Message  string `json:"message"`
	ThreadID string `json:"thread_id,omitempty"`
}

// GraphWaiting is the payload of graph_waiting.
type GraphWaiting struct {
	WaitingFor string   `json:"waiting_for"` // children | approval | retry | sleep | message
	Threads    []string `json:"threads,omitempty"`
	CallID     string   `json:"call_id,omitempty"`
	Step       int      `json:"step,omitempty"`
	Node       string   `json:"node,omitempty"`
	// WakeAt is when a sleep ends, or a wait for a message times out
	// (RFC 3339).
	WakeAt string `json:"wake_at,omitempty"`
	// MessageName is the name of the message a wait_message node waits for.
	MessageName string `json:"message_name,omitempty"`
}

// GraphCompleted is the payload of graph_completed.
type GraphCompleted struct {
	Status           string         `json:"status"`
	Steps            int            `json:"steps"`
	Outputs          map[string]any `json:"outputs"`
	SuppressedErrors int            `json:"suppressed_errors"`
	ElapsedMS        int64          `json:"elapsed_ms"`
	Spend            float64        `json:"spend"`
}

// GraphErrorEvent is the payload of graph_error.
type GraphErrorEvent struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Node    string `json:"node,omitempty"`
	Step    int    `json:"step,omitempty"`
	Cause   string `json:"cause,omitempty"`
}

// GraphCancelled is the payload of graph_cancelled.
type GraphCancelled struct {
	Step              int      `json:"step"`
	Node              string   `json:"node,omitempty"`
	RequestedBy       string   `json:"requested_by,omitempty"`
	CancelledChildren []string `json:"cancelled_children,omitempty"`
	Reason            string   `json:"reason,omitempty"`
}

// GraphResumed is the payload of graph_resumed.
type GraphResumed struct {
	ContinuationRunID string   `json:"continuation_run_id"`
	FromNode          string   `json:"from_node,omitempty"`
	StateEdits        []string `json:"state_edits,omitempty"`
}

// StateCheckpoint is the payload of state_checkpoint, the graph's
// checkpoint record that ends every segment of a graph run (before the
// transcript's own checkpoint event, whose state carries the same record
// in its extra "graph"): the step counter, the node the run goes into
// next, the state snapshot's address and size, and the step in flight.
type StateCheckpoint struct {
	Step             int             `json:"step"`
	NextNode         string          `json:"next_node"`
	StateSHA256      string          `json:"state_sha256"`
	StateBytes       int             `json:"state_bytes"`
	Attempt          map[string]int  `json:"attempt,omitempty"`
	SuppressedErrors int             `json:"suppressed_errors"`
	Pending          json.RawMessage `json:"pending"`
}
