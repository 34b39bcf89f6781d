package worker

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/spool-run/spool/graph"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/transcript"
)

// approvalStep is a step that waits for a person's decision on a pending
// call: an approval node's "graph:approval", or a tool action that
// approvals.yaml gates, as a thread's tool call is. It suspends the run
// until the call is decided or its deadline passes (its on_timeout
// decides then); a resumed run asks again, from the node.
type approvalStep struct{}

// approvalTool is the tool name of an approval node's pending call.
const approvalTool = "graph:approval"

// start starts an approval node: a pending call "graph:approval" people
// decide with approve and deny.
func (k approvalStep) start(ctx context.Context, r *graphRun, s *stepRun) (stepEnd, error) {
	prompt, err := graph.String(s.n.Prompt, s.scope)
	if err != nil {
		return stepFailed(err), nil
	}
	show, err := graph.Value(graph.DeepCopy(s.n.Show), s.scope)
	if err != nil {
		return stepFailed(err), nil
	}
	input, _ := json.Marshal(map[string]any{"prompt": prompt, "show": show})
	onTimeout := s.n.OnTimeout
	if onTimeout == "" {
		onTimeout = registry.DecisionDeny
	}
	return k.pend(ctx, r, s, approvalTool, input, s.n.Timeout, onTimeout)
}

// startTool gates tool action a on a person's decision (approvals.yaml).
func (k approvalStep) startTool(ctx context.Context, r *graphRun, s *stepRun, a *graph.Action, timeout time.Duration, onTimeout string) (stepEnd, error) {
	params, err := graph.Params(a.Params, s.scope)
	if err != nil {
		return stepFailed(err), nil
	}
	input, _ := json.Marshal(params)
	if onTimeout == "" {
		onTimeout = registry.DecisionDeny
	}
	return k.pend(ctx, r, s, a.Tool, input, timeout, onTimeout)
}

// pend records a pending call and waits for its decision.
func (k approvalStep) pend(ctx context.Context, r *graphRun, s *stepRun, tool string, input json.RawMessage, timeout time.Duration, onTimeout string) (stepEnd, error) {
	now := r.o.Now().UTC()
	pa := &registry.PendingApproval{CallID: strconv.Itoa(s.step), RequestID: newToken(), Tool: tool, Input: input, RequestedAt: now, OnTimeout: onTimeout}
	ev := transcript.ApprovalRequested{CallID: pa.CallID, RequestID: pa.RequestID, Tool: tool, Input: input}
	if timeout > 0 {
		pa.Deadline = now.Add(timeout)
		ev.Deadline, ev.OnTimeout = pa.Deadline.Format(time.RFC3339), onTimeout
	}
	p := &pendingStep{Step: s.step, Node: s.n.Name, Kind: pendingApproval, Attempt: s.attempt, StartedAt: now, CallID: pa.CallID, Approval: pa}
	r.cp.Pending = p
	ev0 := transcript.StepStarted{Step: s.step, Node: s.n.Name, Kind: s.n.Kind, Attempt: s.attempt, StartedAt: now.Format(time.RFC3339Nano)}
	if tool != approvalTool {
		ev0.Action = &transcript.StepAction{Tool: tool}
	}
	r.emit(transcript.TypeStepStarted, ev0)
	r.emit(transcript.TypeApprovalRequested, ev)
	return k.resume(ctx, r, s, p, true)
}

// resume ends the step once its call is decided (or timed out), else
// suspends the run for it.
func (k approvalStep) resume(ctx context.Context, r *graphRun, s *stepRun, p *pendingStep, first bool) (stepEnd, error) {
	d, ok, err := k.decision(ctx, r, p.Approval)
	if err != nil {
		return stepEnd{}, err
	}
	if !ok {
		return k.await(ctx, r, p, first)
	}
	return k.decided(ctx, r, s, p.Approval, d)
}

// reason: the run waits for a person.
func (approvalStep) reason() string { return transcript.ReasonWaitingApproval }

// carry: a resumed run asks again, from the node.
func (approvalStep) carry(context.Context, *graphRun, string, *pendingStep) (*pendingStep, error) {
	return nil, nil
}

// decision is the decision of pending call pa: a person's, of this
// request, or its on_timeout once its deadline has passed; false while
// it has none.
func (approvalStep) decision(ctx context.Context, r *graphRun, pa *registry.PendingApproval) (registry.Decision, bool, error) {
	decisions, err := r.acts.Decisions(ctx, r.id())
	if err != nil {
		return registry.Decision{}, false, err
	}
	d, ok := decisionOn(decisions, *pa)
	now := r.o.Now()
	if !ok && !pa.Deadline.IsZero() && !now.Before(pa.Deadline) {
		d, ok = registry.Decision{Decision: pa.OnTimeout, By: "timeout", Reason: "no decision within the approval's timeout", At: now.UTC()}, true
	}
	return d, ok, nil
}

// await suspends the run until the approval of step p is decided, or its
// deadline (a timeout activation wakes it then); the first time, the
// wait is made durable first. A decision that came meanwhile wakes it at
// once.
func (approvalStep) await(ctx context.Context, r *graphRun, p *pendingStep, first bool) (stepEnd, error) {
	pa := p.Approval
	if first {
		r.emit(transcript.TypeGraphWaiting, transcript.GraphWaiting{WaitingFor: registry.WaitingForApproval, CallID: pa.CallID, Step: p.Step, Node: p.Node})
		if err := r.checkpoint(ctx); err != nil {
			return stepEnd{}, err
		}
	}
	waiting, err := r.approvalWait().suspend(ctx, &r.version, []registry.PendingApproval{*pa}, pa.Deadline)
	if err != nil {
		return stepEnd{}, err
	}
	if !waiting {
		return stepOpen(outcome{kind: suspend}), nil
	}
	r.log.Info("graph run waiting for approval", "step", p.Step, "node", p.Node)
	return stepOpen(outcome{kind: suspend, reason: registry.WaitingForApproval}), nil
}

// decided ends the step of pending call pa, decided d: an approval
// node's result, or a gated tool's call run (approved) or failed
// (denied).
func (approvalStep) decided(ctx context.Context, r *graphRun, s *stepRun, pa *registry.PendingApproval, d registry.Decision) (stepEnd, error) {
	r.emit(transcript.TypeApprovalDecided, transcript.ApprovalDecided{CallID: pa.CallID, Tool: pa.Tool, Decision: d.Decision, By: d.By, Reason: d.Reason})
	if err := r.acts.ClearApprovals(ctx, r.id()); err != nil {
		return stepEnd{}, err
	}
	approved := d.Decision == registry.DecisionApprove
	if pa.Tool == approvalTool {
		return stepOK(map[string]any{"approved": approved, "reason": d.Reason, "by": d.By,
			"decided_at": d.At.UTC().Format(time.RFC3339)}), nil
	}
	if !approved {
		msg := "denied by " + d.By
		if d.Reason != "" {
			msg += ": " + d.Reason
		}
		return stepFailed(stepErr(graph.CodeApprovalDenied, "%s", msg)), nil
	}
	var params map[string]any
	_ = json.Unmarshal(pa.Input, &params)
	a := &graph.Action{Tool: pa.Tool, Params: params}
	return toolEnd(r.actions.run(ctx, s, a, s.scope, pa.CallID))
}
