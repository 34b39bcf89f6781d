package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/hibiken/asynq"

	"github.com/spool-run/spool/directive"
	"github.com/spool-run/spool/hooks"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/provider"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// asynqProcessAt schedules a task for t. asynq schedules by whole seconds
// (a task is due in the second its time falls in, up to a second early):
// t is rounded up, so that the task is never due before t (an early
// wait_threads timeout would only suspend the thread again; an early retry
// would call the provider before its retry-after).
func asynqProcessAt(t time.Time) asynq.Option {
	due := t.Truncate(time.Second)
	if due.Before(t) {
		due = due.Add(time.Second)
	}
	return asynq.ProcessAt(due)
}

// defaultContinuation is the system directive that renders a handoff's
// seed message.
const defaultContinuation = "rye/agent/continuation"

// continueMessage is the spec's continuation instruction, used when the
// continuation directive cannot be rendered.
const continueMessage = "Continue executing the directive. Pick up where the previous thread left off."

// codeContextTooSmall ends a thread whose model's context window cannot
// hold what it must carry: its first message (a prompt, a continuation's
// seed, a resume's conversation) before any call, or a continuation that
// would start no smaller than the context it relieves.
const codeContextTooSmall = "context_too_small"

// contextFull reports whether the conversation has reached the trigger
// threshold of the model's context window (spec: context limit detection),
// from the provider-reported prompt size of the last response plus an
// estimate of the messages added since.
func (s *session) contextFull() bool {
	window := s.prov.ContextWindow(s.rec.Model)
	if window <= 0 {
		return false
	}
	_, ratio := provider.ContextUsage(s.st.LastPromptTokens, s.msgs.since(s.st.SinceResponse), window)
	return ratio >= s.proj.Coordination.TriggerThreshold
}

// stepFits makes sure the next call's prompt fits the model's context
// window, before the call: one estimated over the window hands off, when
// the thread has made a call (what it carries on may fit), and ends the
// thread context_too_small when it has made none: its first message alone
// is more than the model can read, and a provider would refuse every call
// of it, as would every continuation that carried it.
func (s *session) stepFits(context.Context) (outcome, error) {
	window := s.prov.ContextWindow(s.rec.Model)
	if window <= 0 {
		return goOn, nil
	}
	used, _ := provider.ContextUsage(s.st.LastPromptTokens, s.msgs.since(s.st.SinceResponse), window)
	switch {
	case used <= window:
		return goOn, nil
	case s.st.LastPromptTokens > 0:
		return outcome{kind: handOff}, nil
	}
	what := "its first message"
	if s.rec.PreviousThreadID != "" {
		what = "the conversation it continues with"
	}
	s.st.decide(thread.StatusError, "", nil, &registry.ErrorInfo{Code: codeContextTooSmall, Message: fmt.Sprintf(
		"%s is about %d tokens, more than the context window of %s (%d tokens): no model call was made",
		what, used, s.rec.Model, window)})
	return finished, nil
}

// handoffRoom says why a handoff to a continuation starting from trailing
// (the recent messages it carries; the seed message is added here) would
// not relieve the context ("" when it would): a continuation that starts
// no smaller than the context is now, or already at the trigger
// threshold, would hand off again after its first call, each time
// carrying the same, until the chain's cap.
func (s *session) handoffRoom(trailing []thread.Message) string {
	window := s.prov.ContextWindow(s.rec.Model)
	if window <= 0 {
		return ""
	}
	next := *s.rec
	next.PreviousThreadID = s.id()
	seed := thread.Message{Role: thread.RoleUser, Content: (&continuation{o: s.o, proj: s.proj, dir: s.dir, rec: &next, log: s.log}).seedText()}
	start, ratio := provider.ContextUsage(0, append(slices.Clip(trailing), seed), window)
	used, _ := provider.ContextUsage(s.st.LastPromptTokens, s.msgs.since(s.st.SinceResponse), window)
	if start < used && ratio < s.proj.Coordination.TriggerThreshold {
		return ""
	}
	seedTokens, _ := provider.ContextUsage(0, []thread.Message{seed}, window)
	return fmt.Sprintf("the context is full (about %d of the %d tokens of %s) and a continuation would start with about %d "+
		"(its seed message alone about %d): a handoff would make no room, so none was made", used, window, s.rec.Model, start, seedTokens)
}

