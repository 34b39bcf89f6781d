package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strings"
	"time"

	"github.com/spool-run/spool/graph"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// codeMaxSteps is the run-level failure of a run past max_steps.
const codeMaxSteps = "max_steps_exceeded"

// stepRun is a step in progress.
type stepRun struct {
	n             *graph.Node
	step, attempt int
	// startedAt is the step's logical start (run.started_at): the
	// checkpoint it starts from, or its planning segment's time.
	startedAt time.Time
	began     time.Time
	scope     map[string]any
	action    string // what it runs, "tool x" (interpolated)
	threadIDs []string
	items     [3]int // done, total, failed
	// outputs are a return node's.
	outputs map[string]any
}

// newStep is the step at node n, at step number step and attempt, whose
// logical start is at.
func (r *graphRun) newStep(n *graph.Node, step, attempt int, at time.Time) *stepRun {
	run := graph.RunScope{ID: r.id(), Graph: r.g.Name, GraphDigest: r.rec.GraphDigest, ParentID: r.rec.ParentID,
		Step: step, Node: n.Name, Attempt: attempt, StartedAt: at}
	return &stepRun{n: n, step: step, attempt: attempt, startedAt: at, began: time.Now(),
		scope: graph.NewScope(r.state, r.rec.Inputs, nil, run)}
}

// stepErr makes a step failure.
func stepErr(code, format string, args ...any) *graph.StepError {
	return &graph.StepError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// step starts the step at the cursor, as its node's kind does: a gate,
// a return or a tool action ends here and now; a child, a foreach, a
// wait, an approval, a sleep or a wait for a message may pend
// (pendingKind). s is nil when the run's
// outcome was decided without a step.
func (r *graphRun) step(ctx context.Context) (*stepRun, stepEnd, error) {
	n := r.g.Node(r.cp.NextNode)
	if n == nil {
		r.decideError("graph_invalid", fmt.Sprintf("the run's cursor names node %q, which the graph does not have", r.cp.NextNode), r.cp.NextNode, r.cp.Step, "")
		return nil, stepOpen(finished), nil
	}
	if r.cp.Attempt == nil {
		r.cp.Attempt = map[string]int{}
	}
	s := r.newStep(n, r.cp.Step+1, r.cp.Attempt[n.Name]+1, r.cp.At)
	r.steps++
	var end stepEnd
	var err error
	switch n.Kind {
	case graph.KindGate:
		end = stepOK(nil)
	case graph.KindReturn:
		end, err = r.returnStep(s)
	case graph.KindAction:
		end, err = r.startAction(ctx, s)
	case graph.KindForeach:
		end, err = foreachStep{}.start(ctx, r, s)
	case graph.KindApproval:
		end, err = approvalStep{}.start(ctx, r, s)
	case graph.KindWait:
		end, err = waitStep{}.start(ctx, r, s)
	case graph.KindSleep:
		end, err = sleepStep{}.start(ctx, r, s)
	case graph.KindWaitMessage:
		end, err = messageStep{}.start(ctx, r, s)
	default:
		r.decideError("graph_invalid", fmt.Sprintf("node %s has unknown kind %q", n.Name, n.Kind), n.Name, s.step, "")
		return nil, stepOpen(finished), nil
	}
	return s, end, err
}

// resume moves the step in flight on, as its kind does. s is nil when
// the run's outcome was decided without the step.
func (r *graphRun) resume(ctx context.Context) (*stepRun, stepEnd, error) {
	p := r.cp.Pending
	n := r.g.Node(p.Node)
	if n == nil {
		r.decideError("graph_invalid", fmt.Sprintf("the run's pending step names node %q, which the graph does not have", p.Node), p.Node, p.Step, "")
		return nil, stepOpen(finished), nil
	}
	s := r.newStep(n, p.Step, p.Attempt, p.StartedAt)
	if p.Children == nil {
		p.Children = map[string]string{}
	}
	if p.Slots == nil {
		p.Slots = map[string]slot{}
	}
	end, err := p.kind().resume(ctx, r, s, p, false)
	return s, end, err
}

// stepOn moves the run's step on: the step in flight, else the one at
// the cursor; once it has ended, it completes it, the one place a step
// completes.
func (r *graphRun) stepOn(ctx context.Context) (outcome, error) {
	run := r.step
	if r.cp.Pending != nil {
		run = r.resume
	}
	s, end, err := run(ctx)
	if err != nil || !end.done {
		return end.out, err
	}
	return r.complete(ctx, s, end.result, end.serr)
}

// isOrchestrationTool: the tools a thread's worker implements itself.
func isOrchestrationTool(id string) bool {
	return id == threadDirectiveID || id == orchestratorID || id == directiveReturnID
}

// returnStep ends a return node's step with its output (the run's
// outcome, once the step completes).
func (r *graphRun) returnStep(s *stepRun) (stepEnd, error) {
	out, err := r.returnOutput(s)
	if err != nil {
		return stepFailed(err), nil
	}
	s.outputs = out
	return stepOK(nil), nil
}

// returnOutput is a return node's output, interpolated: an object.
func (r *graphRun) returnOutput(s *stepRun) (map[string]any, error) {
	if s.n.Output == nil {
		return map[string]any{}, nil
	}
	v, err := graph.Value(graph.DeepCopy(s.n.Output), s.scope)
	if err != nil {
		return nil, err
	}
	switch o := v.(type) {
	case map[string]any:
		return o, nil
	case nil:
		return map[string]any{}, nil
	}
	return nil, stepErr("invalid_output", "return node %s: output must be an object, not %T", s.n.Name, v)
}

// errStepTimeout is the cause of a step's timeout.
var errStepTimeout = errors.New("step timeout")

// toolValue is a tool's output as a step's result: a JSON object as it
// is, anything else as {"text": output}.
func toolValue(out string) any {
	var m map[string]any
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &m); err == nil && m != nil {
		return m
	}
	return map[string]any{"text": out}
}

