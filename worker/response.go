package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"math"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/ledger"
	"github.com/spool-run/spool/provider"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/tools"
	"github.com/spool-run/spool/transcript"
)

// recordResponse records a model response and tracks its cost (spec
// runner steps 4-6): a response that arrived is recorded and charged
// whatever comes next, a stop included.
func (s *session) recordResponse(ctx context.Context, resp *provider.Response) (outcome, error) {
	// load refused a model without a price; should pricing still fail,
	// the call's tokens and answer are recorded before the thread fails.
	spend, priceErr := s.prov.Cost(s.rec.Model, resp.Usage)
	s.st.Turn++
	s.st.TurnCallsByID = nil // a new turn's tool calls
	s.st.Cost.Turns++
	s.st.Cost.InputTokens += resp.Usage.InputTokens
	s.st.Cost.OutputTokens += resp.Usage.OutputTokens
	s.st.Cost.CacheReadTokens += resp.Usage.CacheReadTokens
	s.st.Cost.CacheWriteTokens += resp.Usage.CacheWriteTokens
	// The thread's spend is kept in whole nano-USD, as the ledger charges
	// it: a sum of float prices would read 0.00030000000000000003.
	s.st.Cost.Spend = math.Round((s.st.Cost.Spend+spend)*ledger.Nano) / ledger.Nano
	s.st.TurnSpend = spend
	s.st.LastPromptTokens = resp.Usage.InputTokens + resp.Usage.CacheReadTokens + resp.Usage.CacheWriteTokens
	s.st.SinceResponse = 0
	s.w.metrics.tokens(s.rec.Directive, s.rec.Model, resp.Usage, spend)
	if err := s.boundResponse(ctx, resp); err != nil {
		return outcome{}, err
	}
	s.tools.refuseCutCalls(resp)

	s.msgs = append(s.msgs, thread.Message{Role: thread.RoleAssistant, Content: resp.Text, ToolCalls: resp.ToolCalls})
	s.st.SinceResponse++
	s.emit(transcript.TypeCognitionOut, transcript.CognitionOut{
		Content: resp.Text, ToolCalls: resp.ToolCalls, Model: s.rec.Model, Turn: s.st.Turn, Spend: spend,
		Usage: transcript.Usage{InputTokens: resp.Usage.InputTokens, OutputTokens: resp.Usage.OutputTokens,
			CacheReadTokens: resp.Usage.CacheReadTokens, CacheWriteTokens: resp.Usage.CacheWriteTokens},
		StopReason: resp.StopReason,
	})
	if priceErr != nil {
		s.st.decide(thread.StatusError, "", nil, &registry.ErrorInfo{Code: "pricing_error", Message: priceErr.Error()})
		return finished, nil
	}
	// The tokens limit binds where the response is counted: a response
	// past it ends the thread (tokens_exceeded), its tool calls not run
	// (directive_return neither), and a last answer past it does not
	// complete.
	if n := s.st.Cost.Tokens(); n > s.rec.Limits.Tokens {
		return s.limitReached(ctx, &thread.LimitError{Code: thread.CodeTokensExceeded, Current: float64(n), Max: float64(s.rec.Limits.Tokens)}), nil
	}
	if len(resp.ToolCalls) > 0 {
		return goOn, nil
	}
	if len(s.dir.Outputs.Fields) > 0 && !s.st.Nudged {
		s.st.Nudged = true
		s.appendMessage(thread.Message{Role: thread.RoleUser, Content: "This directive declares outputs. Finish by calling " +
			directiveReturnID + " with them."})
		return goOn, nil
	}
	s.st.decide(thread.StatusCompleted, resp.Text, nil, nil)
	return finished, nil
}

// dispatchCalls runs the response's tool calls in order (spec runner step
// 7). A call that decides the thread's outcome (directive_return, a
// refusal that fails it) ends the turn; a stop request ends it before the
// next call (the turn decides: stopAfter).
func (s *session) dispatchCalls(ctx context.Context, calls []thread.ToolCall) (outcome, error) {
	for _, call := range calls {
		if err := s.dispatch(ctx, call); err != nil {
			return outcome{}, err
		}
		if s.st.Final != nil {
			return finished, nil
		}
		if ctx.Err() != nil {
			return goOn, nil // the remaining calls do not run
		}
	}
	return goOn, nil
}

// boundResponse keeps a model answer within the worker's bounds before it
// is recorded: a text over MaxResponseBytes is stored whole as an artifact
// and cut (tools.Bound), and a tool call whose input is over
// MaxToolInputBytes has its input stored as an artifact and replaced by a
// note; that call is answered with an error instead of run (dispatch).
// Nothing a model writes can make a segment, the registry's result or the
// worker's memory grow past these bounds.
func (s *session) boundResponse(ctx context.Context, resp *provider.Response) error {
	s.tools.clearCuts()
	if len(resp.Text) > s.w.cfg.MaxResponseBytes {
		key := blobkey.Response(s.id(), s.st.Turn)
		b, err := tools.Bound(ctx, s.store, key, tools.Result{Output: resp.Text}, s.w.cfg.MaxResponseBytes)
		if err != nil {
			return err
		}
		s.log.Warn("model answer cut", "bytes", len(resp.Text), "artifact", key)
		resp.Text = b.Output
	}
	for i, c := range resp.ToolCalls {
		if len(c.Input) <= s.w.cfg.MaxToolInputBytes {
			continue
		}
		key := blobkey.ToolInput(s.id(), c.ID)
		if err := s.store.Put(ctx, key, c.Input); err != nil {
			return fmt.Errorf("store the input of call %s: %w", c.ID, err)
		}
		note, _ := json.Marshal(map[string]any{"spool_input_cut": len(c.Input), "artifact": key})
		resp.ToolCalls[i].Input = note
		s.tools.cut(c.ID, fmt.Sprintf("the input of this call was %d bytes, over the limit of %d; it was not run (kept at %s)",
			len(c.Input), s.w.cfg.MaxToolInputBytes, key))
	}
	return nil
}
