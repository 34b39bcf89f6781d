package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"

	"github.com/spool-run/spool/directive"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/provider"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

func asynqProcessAt(t time.Time) asynq.Option { return asynq.ProcessAt(t) }

// defaultContinuation is the system directive that renders a handoff's
// seed message.
const defaultContinuation = "rye/agent/continuation"

// continueMessage is the spec's continuation instruction, used when the
// continuation directive cannot be rendered.
const continueMessage = "Continue executing the directive. Pick up where the previous thread left off."

// contextFull reports whether the conversation has reached the trigger
// threshold of the model's context window (spec: context limit detection),
// from the provider-reported prompt size of the last response plus an
// estimate of the messages added since.
func (s *session) contextFull() bool {
	window := s.prov.ContextWindow(s.rec.Model)
	if window <= 0 {
		return false
	}
	since := s.msgs
	if n := s.st.SinceResponse; n < len(s.msgs) {
		since = s.msgs[len(s.msgs)-n:]
	}
	_, ratio := provider.ContextUsage(s.st.LastPromptTokens, since, window)
	return ratio >= s.proj.Coordination.TriggerThreshold
}

// handoff decides the continuation (durably, in a checkpoint), then
// completes it.
func (s *session) handoff(ctx context.Context) error {
	s.st.Handoff = thread.NewID(s.rec.Directive, s.o.Now())
	s.emit(transcript.TypeThreadHandoff, map[string]any{"new_thread_id": s.st.Handoff, "turns": s.st.Turn,
		"prompt_tokens": s.st.LastPromptTokens, "context_window": s.prov.ContextWindow(s.rec.Model)})
	if err := s.checkpoint(ctx); err != nil {
		return err
	}
	return s.completeHandoff(ctx)
}

// completeHandoff runs the spec's phases 2-5 for a decided handoff; every
// step is idempotent, so a recovering worker re-runs it from the top. The
// old thread releases its budget first, so its parent can fund the
// continuation with what the chain has left.
func (s *session) completeHandoff(ctx context.Context) error {
	newID := s.st.Handoff
	if err := s.o.Ledger.Release(ctx, s.id(), s.rec.ParentLedgerPath(), string(thread.StatusContinued)); err != nil {
		return err
	}
	if _, err := s.o.Registry.Get(ctx, newID); errors.Is(err, queue.ErrNotFound) {
		left := max(0, s.rec.Limits.Spend-s.st.Cost.Spend)
		_, err := s.o.Start(ctx, orchestrator.StartRequest{
			ID: newID, Directive: s.rec.Directive, Inputs: s.rec.Inputs, Model: s.rec.Model, ParentID: s.rec.ParentID,
			Bundle: s.rec.Bundle, Queue: s.rec.Queue, PreviousThreadID: s.id(), Kind: orchestrator.KindHandoff, SpendCap: &left,
		})
		if err != nil {
			if isInfra(err) {
				return err
			}
			s.decide(thread.StatusError, "", nil, &queue.ErrorInfo{Code: "handoff_failed", Message: err.Error()})
			return s.finalize(ctx)
		}
	} else if err != nil {
		return err
	}
	s.decide(thread.StatusContinued, "", nil, nil)
	s.st.Final.ContinuationID = newID
	s.log.Info("thread handed off", "new_thread_id", newID)
	return s.finalize(ctx)
}

// continuationSeed builds a continuation thread's first messages from the
// previous thread's verified transcript (spec phase 3): for a handoff, the
// trailing messages within resume_ceiling_tokens and the continuation
// directive's rendered seed; for a resume, the whole conversation and the
// user's message.
func (s *session) continuationSeed(ctx context.Context) ([]thread.Message, error) {
	tr, err := transcript.Read(ctx, s.o.Store, s.rec.PreviousThreadID, s.o.Keyring, s.proj.IntegrityMode())
	if err != nil {
		if errors.Is(err, transcript.ErrTampered) {
			return nil, &permanentError{code: "transcript_integrity", msg: err.Error()}
		}
		return nil, err
	}
	rebuilt, err := transcript.Reconstruct(tr.Events)
	if err != nil {
		return nil, &permanentError{code: "transcript_integrity", msg: err.Error()}
	}
	msgs := closeToolCalls(rebuilt)
	if s.rec.ContinuationKind == orchestrator.KindResume {
		return append(msgs, thread.Message{Role: thread.RoleUser, Content: s.rec.ContinuationMessage}), nil
	}
	trailing := trailingMessages(msgs, s.proj.Coordination.ResumeCeilingTokens)
	return append(trailing, thread.Message{Role: thread.RoleUser, Content: s.seedText()}), nil
}

// seedText renders the continuation directive, falling back to the spec's
// plain instruction.
func (s *session) seedText() string {
	name := s.dir.Continuation
	if name == "" {
		name = defaultContinuation
	}
	d, err := s.proj.Directive(name)
	if err == nil {
		var text string
		if text, err = directive.ContinuationSeed(d, s.rec.Directive, s.dir.Body, s.rec.PreviousThreadID, continueMessage); err == nil {
			return text
		}
	}
	s.log.Warn("continuation directive not rendered; using the plain instruction", "directive", name, "error", err)
	return continueMessage
}

// trailingMessages fills the resume ceiling with the most recent messages
// (spec phase 1), trimmed to start with a user message; at least the last
// message is kept.
func trailingMessages(msgs []thread.Message, ceiling int) []thread.Message {
	if len(msgs) == 0 {
		return nil
	}
	start, used := len(msgs), 0
	for i := len(msgs) - 1; i >= 0; i-- {
		t := thread.EstimateMessageTokens(msgs[i])
		if used+t > ceiling {
			break
		}
		used += t
		start = i
	}
	if start == len(msgs) {
		start = len(msgs) - 1
	}
	for i := start; i < len(msgs); i++ {
		if msgs[i].Role == thread.RoleUser {
			return append([]thread.Message(nil), msgs[i:]...)
		}
	}
	// No user message in the window: keep the last message, as a user
	// message if it was a tool result (providers need a user turn first).
	last := msgs[len(msgs)-1]
	if last.Role != thread.RoleUser {
		last = thread.Message{Role: thread.RoleUser, Content: fmt.Sprintf("[%s] %s", last.Role, last.Content)}
	}
	return []thread.Message{last}
}

// closeToolCalls answers assistant tool calls that have no tool result (the
// directive_return that ended a thread, a call cut off by a crash) so that
// a rebuilt conversation is valid for every provider.
func closeToolCalls(msgs []thread.Message) []thread.Message {
	answered := map[string]bool{}
	for _, m := range msgs {
		if m.Role == thread.RoleTool {
			answered[m.ToolCallID] = true
		}
	}
	var out []thread.Message
	for _, m := range msgs {
		out = append(out, m)
		if m.Role != thread.RoleAssistant {
			continue
		}
		for _, c := range m.ToolCalls {
			if !answered[c.ID] {
				out = append(out, thread.Message{Role: thread.RoleTool, ToolCallID: c.ID, ToolName: c.Name, Content: "(no result recorded: the thread ended at this call)"})
				answered[c.ID] = true
			}
		}
	}
	return out
}
