package graph

import (
	"time"

	"github.com/spool-run/spool/hooks"
	"github.com/spool-run/spool/thread"
)

// Node kinds.
const (
	KindAction   = "action"
	KindForeach  = "foreach"
	KindGate     = "gate"
	KindReturn   = "return"
	KindApproval = "approval"
	KindWait     = "wait"
	KindSleep    = "sleep"
	// KindWaitMessage waits for a message sent to the run (section 4.8).
	KindWaitMessage = "wait_message"
)

// Kinds lists the node kinds in the order the spec introduces them.
var Kinds = []string{KindAction, KindForeach, KindGate, KindReturn, KindApproval, KindWait, KindSleep, KindWaitMessage}

// Graph-wide error modes (config.on_error); any other value names a node.
const (
	OnErrorFail     = "fail"
	OnErrorContinue = "continue"
)

// Defaults and hard caps.
const (
	// DefaultMaxConcurrency is config.max_concurrency when it is absent.
	DefaultMaxConcurrency = 10
	// MaxConcurrencyCap bounds every max_concurrency.
	MaxConcurrencyCap = 256
	// DefaultMaxItems is a foreach's max_items when neither the node nor
	// the runtime's configuration (graph.max_foreach_items) sets one.
	DefaultMaxItems = 1000
	// DefaultMaxSteps is max_steps when the graph does not set it.
	DefaultMaxSteps = 100
	// MaxStepsCap is the hard cap on max_steps.
	MaxStepsCap = 10000
	// MaxRetryAttempts bounds retry.attempts (all tries, the first included).
	MaxRetryAttempts = 10
	// DefaultBackoff is retry.backoff when a retry block leaves it out.
	DefaultBackoff = time.Second
)

// ThreadDirectiveTool is the reference's tool for starting a directive;
// its capability grants every directive action (section 16).
const ThreadDirectiveTool = "rye/agent/threads/thread_directive"

// Graph is a parsed, normalized graph file.
type Graph struct {
	Name           string // set by Parse from its argument
	Version        string
	Description    string
	Permissions    []string
	Limits         Limits
	Inputs         *Schema // nil: no inputs schema, any inputs are accepted unchanged
	EnvRequires    []string
	Start          string
	Nodes          map[string]*Node
	Order          []string // node names in file order
	OnError        string   // "fail" (default), "continue", or a node name
	State          map[string]any
	Hooks          []Hook
	MaxConcurrency int               // config.max_concurrency, default 10
	Meta           map[string]string // tool_type, executor_id, category, as written

	// parsed holds what Parse found that Validate cannot see again
	// (unknown keys, bad values, ignored reference keys).
	parsed Report
	// maxStepsKey is where the file set max_steps ("limits.max_steps"
	// unless config.max_steps overrode it).
	maxStepsKey string
}

// Limits are the graph's limits: the directive limit keys plus max_steps
// (config.max_steps overrides limits.max_steps). Nil fields are unset.
type Limits struct {
	thread.Limits
	MaxSteps *int
}

// Node is one node of a graph. Fields that do not belong to the node's
// kind are zero.
type Node struct {
	Name, Kind, Description string
	Action                  *Action        // action and foreach nodes
	Assign                  map[string]any // raw values (strings may hold ${...}); nil when absent
	Next                    []Edge         // "next: x" is [{To: x}]; absent is nil (implicit return)
	OnError                 string         // node to route a failure to; "" when absent
	Timeout                 time.Duration  // 0: none
	Retry                   *Retry         // nil: no retry
	EnvRequires             []string

	// foreach
	Over           string
	As             string // default "item"
	Parallel       bool
	MaxConcurrency int    // 0: the graph's MaxConcurrency
	MaxItems       int    // 0: the runtime's default (DefaultMaxItems)
	OnItemError    string // "fail" (default) or "continue"
	// MinSuccess (0: unset) ends the foreach as soon as that many items
	// succeeded (the rest are cancelled) and fails it as soon as that
	// many can no longer succeed; a failed item alone does not stop it.
	MinSuccess int
	Collect    string // foreach and wait: state key for result.results

	// return
	Output any // nil: {}

	// approval
	Prompt    string
	Show      any
	OnTimeout string // approval: "deny" (default) or "approve"; wait_message: the node taken on timeout ("" fails wait_timeout)

	// wait
	Threads      string
	Mode         string // "all" (default) or "any"
	OnChildError string // "fail" (default) or "continue"

	// sleep: exactly one of For (a duration) and Until (an RFC 3339
	// time), as written; either may hold ${...} (SleepWake reads them).
	For, Until string

	// wait_message: the message name it takes, and the JSON Schema its
	// data must meet (nil: any data), parsed and as written.
	Message       string
	MessageSchema *Schema
	SchemaValue   any
}

