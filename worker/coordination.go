package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/spool-run/spool/config"
	"github.com/spool-run/spool/thread"
)

// orchestratorInput is the orchestrator tool's input as the model is
// offered it (orchestrationDefs: its schema is made from this type).
type orchestratorInput struct {
	Operation  string   `json:"operation"`
	ThreadID   string   `json:"thread_id,omitempty"`
	ThreadIDs  []string `json:"thread_ids,omitempty"`
	Timeout    float64  `json:"timeout,omitempty"`
	Message    string   `json:"message,omitempty"`
	Query      string   `json:"query,omitempty"`
	MaxResults int      `json:"max_results,omitempty"`
}

// orchestratorOperations are the values of orchestratorInput.Operation.
var orchestratorOperations = []any{"wait_threads", "cancel_thread", "get_status", "list_children", "get_chain", "chain_search",
	"resume_thread", "read_transcript"}

// orchestratorParams are the orchestrator tool's parameters: its input,
// and cascade, which a call may carry beside it.
type orchestratorParams struct {
	orchestratorInput
	Cascade *bool `json:"cascade"`
}

// AnyThreadsItem is the item whose execute capability lets a thread's
// coordination calls (wait, cancel, status, children, chain, search,
// resume, read transcript) reach threads outside its own tree; without it
// they reach only the threads of the caller's tree (Record.TreeID: its
// root's descendants and continuations). A directive grants it with
// <execute><tool>rye/threads/any</tool></execute> (or rye.threads.any);
// rye/agent/threads/* does not cover it, "*" does.
const AnyThreadsItem = "rye/threads/any"

// AnyThreadCapability is AnyThreadsItem's capability.
var AnyThreadCapability = thread.ToolCapability(AnyThreadsItem)

// orchestrate runs an orchestrator operation.
func (s *session) orchestrate(ctx context.Context, call thread.ToolCall) error {
	var p orchestratorParams
	if err := json.Unmarshal(call.Input, &p); err != nil {
		s.toolResult(call.ID, orchestratorID, "bad orchestrator parameters: "+err.Error(), true, "")
		return nil
	}
	fail := func(err error) error {
		if isInfra(err) {
			return err
		}
		s.toolJSON(call.ID, orchestratorID, map[string]any{"success": false, "error": err.Error()}, true)
		return nil
	}
	target := p.ThreadID
	if target == "" {
		target = s.id()
	}
	// Every operation reaches only threads of the caller's own tree,
	// unless the thread holds AnyThreadCapability.
	scoped := []string{target}
	if p.Operation == "wait_threads" {
		if maxIDs := s.waitMaxThreads(); len(p.ThreadIDs) > maxIDs {
			return fail(fmt.Errorf("wait_threads takes 1 to %d thread_ids", maxIDs))
		}
		scoped = append(slices.Clone(p.ThreadIDs), p.ThreadID)
	}
	for _, id := range scoped {
		if err := s.inScope(ctx, id); err != nil {
			return fail(err)
		}
	}
	switch p.Operation {
	case "wait_threads":
		ids := p.ThreadIDs
		if len(ids) == 0 && p.ThreadID != "" {
			ids = []string{p.ThreadID}
		}
		if maxIDs := s.waitMaxThreads(); len(ids) == 0 || len(ids) > maxIDs {
			return fail(fmt.Errorf("wait_threads takes 1 to %d thread_ids", maxIDs))
		}
		timeout := p.Timeout
		if timeout <= 0 {
			timeout = s.proj.Coordination.WaitDefaultTimeout.Seconds()
		}
		for _, id := range ids {
			if _, err := s.reg.Get(ctx, id); err != nil {
				return fail(err)
			}
		}
		s.st.Pending = append(s.st.Pending, pending{CallID: call.ID, Tool: orchestratorID, Kind: "wait", Threads: ids,
			Deadline: s.o.Now().Add(time.Duration(timeout * float64(time.Second)))})
		return nil
	case "cancel_thread":
		cascade := p.Cascade == nil || *p.Cascade
		rec, err := s.o.Cancel(ctx, p.ThreadID, cascade)
		if err != nil {
			return fail(err)
		}
		s.toolJSON(call.ID, orchestratorID, map[string]any{"success": true, "thread_id": rec.ThreadID, "status": rec.Status}, false)
	case "get_status":
		rec, err := s.reg.Get(ctx, target)
		if err != nil {
			return fail(err)
		}
		s.toolJSON(call.ID, orchestratorID, rec, false)
	case "list_children":
		kids, err := s.reg.ListChildren(ctx, target)
		if err != nil {
			return fail(err)
		}
		s.toolJSON(call.ID, orchestratorID, map[string]any{"success": true, "children": kids}, false)
	case "get_chain":
		chain, err := s.reg.GetChain(ctx, target)
		if err != nil {
			return fail(err)
		}
		s.toolJSON(call.ID, orchestratorID, map[string]any{"success": true, "chain_length": len(chain), "chain": chain}, false)
	case "chain_search":
		matches, err := s.o.Search(ctx, target, p.Query, p.MaxResults)
		if err != nil {
			return fail(err)
		}
		s.toolJSON(call.ID, orchestratorID, map[string]any{"success": true, "matches": matches}, false)
	case "resume_thread":
		res, err := s.o.Resume(ctx, p.ThreadID, p.Message)
		if err != nil {
			return fail(err)
		}
		s.toolJSON(call.ID, orchestratorID, res, false)
	case "read_transcript":
		text, err := s.o.TranscriptText(ctx, target, 16<<10)
		if err != nil {
			return fail(err)
		}
		s.toolResult(call.ID, orchestratorID, text, false, "")
	default:
		return fail(fmt.Errorf("unknown orchestrator operation %q (want wait_threads, cancel_thread, get_status, list_children, get_chain, chain_search, resume_thread, read_transcript)", p.Operation))
	}
	return nil
}

// inScope refuses a coordination call on a thread outside the caller's
// tree, unless the caller holds AnyThreadCapability. The refusal goes back
// to the model as the call's error.
func (s *session) inScope(ctx context.Context, id string) error {
	if id == "" || id == s.id() || thread.Match(s.rec.Capabilities, AnyThreadCapability) {
		return nil
	}
	rec, err := s.reg.Get(ctx, id)
	if err != nil {
		return err
	}
	if rec.TreeID() != s.rec.TreeID() {
		return fmt.Errorf("permission denied: thread %s is not in this thread's tree (reaching other trees needs capability %s)", id, AnyThreadsItem)
	}
	return nil
}

// waitMaxThreads is how many thread ids one wait_threads call may name:
// coordination.yaml's wait_threads.max_threads.
func (s *session) waitMaxThreads() int {
	if n := s.proj.Coordination.WaitMaxThreads; n > 0 {
		return n
	}
	return config.DefaultCoordination().WaitMaxThreads
}
