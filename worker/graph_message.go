package worker

import (
	"context"
	"encoding/json"
	"time"

	"github.com/spool-run/spool/graph"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/transcript"
)

// messageStep is a wait_message node: the run takes the oldest message
// of the node's name that it has not taken yet, waiting for one, holding
// no slot, when none has come. Messages are kept in the run's list in
// Redis from the send on (registry.SendMessage), so one sent before the
// run reaches the node waits for it; the checkpoint records, per name,
// the seq of the last message taken (graphCheckpoint.Taken), in the same
// segment as the step's completion, so a worker that dies before that
// segment takes the same message again and one that dies after it never
// does. Messages taken are dropped from the list at the next take.
//
// The suspension is one script with the check that no message has come
// (registry.SuspendForMessage): a send that lands while the run is on
// its way to waiting either finds it waiting and wakes it, or is found
// by the script and taken at once. A timeout is a wake time, fixed when
// the step starts and kept in its pending step as a sleep's is; when it
// has passed with no message, the step ends {timed_out: true} and the
// node's on_timeout routes it, or fails wait_timeout. The run's duration
// limit counts the wait. A resumed run waits again, from the node.
type messageStep struct{}

// start starts a wait_message node: its wait, and its timeout fixed now.
func (k messageStep) start(ctx context.Context, r *graphRun, s *stepRun) (stepEnd, error) {
	now := r.o.Now().UTC()
	p := &pendingStep{Step: s.step, Node: s.n.Name, Kind: pendingMessage, Attempt: s.attempt, StartedAt: now, Message: s.n.Message}
	if s.n.Timeout > 0 {
		p.WakeAt = now.Add(s.n.Timeout)
	}
	r.cp.Pending = p
	r.emit(transcript.TypeStepStarted, transcript.StepStarted{Step: s.step, Node: s.n.Name, Kind: s.n.Kind, Attempt: s.attempt,
		StartedAt: now.Format(time.RFC3339Nano)})
	return k.resume(ctx, r, s, p, true)
}

// resume takes the step's message when one has come, ends the step on
// its timeout, else suspends the run for it (the first time, after
// making the wait durable).
func (k messageStep) resume(ctx context.Context, r *graphRun, s *stepRun, p *pendingStep, first bool) (stepEnd, error) {
	for {
		if end, ok, err := k.take(ctx, r, p); err != nil || ok {
			return end, err
		}
		now := r.o.Now()
		if !p.WakeAt.IsZero() && !now.Before(p.WakeAt) {
			return k.timedOut(s, p), nil
		}
		if first {
			r.emit(transcript.TypeGraphWaiting, k.waiting(p))
			if err := r.checkpoint(ctx); err != nil {
				return stepEnd{}, err
			}
			fault("graph:message_checkpointed")
			first = false
		}
		at := p.WakeAt
		if end, ok := durationEnd(r.rec); ok && (at.IsZero() || end.Before(at)) {
			at = end
		}
		seq, err := r.acts.SuspendForMessage(ctx, r.id(), r.version, p.Message, r.cp.Taken[p.Message], at)
		if err != nil {
			return stepEnd{}, err
		}
		if seq == 0 {
			continue // a message came on the way: take it
		}
		r.version = seq
		fault("graph:message_suspended")
		if !at.IsZero() {
			if err := r.enq.Enqueue(ctx, queue.Activation{ThreadID: r.id(), Reason: "timeout"}, seq, r.rec.Queue, asynqProcessAt(at)); err != nil {
				return stepEnd{}, err
			}
		}
		r.log.Info("graph run waiting for a message", "step", p.Step, "node", p.Node, "message", p.Message, "wakes_at", at)
		return stepOpen(outcome{kind: suspend, reason: registry.WaitingForMessage}), nil
	}
}

// take ends the step with the oldest message of its name not taken yet,
// recorded as taken in the checkpoint that completes the step; false
// when none has come. Messages taken before are dropped first.
func (messageStep) take(ctx context.Context, r *graphRun, p *pendingStep) (stepEnd, bool, error) {
	after := r.cp.Taken[p.Message]
	if after > 0 {
		if err := r.reg.TrimMessages(ctx, r.id(), p.Message, after); err != nil {
			return stepEnd{}, false, err
		}
	}
	msgs, err := r.reg.Messages(ctx, r.id(), p.Message, after)
	if err != nil || len(msgs) == 0 {
		return stepEnd{}, false, err
	}
	m := msgs[0]
	if r.cp.Taken == nil {
		r.cp.Taken = map[string]int64{}
	}
	r.cp.Taken[p.Message] = m.Seq
	var data any
	if len(m.Data) > 0 {
		if err := json.Unmarshal(m.Data, &data); err != nil {
			return stepFailed(stepErr(graph.CodeMessageInvalid, "message %s (seq %d) does not decode: %v", m.Name, m.Seq, err)), true, nil
		}
	}
	res := map[string]any{"name": m.Name, "data": data, "sent_at": m.SentAt.UTC().Format(time.RFC3339Nano), "id": m.ID}
	r.log.Info("graph run took a message", "step", p.Step, "node", p.Node, "message", m.Name, "seq", m.Seq, "id", m.ID)
	return stepOK(res), true, nil
}

// timedOut ends the step whose timeout passed with no message: on to
// on_timeout with {timed_out: true}, or failed wait_timeout.
func (messageStep) timedOut(s *stepRun, p *pendingStep) stepEnd {
	if s.n.TimeoutNode() != "" {
		return stepOK(map[string]any{"timed_out": true})
	}
	return stepFailed(stepErr(graph.CodeWaitTimeout, "wait_message %s: no message %s came within %s", p.Node, p.Message, s.n.Timeout))
}

// waiting is the graph_waiting event of step p.
func (messageStep) waiting(p *pendingStep) transcript.GraphWaiting {
	ev := transcript.GraphWaiting{WaitingFor: registry.WaitingForMessage, Step: p.Step, Node: p.Node, MessageName: p.Message}
	if !p.WakeAt.IsZero() {
		ev.WakeAt = p.WakeAt.UTC().Format(time.RFC3339Nano)
	}
	return ev
}

// reason: the run waits for the world.
func (messageStep) reason() string { return transcript.ReasonWaitingMessage }

// carry: a resumed run waits again, from the node (its timeout anew).
func (messageStep) carry(context.Context, *graphRun, string, *pendingStep) (*pendingStep, error) {
	return nil, nil
}
