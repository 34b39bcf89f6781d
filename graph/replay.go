package graph

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Replay (spool graph replay, section 14.16) walks a graph against the
// step results a run recorded, running nothing: each recorded step's
// result goes through the node's assign and next as the graph says now,
// and the edge the graph takes must be the one the run took, the keys it
// assigns the ones the run assigned, and a return node's output the
// run's outputs. A graph author edits a graph and replays past runs
// against it to see which would have gone another way.
//
// A step that failed is routed by the error procedure of section 9 as
// the graph says now (retry, the node's on_error, config.on_error's node
// or continue, else the run fails), with the failure's code. A step whose
// result the transcript did not keep (it was over max_event_result_bytes)
// ends the replay there: what follows cannot be checked.

// ReplayStep is one step a run recorded (its step_completed event).
type ReplayStep struct {
	Step     int
	Node     string
	Status   string // ok | error | retry
	RoutedBy string
	NextNode string
	// Result is the step's result as recorded; Kept is false when the
	// transcript did not keep it (ResultBytes says how large it was).
	Result      json.RawMessage
	Kept        bool
	ResultBytes int
	Assigned    []string
	ErrorCode   string
	ErrorMsg    string
	Attempt     int
}

// ReplayRun is what a replay needs of the run besides its steps.
type ReplayRun struct {
	ID, Graph, Digest, ParentID string
	Inputs                      map[string]any
	StartedAt                   time.Time
	// Outputs are the run's outputs, when it completed.
	Outputs   map[string]any
	Completed bool
}

// ReplayReport is how a replay went: the steps it checked, and the
// first that went another way (nil when none did), or where it had to
// stop.
type ReplayReport struct {
	Steps      int         `json:"steps"`
	Divergence *Divergence `json:"divergence,omitempty"`
	Stopped    *Divergence `json:"stopped,omitempty"`
}

// Divergence is a step the graph takes another way than the run did.
type Divergence struct {
	Step    int    `json:"step"`
	Node    string `json:"node"`
	Message string `json:"message"`
}

// Replay walks g against steps, the steps run recorded, in order.
func Replay(g *Graph, run ReplayRun, steps []ReplayStep) ReplayReport {
	r := replayer{g: g, run: run, state: g.InitialState(run.Inputs), cursor: g.Start}
	var rep ReplayReport
	for i, s := range steps {
		if s.Status != StepStatusOK && s.Status != StepStatusError && s.Status != StepStatusRetry {
			break // in flight, or cancelled: nothing to check
		}
		if stop := r.unchecked(s); stop != nil {
			rep.Stopped = stop
			return rep
		}
		if d := r.step(s, i == len(steps)-1); d != nil {
			rep.Divergence = d
			return rep
		}
		rep.Steps++
	}
	return rep
}

// replayer is a replay in progress: the state and the node it is at.
type replayer struct {
	g      *Graph
	run    ReplayRun
	state  map[string]any
	cursor string
}

// unchecked is where a replay must stop at s: its result was not kept.
func (r *replayer) unchecked(s ReplayStep) *Divergence {
	if s.Status == StepStatusOK && !s.Kept && s.ResultBytes > 0 {
		return &Divergence{Step: s.Step, Node: s.Node, Message: fmt.Sprintf("its result (%d bytes) is over max_event_result_bytes and was not kept: the replay stops here", s.ResultBytes)}
	}
	return nil
}

