package worker

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/spool-run/spool/hooks"
	"github.com/spool-run/spool/ledger"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// emitFinal records the decided outcome: thread_cancelled for a cancelled
// thread, else thread_completed with the status (completed, error,
// continued) and, for an error, its code and message.
func (s *session) emitFinal(f *final) {
	if f.Status == thread.StatusCancelled {
		reason := "cancelled"
		if f.Error != nil && f.Error.Message != "" {
			reason = f.Error.Message
		}
		s.emit(transcript.TypeThreadCancelled, transcript.ThreadCancelled{Reason: reason})
		return
	}
	p := transcript.ThreadCompleted{Status: string(f.Status), Result: f.Result, Outputs: stringOutputs(f.Outputs), Cost: s.st.Cost}
	if f.Error != nil {
		p.Error = &transcript.Error{Code: f.Error.Code, Message: f.Error.Message}
	}
	s.emit(transcript.TypeThreadCompleted, p)
}

// stringOutputs renders directive outputs for the transcript, whose
// outputs are text: strings as they are, anything else as JSON.
func stringOutputs(outputs map[string]any) map[string]string {
	if len(outputs) == 0 {
		return nil
	}
	out := make(map[string]string, len(outputs))
	for k, v := range outputs {
		if str, ok := v.(string); ok {
			out[k] = str
			continue
		}
		b, err := json.Marshal(v)
		if err != nil {
			b = []byte(fmt.Sprint(v))
		}
		out[k] = string(b)
	}
	return out
}

// decide records the thread's outcome; finalize applies it.
func (st *state) decide(status thread.Status, result string, outputs map[string]any, e *registry.ErrorInfo) {
	st.Final = &final{Status: status, Result: result, Outputs: outputs, Error: e}
}

// finalize ends the thread with the decided outcome (spec step 14): a
// final transcript segment, then the orchestrator's Finalize (ledger,
// registry, thread.json, waiters, child policy), then after_complete hooks.
func (s *session) finalize(ctx context.Context) error {
	// A cancel request that ended the thread also cancelled ctx; what
	// follows records the end and must not fail for it.
	ctx, cancel := detachCancel(ctx)
	defer cancel()
	f := s.st.Final
	s.st.Cost.ElapsedSeconds = elapsed(s.rec, s.o.Now())
	out := orchestratorOutcome(f, s.st.Cost)
	if !s.finalDurable {
		// The outcome and the turn that led to it become durable in one
		// checkpoint; a recovering worker that finds Final in its state
		// only re-runs what follows (restore charges the turn). Here the
		// turn's charge goes with the end, in Finalize's one script.
		s.emitFinal(f)
		if err := s.checkpointTurn(ctx, false, &out); err != nil {
			return err
		}
		s.finalDurable = true
		if key, amount, ok := s.spend.turnCharge(s.st.Turn, s.st.TurnSpend); ok {
			out.Charge = &orchestrator.Charge{Key: key, Amount: amount, Done: func(c ledger.Charged, err error) { _ = s.spend.charged(c, err) }}
		}
	}
	out.Transcript = new(s.tw.Mark()) // with the final segment written
	out.Lease = s.claim.Token
	// The start's thread.json must not land after the final one.
	s.side.Wait()
	if err := s.o.Finalize(ctx, s.rec, s.version, out); err != nil {
		return err
	}
	// Finalize released the lease: nothing renews it from here on.
	s.leaseReleased = true
	if s.stopLease != nil {
		s.stopLease()
	}
	s.w.metrics.finished(s.rec.Directive, string(f.Status))
	if !s.st.AfterComplete { // a handoff ran them already
		s.runHooks(context.WithoutCancel(ctx), hooks.EventAfterComplete, map[string]any{
			"thread_id": s.id(), "cost": toMap(s.st.Cost), "status": string(f.Status), "project_path": ".",
		})
	}
	return nil
}