// asStepError is err as a step failure.
func asStepError(err error) *graph.StepError {
	var se *graph.StepError
	if errors.As(err, &se) {
		return se
	}
	return &graph.StepError{Code: graph.CodeInterpolation, Message: err.Error()}
}

// startAction starts an action step: a tool here and now (or once a
// person approves it, when approvals.yaml gates it: approvalStep), a
// directive or a graph as the step's child (childStep).
func (r *graphRun) startAction(ctx context.Context, s *stepRun) (stepEnd, error) {
	a, err := r.actions.resolve(s.n.Action, s.scope)
	if err != nil {
		return stepFailed(err), nil
	}
	s.action = a.String()
	if a.Tool == "" {
		return childStep{}.start(ctx, r, s)
	}
	if r.proj.Approvals != nil {
		if rule := r.proj.Approvals.Match(a.Tool); rule != nil && graph.Permitted(r.rec.Capabilities, a) {
			return approvalStep{}.startTool(ctx, r, s, a, rule.Timeout, rule.OnTimeout)
		}
	}
	return toolEnd(r.actions.run(ctx, s, a, s.scope, fmt.Sprintf("step-%d", s.step)))
}

// toolEnd is how a step that ran a tool ended: its result, or its
// failure (se); err an infrastructure failure.
func toolEnd(res any, se *graph.StepError, err error) (stepEnd, error) {
	switch {
	case err != nil:
		return stepEnd{}, err
	case se != nil:
		return stepFailed(se), nil
	}
	return stepOK(res), nil
}

