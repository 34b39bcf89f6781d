package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/spool-run/spool/config"
	"github.com/spool-run/spool/hooks"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// Approvals (CLI.md "People in the loop"). A tool call that approvals.yaml
// gates does not run when the model makes it:
//
//	dispatch ──gated──▶ requestApproval: pending in the state with a
//	   │                 request id of its own, event approval_requested
//	   │                 (the input is durable with the turn's
//	   │                 checkpoint), hooks
//	   ▼
//	the turn's other calls run ──▶ checkpoint ──▶ stepWait:
//	   resolveApprovals: every call decided? ──no──▶ SuspendForApproval:
//	       status waiting, waiting_for approval, no slot, no lease; a
//	       timeout activation at the earliest deadline; then the webhook
//	       of each call newly asked (a decision is accepted from now on)
//	   │ yes (a decision's wake-up, or the timeout)
//	   ▼
//	approved: the call runs now; denied: the model gets the reason as the
//	call's error; event approval_decided (who, why) ──▶ checkpoint ──▶ on
//
// A decision (Orchestrator.Decide) is a Redis script: it records who
// decided what and why, and when no call is left undecided returns the
// wake-up, which the decider enqueues (housekeeping re-enqueues one that
// got lost: registry.StalledWaits). Call ids repeat (call_1_1 in each
// thread of a chain, and again when a turn runs twice), so each request
// has a random id; a decision link carries it and decides that request
// only, and a decision recorded for another request does not count.

// requestApproval records a gated call as pending.
func (s *session) requestApproval(ctx context.Context, call thread.ToolCall, id string, rule *config.ApprovalRule) {
	now := s.o.Now().UTC()
	pa := registry.PendingApproval{CallID: call.ID, RequestID: newRequestID(), Tool: id, Input: call.Input, RequestedAt: now,
		OnTimeout: rule.OnTimeout}
	ev := transcript.ApprovalRequested{CallID: call.ID, RequestID: pa.RequestID, Tool: id, Input: call.Input}
	if rule.Timeout > 0 {
		pa.Deadline = now.Add(rule.Timeout)
		ev.Deadline, ev.OnTimeout = pa.Deadline.Format(time.RFC3339), rule.OnTimeout
	}
	s.st.Approvals = append(s.st.Approvals, pa)
	s.emit(transcript.TypeApprovalRequested, ev)
	s.runHooks(ctx, hooks.EventApprovalRequested, map[string]any{
		"thread_id": s.id(), "call_id": call.ID, "tool": id, "input": jsonValue(call.Input),
	})
	s.log.Info("tool call waits for approval", "call_id", call.ID, "tool", id)
}

// newRequestID is a pending call's request id: 96 random bits.
func newRequestID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return "req_" + hex.EncodeToString(b)
}

// decisionOn is the decision recorded for pa's request, if there is one
// (a decision recorded for another request of the same call id does not
// count).
func decisionOn(decisions map[string]registry.Decision, pa registry.PendingApproval) (registry.Decision, bool) {
	d, ok := decisions[pa.CallID]
	if !ok || d.RequestID != "" && d.RequestID != pa.RequestID {
		return registry.Decision{}, false
	}
	return d, true
}

// resolveApprovals answers the pending calls when every one is decided
// (or timed out), else suspends the thread until they are: done=false
// means the thread now waits (the activation ends, holding no slot).
func (s *session) resolveApprovals(ctx context.Context) (bool, error) {
	decisions, err := s.acts.Decisions(ctx, s.id())
	if err != nil {
		return false, err
	}
	now := s.o.Now()
	var earliest time.Time
	var open []registry.PendingApproval
	for _, pa := range s.st.Approvals {
		if _, ok := decisionOn(decisions, pa); ok {
			continue
		}
		if !pa.Deadline.IsZero() && !now.Before(pa.Deadline) {
			decisions[pa.CallID] = registry.Decision{Decision: pa.OnTimeout, By: "timeout",
				Reason: "no decision within the approval's timeout", At: now.UTC(), RequestID: pa.RequestID}
			continue
		}
		open = append(open, pa)
		if !pa.Deadline.IsZero() && (earliest.IsZero() || pa.Deadline.Before(earliest)) {
			earliest = pa.Deadline
		}
	}
	if len(open) > 0 {
		return false, s.suspendForApproval(ctx, earliest, open)
	}
	for _, pa := range s.st.Approvals {
		d, _ := decisionOn(decisions, pa)
		s.emit(transcript.TypeApprovalDecided, transcript.ApprovalDecided{CallID: pa.CallID, RequestID: pa.RequestID, Tool: pa.Tool,
			Decision: d.Decision, By: d.By, Reason: d.Reason})
		s.runHooks(ctx, hooks.EventApprovalDecided, map[string]any{
			"thread_id": s.id(), "call_id": pa.CallID, "tool": pa.Tool, "input": jsonValue(pa.Input),
			"decision": d.Decision, "by": d.By, "reason": d.Reason,
		})
		if d.Decision == registry.DecisionApprove {
			if err := s.execute(ctx, thread.ToolCall{ID: pa.CallID, Name: pa.Tool, Input: pa.Input}, pa.Tool); err != nil {
				return false, err
			}
			continue
		}
		msg := fmt.Sprintf("denied by %s", d.By)
		if d.Reason != "" {
			msg += ": " + d.Reason
		}
		s.toolResult(pa.CallID, pa.Tool, msg, true, "")
	}
	s.st.Approvals = nil
	return true, s.acts.ClearApprovals(ctx, s.id())
}

