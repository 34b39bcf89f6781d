package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/spool-run/spool/directive"
	"github.com/spool-run/spool/hooks"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// restore loads the transcript: it returns fresh=true when the thread has
// no checkpoint yet.
func (s *session) restore(ctx context.Context) (bool, error) {
	var tw *transcript.Writer
	var err error
	if mark := orchestrator.RegistryMark(s.rec); s.rec.Activation == 1 && mark.Segments == 0 {
		// The thread's first activation: no activation ran before this
		// one, so there is no transcript to read (one that exists anyway
		// makes the first checkpoint fail as a zombie's would).
		tw, err = transcript.CreateWriter(s.id(), s.store, s.signer)
	} else {
		tw, err = transcript.OpenWriter(ctx, s.store, s.id(), s.signer, s.keyring, mark)
	}
	if err != nil {
		return false, fmt.Errorf("open transcript of %s: %w", s.id(), err)
	}
	s.tw = tw
	if s.ctl != nil {
		s.live = &liveFeed{reg: s.reg, thread: s.id(), log: s.log, tw: tw}
		s.ctl.ready(s.live.start)
		id := s.id()
		s.deltas = newDeltaFeed(func(ctx context.Context, raws [][]byte) error { return s.reg.PublishDeltas(ctx, id, raws) }, s.log)
		s.ctl.setDeltas(s.deltas)
		if registry.Followed(s.rec, time.Now()) {
			s.ctl.follow() // followed before it began: published from its start
		}
	}
	last := tw.LastState()
	var events []transcript.Event
	if r := tw.Resumed(); r != nil {
		events = r.Events
	}
	if last == nil {
		s.st = state{ToolCallsByID: map[string]int{}}
		return true, nil
	}
	if raw, ok := last.Extra["worker"]; ok {
		if err := json.Unmarshal(raw, &s.st); err != nil {
			return false, fmt.Errorf("checkpoint state of %s: %w", s.id(), err)
		}
	}
	if s.st.ToolCallsByID == nil {
		s.st.ToolCallsByID = map[string]int{}
	}
	s.finalDurable = s.st.Final != nil
	if s.msgs, err = transcript.Reconstruct(events); err != nil {
		return false, fmt.Errorf("rebuild messages of %s: %w", s.id(), err)
	}
	// Redis may have lost the charges of earlier turns too.
	if err := s.rechargeLost(ctx, tw.Resumed(), orchestrator.RegistryMark(s.rec)); err != nil {
		return false, err
	}
	// The last checkpoint's charge may not have reached the ledger.
	if err := s.spend.charge(ctx, s.st.Turn, s.st.TurnSpend); err != nil {
		return false, err
	}
	if err := s.spend.checkRoom(ctx); err != nil {
		return false, err
	}
	return false, nil
}

// begin starts a fresh thread: the first user message (thread_started hook
// context + the directive prompt), or a continuation's seed messages.
func (s *session) begin(ctx context.Context) error {
	inputs, err := json.Marshal(s.rec.Inputs)
	if err != nil {
		return fmt.Errorf("inputs of %s: %w", s.id(), err)
	}
	limits := s.rec.Limits
	var forkSeed []thread.Message
	if s.rec.ForkedFrom != "" {
		// A fork's transcript opens with what it carries (forkSeed).
		if forkSeed, err = s.forkSeed(ctx); err != nil {
			return err
		}
	}
	s.emit(transcript.TypeThreadStarted, transcript.ThreadStarted{
		Directive: s.rec.Directive, Model: s.rec.Model, ParentID: s.rec.ParentID, PreviousThreadID: s.rec.PreviousThreadID,
		Inputs: inputs, Limits: &limits, Capabilities: s.rec.Capabilities, BundleDigest: s.proj.Digest,
		Tenant: s.rec.TenantOrDefault(), Priority: s.rec.PriorityOrDefault(), Tags: s.rec.Tags,
	})
	evctx := map[string]any{
		"thread_id": s.id(), "directive": s.rec.Directive, "directive_body": s.dir.Body,
		"model": s.rec.Model, "limits": toMap(s.rec.Limits), "inputs": s.rec.Inputs, "project_path": ".",
	}
	switch {
	case forkSeed != nil:
		// The carried conversation already holds what the source's hooks
		// gave it: a fork runs no thread_started hooks.
		for _, m := range forkSeed {
			s.appendMessage(m)
		}
	case s.rec.PreviousThreadID != "":
		evctx["previous_thread_id"] = s.rec.PreviousThreadID
		seed, err := (&continuation{o: s.o, proj: s.proj, dir: s.dir, rec: s.rec, log: s.log}).seed(ctx)
		if err != nil {
			return err
		}
		s.emit(transcript.TypeThreadContinued, transcript.ThreadContinued{
			PreviousThreadID: s.rec.PreviousThreadID, ReconstructedTurns: carriedTurns(seed),
		})
		hookText := s.runHooks(ctx, hooks.EventThreadContinued, evctx)
		if hookText != "" {
			seed = injectNearLastUser(seed, hookText)
		}
		for _, m := range seed {
			s.appendMessage(m)
		}
	default:
		hookText := s.runHooks(ctx, hooks.EventThreadStarted, evctx)
		prompt := directive.RenderBody(s.dir, s.rec.Inputs)
		if hookText != "" {
			prompt = hookText + "\n\n" + prompt
		}
		s.appendMessage(thread.Message{Role: thread.RoleUser, Content: prompt})
	}
	// The start is made durable by the first turn's checkpoint: a worker
	// that dies before it begins the thread again from the top. The start's
	// views (capabilities.md, thread.json) are written beside the turn
	// after that checkpoint (startViews).
	s.startViews = true
	return nil
}

// appendMessage adds a message to the conversation and records it.
func (s *session) appendMessage(m thread.Message) {
	s.msgs = append(s.msgs, m)
	s.st.SinceResponse++
	switch m.Role {
	case thread.RoleUser:
		s.emit(transcript.TypeCognitionIn, transcript.CognitionIn{Content: m.Content})
	case thread.RoleAssistant:
		s.emit(transcript.TypeCognitionOut, transcript.CognitionOut{Content: m.Content, ToolCalls: m.ToolCalls})
	case thread.RoleTool:
		s.emit(transcript.TypeToolCallResult, transcript.ToolCallResult{CallID: m.ToolCallID, Tool: m.ToolName, Output: m.Content, IsError: m.IsError})
	}
}

// injectNearLastUser puts hook context into the last user message of a
// seed, as the spec's thread_continued says (not prepended to the thread).
func injectNearLastUser(msgs []thread.Message, text string) []thread.Message {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == thread.RoleUser {
			msgs[i].Content = text + "\n\n" + msgs[i].Content
			return msgs
		}
	}
	return append(msgs, thread.Message{Role: thread.RoleUser, Content: text})
}

// carriedTurns counts the model turns (assistant messages) of a
// continuation's seed, which came from the previous thread: its
// thread_continued event's reconstructed_turns, which the monitor shows.
// A resume counts the same thing (orchestrator.ResumeResult's
// reconstructed_turns, which the CLI prints), so both say the same number;
// a turn is a model call here as in a thread's cost and limits.
func carriedTurns(seed []thread.Message) int {
	n := 0
	for _, m := range seed {
		if m.Role == thread.RoleAssistant {
			n++
		}
	}
	return n
}