// complete ends step s with result (or its failure serr): assign and
// route on success, the error procedure on failure; one segment.
func (r *graphRun) complete(ctx context.Context, s *stepRun, result any, serr error) (outcome, error) {
	n := s.n
	var next string
	var assigned, unresolved []string
	newState := r.state
	routedBy := "next"
	if serr == nil {
		run := s.scope[graph.ScopeRun]
		scope := map[string]any{graph.ScopeState: r.state, graph.ScopeInputs: r.rec.Inputs, graph.ScopeRun: run}
		if result != nil {
			scope[graph.ScopeResult] = result
		}
		st, keys, err := graph.Assign(n, r.state, scope)
		if err == nil { // against the same scope: the state before the assign
			unresolved = graph.Unresolved(n, scope)
		}
		switch {
		case err != nil:
			serr = err
		case graph.StateSize(st) > r.proj.Graphs.MaxStateBytes:
			serr = stepErr(graph.CodeStateTooLarge, "the state would be %d bytes, over the bound of %d (graphs.yaml max_state_bytes): keep big data in files and their paths in the state",
				graph.StateSize(st), r.proj.Graphs.MaxStateBytes)
		case n.Kind == graph.KindReturn:
			newState, assigned, routedBy = st, keys, "return"
		default:
			scope[graph.ScopeState] = st
			if next, err = graph.Route(n, scope); err != nil {
				serr = err
			} else {
				newState, assigned = st, keys
			}
			if n.TimeoutNode() != "" && graph.TimedOut(result) {
				routedBy = "on_timeout"
			}
		}
	}
	if serr != nil {
		return r.failStep(ctx, s, asStepError(serr))
	}
	r.state = newState
	r.advance(s, next)
	ev := r.stepCompleted(s, graph.StepStatusOK, routedBy, next, result, nil)
	ev.Assigned, ev.Unresolved = assigned, unresolved
	for _, u := range unresolved {
		r.log.Warn("graph step assigned null", "step", s.step, "node", n.Name, "unresolved", u)
	}
	r.emit(transcript.TypeStepCompleted, ev)
	if n.Kind == graph.KindReturn {
		r.decideCompleted(s.outputs)
	}
	return r.afterCompleted(ctx, s, result, next, nil)
}

// advance moves the cursor past step s to next.
func (r *graphRun) advance(s *stepRun, next string) {
	r.cp.Step, r.cp.NextNode, r.cp.Pending, r.cp.RetryAt = s.step, next, nil, time.Time{}
	r.items.clear()
	delete(r.cp.Attempt, s.n.Name)
}

// stepCompleted is the step_completed event of s.
func (r *graphRun) stepCompleted(s *stepRun, status, routedBy, next string, result any, se *graph.StepError) transcript.StepCompleted {
	ev := transcript.StepCompleted{Step: s.step, Node: s.n.Name, Kind: s.n.Kind, Status: status, RoutedBy: routedBy, NextNode: next,
		ElapsedMS: time.Since(s.began).Milliseconds(), ThreadIDs: s.threadIDs, Attempt: s.attempt,
		ItemsDone: s.items[0], ItemsTotal: s.items[1], ItemsFailed: s.items[2]}
	if !s.startedAt.IsZero() {
		ev.StartedAt = s.startedAt.UTC().Format(time.RFC3339Nano)
	}
	if se != nil {
		ev.Error = &transcript.GraphStepError{Code: se.Code, Message: se.Message, ThreadID: se.ThreadID}
	}
	if result != nil {
		b, err := json.Marshal(result)
		if err == nil {
			sum := sha256.Sum256(b)
			ev.ResultSHA256, ev.ResultBytes = hex.EncodeToString(sum[:]), len(b)
			if len(b) <= r.proj.Graphs.MaxEventResultBytes {
				ev.Result = b
			}
		}
	}
	return ev
}

// afterCompleted makes a completed step durable and runs its after_step
// hooks.
func (r *graphRun) afterCompleted(ctx context.Context, s *stepRun, result any, next string, se *graph.StepError) (outcome, error) {
	fault("graph:before_complete")
	r.cp.HooksDue = s.step
	if err := r.checkpoint(ctx); err != nil {
		return outcome{}, err
	}
	status := graph.StepStatusOK
	var errObj map[string]any
	if se != nil {
		status = graph.StepStatusError
		errObj = map[string]any{"code": se.Code, "message": se.Message}
	}
	r.afterStep(ctx, s.step, s.n.Name, map[string]any{"status": status, "error": errObj, "result": result}, next)
	if r.cp.Final != nil {
		return finished, nil
	}
	return goOn, nil
}

