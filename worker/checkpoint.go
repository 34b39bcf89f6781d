package worker

import (
	"context"
	"encoding/json"
	"maps"
	"time"

	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// emit appends an event to the transcript. Events are buffered in the
// writer and made durable at the next checkpoint.
func (s *session) emit(typ string, payload any) {
	if _, err := s.tw.Append(typ, payload); err != nil {
		s.log.Warn("transcript append", "event_type", typ, "error", err)
	}
}

// checkpoint makes the turn durable: the registry version first, with the
// turn's charge in the same step (the fence: a stale activation stops
// here and neither writes nor charges), then the signed segment
// (create-only). The commit raises the registry's transcript mark to what
// is durable before it: the segments this activation read or wrote, not
// the one it is about to write (see the package doc, Crash safety). It
// renews the lease too when that is due.
func (s *session) checkpoint(ctx context.Context) error { return s.checkpointTurn(ctx, true, nil) }

// checkpointTurn is checkpoint; without charge, it leaves the turn's
// charge to its caller (finalize hands it to Finalize). With final, the
// checkpoint is the thread's last, and attests the thread.json that
// Finalize(final) writes (attestViews).
func (s *session) checkpointTurn(ctx context.Context, charge bool, final *orchestrator.Outcome) error {
	began := time.Now()
	ch, cp := s.checkpointCommit(charge)
	done, err := s.o.Checkpoint(ctx, s.rec, s.version, ch, cp)
	if err != nil {
		return err
	}
	s.version = done.Version
	spend := ch.Cost.Spend
	s.committed = &spend
	if cp.Lease != "" && done.LeaseHeld {
		s.ctl.renewed.Store(time.Now().UnixNano())
	}
	raw, err := json.Marshal(s.st)
	if err != nil {
		return err
	}
	views, err := s.attestViews(ctx, final)
	if err != nil {
		return err
	}
	if _, err := s.tw.Checkpoint(ctx, s.checkpointState(raw)); err != nil {
		return err
	}
	s.trimInbox(ctx)
	if cp.Charge != nil {
		if err := s.spend.charged(done.Charged, done.ChargeErr); err != nil {
			return err
		}
	}
	s.w.metrics.checkpointed(time.Since(began))
	if views != nil {
		s.writeStartViews(ctx, views)
	}
	return nil
}

// checkpointCommit is what a checkpoint commits to the registry: the
// thread's cost, its transcript mark and retry time; and what rides
// with it: the lease's renewal when due, the turn's charge (with
// charge).
func (s *session) checkpointCommit(charge bool) (registry.Changes, orchestrator.Checkpoint) {
	cost := s.st.Cost
	ch := registry.Changes{Cost: &cost, Transcript: orchestrator.RecordMark(s.tw.Mark())}
	if !s.st.RetryAt.IsZero() {
		ch.Fields = map[string]string{registry.RetryAtField: s.st.RetryAt.Format(time.RFC3339Nano)}
	}
	cp := orchestrator.Checkpoint{}
	if ttl := s.leaseTTL; ttl > 0 && s.ctl.renewalDue(ttl) {
		cp.Lease, cp.LeaseTTL = s.claim.Token, ttl
	}
	if key, amount, ok := s.spend.turnCharge(s.st.Turn, s.st.TurnSpend); ok && charge {
		cp.Charge = &orchestrator.Charge{Key: key, Amount: amount}
	}
	return ch, cp
}

// trimInbox drops from the thread's inbox the messages delivered and now
// durable; a failure leaves them for a later checkpoint.
func (s *session) trimInbox(ctx context.Context) {
	if s.st.InboxSeq <= s.trimmedInbox {
		return
	}
	if err := s.reg.TrimInbox(ctx, s.id(), s.st.InboxSeq); err != nil {
		s.log.Warn("inbox not trimmed", "error", err)
		return
	}
	s.trimmedInbox = s.st.InboxSeq
}

// checkpointState is the operational snapshot of the spec's checkpoint
// (iteration, counters, per-tool counts of the run and of the turn, the
// stop flag) around the worker's own state, raw.
func (s *session) checkpointState(raw json.RawMessage) transcript.State {
	st := transcript.State{
		Reason:                   transcript.ReasonAssistantTurn,
		Status:                   string(thread.StatusRunning),
		Iteration:                s.st.Turn,
		Version:                  s.version,
		Cost:                     s.st.Cost,
		ToolCallsTotal:           s.st.ToolCalls,
		ToolCallsByTool:          maps.Clone(s.st.ToolCallsByID),
		ToolCallsIterationByTool: maps.Clone(s.st.TurnCallsByID),
		Extra:                    map[string]json.RawMessage{"worker": raw},
	}
	for _, n := range s.st.TurnCallsByID {
		st.ToolCallsIteration += n
	}
	switch {
	case s.st.Final != nil:
		st.Reason, st.Status, st.StopFlag = transcript.ReasonRunFinished, string(s.st.Final.Status), true
	case s.st.Handoff != "":
		st.Reason, st.StopFlag = transcript.ReasonHandoff, true
	case len(s.st.Approvals) > 0:
		st.Reason = transcript.ReasonWaitingApproval
	case len(s.st.Pending) > 0:
		st.Reason = transcript.ReasonWaitingChildren
	case !s.st.RetryAt.IsZero():
		st.Reason = transcript.ReasonRetryWait
	}
	return st
}