// Action says what an action or foreach node (or a hook) does. Exactly one
// of Tool, Directive and Graph is set.
type Action struct {
	Tool, Directive, Graph string
	Params                 map[string]any // tool params
	Inputs                 map[string]any // directive or graph inputs
	Async                  bool
	Limits                 map[string]any // limit overrides as written ({turns: 8, spend: 0.1})
	Model                  string
	Reserve                bool
	Timeout                time.Duration

	// viaTool is the reference tool id when AsGraph turned a tool action
	// that names a graph into a graph action.
	viaTool string
}

// Edge is one entry of a node's next. When is nil on the default edge.
type Edge struct {
	When *hooks.Condition
	To   string
}

// Retry is a node's retry policy. Attempts counts every try, the first
// included (1..10).
type Retry struct {
	Attempts            int
	Backoff, MaxBackoff time.Duration // MaxBackoff 0: 10 × Backoff
}

// Hook is a graph hook (section 12). Action is set for the execute forms;
// Item is set instead for the hook primaries load and search, kept as
// written for the runtime's hook dispatcher.
type Hook struct {
	ID, Event string
	Condition *hooks.Condition
	Action    Action
	Item      *hooks.Action
}

// Graph hook events.
const (
	EventGraphStarted   = "graph_started"
	EventAfterStep      = "after_step"
	EventError          = "error"
	EventLimit          = "limit"
	EventGraphCompleted = "graph_completed"
)

// Events lists the graph hook events in lifecycle order.
var Events = []string{EventGraphStarted, EventAfterStep, EventError, EventLimit, EventGraphCompleted}

// Kind is the action's kind: "tool", "directive" or "graph" ("" when none
// is set).
func (a *Action) Kind() string {
	switch {
	case a == nil:
		return ""
	case a.Tool != "":
		return "tool"
	case a.Directive != "":
		return "directive"
	case a.Graph != "":
		return "graph"
	}
	return ""
}

// ID is the id of what the action runs, whatever its kind.
func (a *Action) ID() string {
	if a == nil {
		return ""
	}
	return a.Tool + a.Directive + a.Graph
}

// String is the action as the node table shows it: "tool git/changed_files".
func (a *Action) String() string {
	if a.Kind() == "" {
		return ""
	}
	return a.Kind() + " " + a.ID()
}

// MaxSteps is the graph's step limit: limits.max_steps, else
// DefaultMaxSteps.
func (g *Graph) MaxSteps() int {
	if g.Limits.MaxSteps != nil {
		return *g.Limits.MaxSteps
	}
	return DefaultMaxSteps
}

// Node returns the named node, nil when there is none.
func (g *Graph) Node(name string) *Node {
	if g == nil {
		return nil
	}
	return g.Nodes[name]
}

// Concurrency is the number of foreach items n may run at once: its own
// max_concurrency, else the graph's.
func (g *Graph) Concurrency(n *Node) int {
	if n.MaxConcurrency > 0 {
		return n.MaxConcurrency
	}
	if g.MaxConcurrency > 0 {
		return g.MaxConcurrency
	}
	return DefaultMaxConcurrency
}