// handoff runs the thread's after_complete hooks, decides the
// continuation, makes both durable in one checkpoint, then completes the
// handoff. The hooks run before the continuation exists (spec:
// "after_complete fires" in the old thread, then "handoff_thread() runs"),
// so that what they write, such as a summary, is there when the
// continuation's thread_continued hooks load it.
func (s *session) handoff(ctx context.Context) error {
	if n := s.proj.Coordination.MaxContinuations; s.rec.ChainIndex >= n {
		s.st.decide(thread.StatusError, "", nil, &registry.ErrorInfo{Code: "continuations_exceeded", Message: fmt.Sprintf(
			"the context is full again after %d continuations, the chain's cap (coordination.yaml continuation.max_continuations)", n)})
		return s.finalize(ctx)
	}
	// The continuation builds its trailing messages from this thread's
	// transcript, which holds these same messages.
	trailing, kept := trailingMessages(closeToolCalls(s.msgs), s.proj.Coordination.ResumeCeilingTokens)
	if why := s.handoffRoom(trailing); why != "" {
		s.st.decide(thread.StatusError, "", nil, &registry.ErrorInfo{Code: codeContextTooSmall, Message: why})
		return s.finalize(ctx)
	}
	newID := s.o.NewID(orchestrator.IDRequest{Directive: s.rec.Directive, ParentID: s.rec.ParentID, PreviousThreadID: s.id()})
	s.afterCompleteHandoff(ctx, newID)
	if stopRequested(ctx) {
		// The request came while the hooks ran: no continuation starts.
		return &stopError{where: "during the handoff"}
	}
	s.st.Handoff = newID
	trailingTokens := 0
	for _, m := range trailing[len(trailing)-kept:] {
		trailingTokens += thread.EstimateMessageTokens(m)
	}
	s.emit(transcript.TypeThreadHandoff, transcript.ThreadHandoff{NewThreadID: newID, TrailingTurns: kept, TrailingTokens: trailingTokens,
		PromptTokens: s.st.LastPromptTokens, ContextWindow: s.prov.ContextWindow(s.rec.Model)})
	if err := s.checkpoint(ctx); err != nil {
		if stopRequested(ctx) {
			// The checkpoint that would have decided the handoff did not
			// land (a recovering worker would not see it either): the
			// cancel wins, and stopped ends the thread cancelled.
			s.st.Handoff = ""
		}
		return err
	}
	return s.completeHandoff(ctx)
}

// afterCompleteHandoff runs the after_complete hooks of a thread that is
// handing off to newID and marks them run; the caller's checkpoint makes
// that durable. A worker that dies between the hooks and that checkpoint
// runs them again (at least once, like the tools of an interrupted turn).
func (s *session) afterCompleteHandoff(ctx context.Context, newID string) {
	s.runHooks(ctx, hooks.EventAfterComplete, map[string]any{
		"thread_id": s.id(), "cost": toMap(s.st.Cost), "status": string(thread.StatusContinued), "project_path": ".",
		"continuation_thread_id": newID,
	})
	s.st.AfterComplete = true
}

// completeHandoff runs the spec's phases 2-5 for a decided handoff; every
// step is idempotent, so a recovering worker re-runs it from the top. The
// continuation goes on in the chain's ledger entry, with what the chain
// has left (orchestrator.Start).
func (s *session) completeHandoff(ctx context.Context) error {
	newID := s.st.Handoff
	if !s.st.AfterComplete {
		// Decided by a worker that checkpointed the handoff without the
		// hooks: they still run before the continuation starts.
		s.afterCompleteHandoff(ctx, newID)
		if err := s.checkpoint(ctx); err != nil {
			return err
		}
	}
	if _, err := s.reg.Get(ctx, newID); errors.Is(err, registry.ErrNotFound) {
		_, err := s.o.Start(ctx, orchestrator.StartRequest{
			ID: newID, Directive: s.rec.Directive, Inputs: s.rec.Inputs, Model: s.rec.Model, ParentID: s.rec.ParentID,
			Bundle: s.rec.Bundle, Queue: s.rec.Queue, PreviousThreadID: s.id(), Kind: orchestrator.KindHandoff,
		})
		if err != nil {
			if isInfra(err) {
				return err
			}
			s.st.decide(thread.StatusError, "", nil, &registry.ErrorInfo{Code: "handoff_failed", Message: err.Error()})
			return s.finalize(ctx)
		}
	} else if err != nil {
		return err
	}
	s.st.decide(thread.StatusContinued, "", nil, nil)
	s.st.Final.ContinuationID = newID
	s.log.Info("thread handed off", "new_thread_id", newID)
	if err := s.finalize(ctx); err != nil {
		return err
	}
	return s.forwardCancel(ctx)
}

