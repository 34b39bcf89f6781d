package spooltype

import (
	"encoding/json"
	"time"
)

// Node statuses of the node table (CLI.md: the words outside tools rely
// on).
const (
	NodeNotReached = "not_reached"
	NodeRunning    = "running"
	NodeWaiting    = "waiting"
	NodeCompleted  = "completed"
	NodeError      = "error"
	NodeCancelled  = "cancelled"
)

// StepRecord is what the node table and the render need of one step: the
// step_started / step_completed (and foreach_completed) events of a run,
// in step order. A step in flight has Status ""; a step the run's end
// overtook (a cancel, or a run-level failure such as the duration limit,
// while it was in flight) has Status "cancelled" or "error" and Ended the
// time the run's end was recorded. Started and Ended are absent when not
// known (Ended while the step is in flight).
//
// The item counts of a foreach or wait step: ItemsTotal its items (also
// once the step or the run ended); ItemsDone those that ended, whatever
// way (ok, failed or cancelled; for a step a cancel ended, the children it
// stopped in flight too); ItemsFailed those that failed, ItemsCancelled
// those whose child was cancelled (neither counts the other). The items
// that succeeded are ItemsDone - ItemsFailed - ItemsCancelled, and those
// that never started ItemsTotal - ItemsDone once the step is over.
type StepRecord struct {
	Step      int       `json:"step"`
	Node      string    `json:"node"`
	Kind      string    `json:"kind"`
	Status    string    `json:"status"`              // ok | error | retry | cancelled; "" in flight
	RoutedBy  string    `json:"routed_by,omitempty"` // next | on_error | continue | retry
	Started   time.Time `json:"started,omitzero"`
	Ended     time.Time `json:"ended,omitzero"`
	ThreadIDs []string  `json:"thread_ids,omitempty"`
	Error     string    `json:"error,omitempty"` // "code: message"
	Assigned  []string  `json:"assigned,omitempty"`
	// Unresolved: assigned keys whose whole reference resolved to
	// nothing, so null was assigned ("content: ${result.content}
	// resolved to nothing (result has text)").
	Unresolved []string `json:"unresolved,omitempty"`
	NextNode   string   `json:"next_node,omitempty"`
	Action     string   `json:"action,omitempty"` // "tool git/changed_files" as run (ids interpolated); "" uses the graph's
	// Run is the run the step ran in when it is not the run shown: a run
	// it resumed (with the runs that one resumed), or the run a fork was
	// forked from, whose steps up to the fork's are the fork's story too.
	Run string `json:"run,omitempty"`

	ItemsDone      int `json:"items_done,omitempty"` // foreach or wait: items that ended
	ItemsTotal     int `json:"items_total,omitempty"`
	ItemsFailed    int `json:"items_failed,omitempty"`
	ItemsCancelled int `json:"items_cancelled,omitempty"`
}

// ItemsSucceeded is how many of the step's items succeeded.
func (s StepRecord) ItemsSucceeded() int {
	return max(0, s.ItemsDone-s.ItemsFailed-s.ItemsCancelled)
}

// ItemsNotStarted is how many of the step's items never started: those
// that had not ended when the step was over (0 while it is in flight).
func (s StepRecord) ItemsNotStarted() int {
	if s.Status == "" {
		return 0
	}
	return max(0, s.ItemsTotal-s.ItemsDone)
}

// Duration is the step's elapsed time (0 while it is in flight).
func (s StepRecord) Duration() time.Duration {
	if s.Ended.IsZero() || s.Started.IsZero() || s.Ended.Before(s.Started) {
		return 0
	}
	return s.Ended.Sub(s.Started)
}

// NodeRow is one row of the node table (11.2), also `graph show --json`'s
// nodes.
type NodeRow struct {
	Index      int    `json:"index"`
	Node       string `json:"node"`
	Kind       string `json:"kind"`
	Status     string `json:"status"` // not_reached | running | waiting | completed | error | cancelled
	Visits     int    `json:"visits"`
	LastStep   int    `json:"last_step,omitempty"`
	DurationMS int64  `json:"duration_ms,omitempty"`
	Action     string `json:"action,omitempty"` // "tool git/changed_files"
	Children   string `json:"children,omitempty"`
	Detail     string `json:"detail,omitempty"`
	Routed     bool   `json:"routed,omitempty"`  // the last visit failed and its error was routed (on_error or continue)
	Retried    bool   `json:"retried,omitempty"` // some visit was retried
	// Run is the run the last visit ran in when it is not the run shown
	// (StepRecord.Run): a node a resumed run's predecessor took.
	Run string `json:"run,omitempty"`
}

// Icon is the row's status icon in the render.
func (r NodeRow) Icon() string {
	switch r.Status {
	case NodeCancelled:
		return "⏹"
	case NodeRunning:
		return "🔄"
	case NodeWaiting:
		return "⏸"
	case NodeNotReached:
		return "⏳"
	case NodeError:
		if r.Routed {
			return "↪"
		}
		return "❌"
	case NodeCompleted:
		if r.Retried {
			return "🔁"
		}
		return "✅"
	}
	return "?"
}

// GraphRun is the body of GET /v1/graphs/ID: the run's record (every
// field of Record at the top level, as `spool graph show
// --json` prints it), its node table and its steps.
type GraphRun struct {
	Record *Record
	// Nodes is one row per node, in file order.
	Nodes []NodeRow `json:"nodes"`
	// Steps are the steps the run took, in order.
	Steps []StepRecord `json:"steps"`
	// WakeAt is when a sleeping run (waiting_for sleep) wakes: its sleep's
	// end, or its duration limit when that comes first.
	WakeAt time.Time `json:"wake_at,omitzero"`
	// MessageName is the name of the message a run waiting at a
	// wait_message node (waiting_for message) waits for; its wake_at is
	// the wait's timeout, when it has one.
	MessageName string `json:"message_name,omitempty"`
}

// MarshalJSON writes the record's fields with nodes and steps beside
// them.
func (g GraphRun) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(g.Record)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	if g.Nodes == nil {
		g.Nodes = []NodeRow{}
	}
	if g.Steps == nil {
		g.Steps = []StepRecord{}
	}
	m["nodes"], m["steps"] = g.Nodes, g.Steps
	if !g.WakeAt.IsZero() {
		m["wake_at"] = g.WakeAt
	}
	if g.MessageName != "" {
		m["message_name"] = g.MessageName
	}
	return json.Marshal(m)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (g *GraphRun) UnmarshalJSON(b []byte) error {
	var rec Record
	if err := json.Unmarshal(b, &rec); err != nil {
		return err
	}
	var rest struct {
		Nodes       []NodeRow    `json:"nodes"`
		Steps       []StepRecord `json:"steps"`
		WakeAt      time.Time    `json:"wake_at"`
		MessageName string       `json:"message_name"`
	}
	if err := json.Unmarshal(b, &rest); err != nil {
		return err
	}
	g.Record, g.Nodes, g.Steps, g.WakeAt, g.MessageName = &rec, rest.Nodes, rest.Steps, rest.WakeAt, rest.MessageName
	return nil
}

// GraphState is the body of GET /v1/graphs/ID/state: the run's state
// after a step, as `spool graph state --json` prints it.
type GraphState struct {
	RunID string         `json:"run_id"`
	Step  int            `json:"step"`
	State map[string]any `json:"state"`
}