// step checks one recorded step; last: the run's last.
func (r *replayer) step(s ReplayStep, last bool) *Divergence {
	diverged := func(format string, a ...any) *Divergence {
		return &Divergence{Step: s.Step, Node: s.Node, Message: fmt.Sprintf(format, a...)}
	}
	if s.Node != r.cursor {
		return diverged("the graph goes to %s here, the run went to %s", orEnd(r.cursor), s.Node)
	}
	n := r.g.Nodes[s.Node]
	if n == nil {
		return diverged("the graph has no node %s now", s.Node)
	}
	scope := NewScope(r.state, r.run.Inputs, nil, RunScope{ID: r.run.ID, Graph: r.run.Graph, GraphDigest: r.run.Digest,
		ParentID: r.run.ParentID, Step: s.Step, Node: n.Name, Attempt: s.Attempt, StartedAt: r.run.StartedAt})
	retries := n.Retry != nil && Retryable(s.ErrorCode) && s.Attempt < n.Retry.Attempts
	var next, routedBy string
	var d *Divergence
	switch {
	case s.Status == StepStatusOK:
		next, routedBy, d = r.ok(n, s, scope, last, diverged)
	case s.Status == StepStatusRetry && !retries:
		return diverged("the run retried it after %s, the graph does not retry it now", s.ErrorCode)
	case retries:
		next, routedBy = n.Name, "retry"
	default:
		next, routedBy, d = r.failed(n, s, scope, diverged)
	}
	if d != nil {
		return d
	}
	if next != s.NextNode || routedBy != s.RoutedBy {
		return diverged("the graph routes to %s (%s), the run went to %s (%s)", orEnd(next), routedBy, orEnd(s.NextNode), s.RoutedBy)
	}
	r.cursor = next
	return nil
}

// ok checks a step that succeeded: its assign and its route.
func (r *replayer) ok(n *Node, s ReplayStep, scope map[string]any, last bool, diverged func(string, ...any) *Divergence) (string, string, *Divergence) {
	var result any
	if s.Kept && len(s.Result) > 0 {
		if err := json.Unmarshal(s.Result, &result); err != nil {
			return "", "", diverged("its recorded result does not decode: %v", err)
		}
		scope[ScopeResult] = result
	}
	st, keys, err := Assign(n, r.state, scope)
	if err != nil {
		return "", "", diverged("its assign fails on the recorded result: %v", err)
	}
	slices.Sort(keys)
	want := slices.Sorted(slices.Values(s.Assigned))
	if !slices.Equal(keys, want) {
		return "", "", diverged("the graph assigns [%s], the run assigned [%s]", strings.Join(keys, " "), strings.Join(want, " "))
	}
	scope[ScopeState] = st
	r.state = st
	if n.Kind == KindReturn {
		if last && r.run.Completed {
			out, err := Outputs(n, scope)
			if err != nil {
				return "", "", diverged("its output fails: %v", err)
			}
			if !sameValue(out, r.run.Outputs) {
				b, _ := json.Marshal(out)
				w, _ := json.Marshal(r.run.Outputs)
				return "", "", diverged("the graph returns %s, the run returned %s", b, w)
			}
		}
		return "", "return", nil
	}
	next, err := Route(n, scope)
	if err != nil {
		return "", "", diverged("routing fails: %v", err)
	}
	routedBy := "next"
	if n.TimeoutNode() != "" && TimedOut(result) {
		routedBy = "on_timeout"
	}
	return next, routedBy, nil
}

// failed routes a step that failed as the error procedure does now, and
// sets the state it leaves (_last_error, and _errors under continue).
func (r *replayer) failed(n *Node, s ReplayStep, scope map[string]any, diverged func(string, ...any) *Divergence) (string, string, *Divergence) {
	st := maps.Clone(r.state)
	st["_last_error"] = map[string]any{"node": n.Name, "step": s.Step, "code": s.ErrorCode, "message": s.ErrorMsg}
	r.state = st
	switch {
	case n.OnError != "":
		return n.OnError, "on_error", nil
	case r.g.OnError == OnErrorContinue:
		errs, _ := st["_errors"].([]any)
		st["_errors"] = append(append([]any(nil), errs...), map[string]any{"step": s.Step, "node": n.Name, "code": s.ErrorCode, "message": s.ErrorMsg})
		if n.Kind == KindReturn {
			return "", "continue", nil
		}
		scope[ScopeState] = st
		next, err := Route(n, scope)
		if err != nil {
			return "", "fail", nil
		}
		return next, "continue", nil
	case r.g.OnError != "" && r.g.OnError != OnErrorFail:
		return r.g.OnError, "on_error", nil
	}
	return "", "fail", nil
}

// orEnd names next, "" being the run's end.
func orEnd(next string) string {
	if next == "" {
		return "the end"
	}
	return next
}