// suspendForApproval makes the thread wait for the open decisions, with a
// timeout activation at earliest (zero: none). Once the suspension is
// written (a decision is accepted from then on: a bot answering the
// webhook at once is never refused), the webhook announces each open
// call that the thread had not asked before this activation.
func (s *session) suspendForApproval(ctx context.Context, earliest time.Time, asked []registry.PendingApproval) error {
	waiting, err := s.approvalWait().suspend(ctx, &s.version, s.st.Approvals, earliest)
	if err != nil || !waiting {
		return err
	}
	for _, pa := range asked {
		if !announced(s.rec, pa) {
			s.w.notifyApproval(s.log, orchestrator.NotifyConfig(s.proj.Approvals), s.rec, pa)
		}
	}
	s.log.Info("thread waiting for approval", "calls", len(asked))
	return nil
}

// approvalWait is how an activation waits for people's decisions, on
// either path (a thread's gated tool calls, a graph run's approval or
// gated tool step): the suspension until the pending calls are decided,
// and the timeout activation at the earliest deadline. It holds the
// waiting thread's record and the services it suspends with.
type approvalWait struct {
	o       *orchestrator.Runtime
	acts    activationLeases
	enq     activationQueue
	metrics *Metrics
	// rec is the waiting thread's record.
	rec *registry.Record
}

// approvalWait is the activation's wait for decisions, on either path.
func (a *activation) approvalWait() *approvalWait {
	return &approvalWait{o: a.o, acts: a.acts, enq: a.enq, metrics: a.w.metrics, rec: a.rec}
}

// suspend suspends the thread, at *version (raised to the suspension's),
// until the calls of pending are decided, with a timeout activation at
// earliest (zero: none). waiting is false when every call was decided
// between the read and the suspension: the thread is woken at once.
func (a *approvalWait) suspend(ctx context.Context, version *int64, pending []registry.PendingApproval, earliest time.Time) (waiting bool, err error) {
	id := a.rec.ThreadID
	seq, open, err := a.acts.SuspendForApproval(ctx, id, *version, pending)
	if err != nil {
		return false, err
	}
	*version = seq
	if open == 0 {
		// Decided between the read and the suspension: wake at once.
		return false, a.o.EnqueueWake(ctx, registry.Wake{ThreadID: id, Seq: seq})
	}
	if !earliest.IsZero() {
		if err := a.enq.Enqueue(ctx, queue.Activation{ThreadID: id, Reason: "timeout"}, seq, a.rec.Queue,
			asynqProcessAt(earliest)); err != nil {
			return false, err
		}
	}
	a.metrics.suspended()
	return true, nil
}

// announced reports whether pa's request was pending in the thread's
// record rec when this activation claimed it: an earlier suspension sent
// its webhook (a message or a timeout woke the thread, which waits again).
func announced(rec *registry.Record, pa registry.PendingApproval) bool {
	for _, p := range rec.PendingApprovals {
		if p.CallID == pa.CallID && p.RequestID == pa.RequestID {
			return true
		}
	}
	return false
}

// jsonValue decodes raw JSON for a hook context (nil when it is not).
func jsonValue(raw json.RawMessage) any {
	var v any
	_ = json.Unmarshal(raw, &v)
	return v
}