// afterStep runs the after_step hooks of step (again, for a recovering
// worker: at least once).
func (r *graphRun) afterStep(ctx context.Context, step int, node string, extra map[string]any, next string) {
	evctx := map[string]any{"run_id": r.id(), "graph": r.g.Name, "node": node, "step": step, "next_node": next, "state": r.state}
	maps.Copy(evctx, extra)
	r.hooks.fire(ctx, graph.EventAfterStep, evctx)
	r.cp.HooksDue = 0
}

// failStep is the error procedure of spec section 9: retry, then
// _last_error and the route (the node's on_error, the graph's: a node,
// continue, or fail).
func (r *graphRun) failStep(ctx context.Context, s *stepRun, se *graph.StepError) (outcome, error) {
	n := s.n
	r.hooks.fire(ctx, graph.EventError, map[string]any{"run_id": r.id(), "node": n.Name, "step": s.step,
		"error": map[string]any{"code": se.Code, "message": se.Message}, "classification": classification(se.Code),
		"state": r.state, "attempt": s.attempt})
	if n.Retry != nil && graph.Retryable(se.Code) && s.attempt < n.Retry.Attempts {
		delay := n.Retry.Delay(s.attempt + 1)
		r.advance(s, n.Name)
		r.cp.Attempt[n.Name] = s.attempt
		r.cp.RetryAt = r.o.Now().Add(delay).UTC()
		ev := r.stepCompleted(s, graph.StepStatusRetry, "retry", n.Name, nil, se)
		r.emit(transcript.TypeStepCompleted, ev)
		r.log.Info("graph step failed; retrying", "node", n.Name, "step", s.step, "attempt", s.attempt, "code", se.Code, "backoff", delay)
		return r.afterCompleted(ctx, s, nil, n.Name, se)
	}
	last := map[string]any{"node": n.Name, "step": s.step, "code": se.Code, "message": se.Message}
	if se.ThreadID != "" {
		last["thread_id"] = se.ThreadID
	}
	st := maps.Clone(r.state)
	st["_last_error"] = last
	var next, routedBy string
	fail := false
	switch {
	case n.OnError != "":
		next, routedBy = n.OnError, "on_error"
	case r.g.OnError == "continue":
		errs, _ := st["_errors"].([]any)
		st["_errors"] = append(append([]any(nil), errs...), map[string]any{"step": s.step, "node": n.Name, "code": se.Code, "message": se.Message})
		r.cp.SuppressedErrors++
		scope := map[string]any{graph.ScopeState: st, graph.ScopeInputs: r.rec.Inputs, graph.ScopeRun: s.scope[graph.ScopeRun]}
		routedBy = "continue"
		if n.Kind == graph.KindReturn {
			next = ""
		} else if nx, err := graph.Route(n, scope); err != nil {
			fail = true
		} else {
			next = nx
		}
	case r.g.OnError != "" && r.g.OnError != "fail":
		next, routedBy = r.g.OnError, "on_error"
	default:
		fail = true
	}
	r.state = st
	r.advance(s, next)
	if fail {
		r.emit(transcript.TypeStepCompleted, r.stepCompleted(s, graph.StepStatusError, "fail", "", nil, se))
		r.decideError(graph.CodeNodeError, n.Name+": "+se.Message, n.Name, s.step, se.Code)
	} else {
		r.emit(transcript.TypeStepCompleted, r.stepCompleted(s, graph.StepStatusError, routedBy, next, nil, se))
		if n.Kind == graph.KindReturn && routedBy == "continue" {
			r.decideCompleted(map[string]any{})
		}
	}
	r.log.Info("graph step failed", "node", n.Name, "step", s.step, "code", se.Code, "routed_by", routedBy, "next", next)
	return r.afterCompleted(ctx, s, nil, next, se)
}

// classification of a step failure for the error hooks.
func classification(code string) string {
	if code == graph.CodeRateLimited {
		return "rate_limited"
	}
	if graph.Retryable(code) {
		return "transient"
	}
	return "permanent"
}

// sortedKeys returns m's keys as item indexes in order.
func sortedIndexes[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return atoiOr(keys[i]) < atoiOr(keys[j]) })
	return keys
}

// atoiOr is s as a number (0 when it is none).
func atoiOr(s string) int {
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// _ keeps thread imported for the limits the steps read.
var _ = thread.StatusCompleted