// forwardCancel passes a cancel requested of this thread while it handed
// off (a decided handoff stands) on to its chain, which lives on in the
// continuation: Cancel follows the link, now in place.
func (s *session) forwardCancel(ctx context.Context) error {
	ctx = context.WithoutCancel(ctx)
	rec, err := s.reg.Get(ctx, s.id())
	if err != nil || !rec.CancelRequested {
		return err
	}
	s.log.Info("cancel requested during the handoff; cancelling the continuation", "new_thread_id", rec.ContinuationThreadID)
	_, err = s.o.Cancel(ctx, s.id(), rec.CancelCascade)
	return err
}

// continuation is what a continuation thread (of a handoff or a resume)
// begins from: its record, directive and project, and the previous
// thread's verified transcript, read through the orchestrator.
type continuation struct {
	o    *orchestrator.Runtime
	proj *orchestrator.Project
	dir  *directive.Directive
	rec  *registry.Record
	log  *slog.Logger
}

// seed builds a continuation thread's first messages from the previous
// thread's verified transcript (spec phase 3): for a handoff, the
// trailing messages within resume_ceiling_tokens and the continuation
// directive's rendered seed; for a resume, the whole conversation and the
// user's message.
func (s *continuation) seed(ctx context.Context) ([]thread.Message, error) {
	tr, err := s.o.VerifiedTranscript(ctx, s.rec.PreviousThreadID, s.proj.IntegrityMode())
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
	trailing, _ := trailingMessages(msgs, s.proj.Coordination.ResumeCeilingTokens)
	return append(trailing, thread.Message{Role: thread.RoleUser, Content: s.seedText()}), nil
}

// seedText renders the continuation directive, falling back to the spec's
// plain instruction.
func (s *continuation) seedText() string {
	name := s.dir.Continuation
	if name == "" {
		name = defaultContinuation
	}
	d, err := s.proj.Directive(name)
	if err == nil {
		var text string
		if text, err = directive.ContinuationSeed(d, s.rec.Directive, s.dir, s.rec.Inputs, s.rec.PreviousThreadID, continueMessage); err == nil {
			return text
		}
	}
	s.log.Warn("continuation directive not rendered; using the plain instruction", "directive", name, "error", err)
	return continueMessage
}

// omittedTurnsNote opens a continuation's trailing messages when they
// would start with an assistant turn: providers want a user message first,
// and the model learns why the conversation starts mid-way.
const omittedTurnsNote = "[Earlier turns of the previous thread were omitted to fit the context window; its most recent turns follow.]"

// trailingMessages fills the resume ceiling with the most recent messages,
// newest first (spec phase 1), at least the last message, and returns them
// with how many came from msgs (the handoff's trailing_turns). msgs must
// have every tool call answered (closeToolCalls).
//
// The spec trims the window to start with a user message. In an agent loop
// the only user message is often the directive's prompt, far back (tool
// results are tool messages), so trimming to it would keep almost nothing.
// The window is kept and made a valid start instead:
//   - leading tool results are dropped: a result follows its call, so a
//     result at the start of the window answers a call outside it, which
//     every provider rejects;
//   - when only such results are left (the last message is a tool result
//     and the ceiling is smaller than its group), the window reaches back
//     to the assistant message that made the calls, so the last message is
//     kept, with its call;
//   - a window that then starts with an assistant message gets
//     omittedTurnsNote before it, as a user message.
//
// Every tool call/result pair in the window stays whole: a window is a
// suffix, so an assistant message in it is followed by all its results.
func trailingMessages(msgs []thread.Message, ceiling int) ([]thread.Message, int) {
	if len(msgs) == 0 {
		return nil, 0
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
	first := start
	for first < len(msgs) && msgs[first].Role == thread.RoleTool {
		first++
	}
	if first == len(msgs) {
		first = start
		for first > 0 && msgs[first].Role == thread.RoleTool {
			first--
		}
	}
	window := msgs[first:]
	if window[0].Role == thread.RoleTool {
		// Results without any call before them: not a conversation a
		// provider takes; keep the last one's text as a user message.
		last := msgs[len(msgs)-1]
		return []thread.Message{{Role: thread.RoleUser, Content: fmt.Sprintf("[%s] %s", last.Role, last.Content)}}, 1
	}
	out := make([]thread.Message, 0, len(window)+1)
	if window[0].Role != thread.RoleUser {
		out = append(out, thread.Message{Role: thread.RoleUser, Content: omittedTurnsNote})
	}
	return append(out, window...), len(window)
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
