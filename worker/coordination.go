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
	target := p.ThreadID
	if target == "" {
		target = s.id()
	}
	if err := s.operationInScope(ctx, p, target); err != nil {
		return s.operationFailed(call.ID, err)
	}
	if err := s.operate(ctx, call.ID, p, target); err != nil {
		return s.operationFailed(call.ID, err)
	}
	return nil
}

// operationFailed answers call callID with err, the failure of its
// operation, which the model sees; an infrastructure error is returned
// instead (the activation fails, and runs again).
func (s *session) operationFailed(callID string, err error) error {
	if isInfra(err) {
		return err
	}
	s.toolJSON(callID, orchestratorID, map[string]any{"success": false, "error": err.Error()}, true)
	return nil
}

// operationInScope refuses an operation on a thread outside the caller's
// own tree (inScope: every operation reaches only those, unless the
// thread holds AnyThreadCapability), target or any a wait names, and a
// wait that names more threads than one may.
func (s *session) operationInScope(ctx context.Context, p orchestratorParams, target string) error {
	scoped := []string{target}
	if p.Operation == "wait_threads" {
		if maxIDs := s.waitMaxThreads(); len(p.ThreadIDs) > maxIDs {
			return fmt.Errorf("wait_threads takes 1 to %d thread_ids", maxIDs)
		}
		scoped = append(slices.Clone(p.ThreadIDs), p.ThreadID)
	}
	for _, id := range scoped {
		if err := s.inScope(ctx, id); err != nil {
			return err
		}
	}
	return nil
}

// operate runs operation p on target (the caller when p names no
// thread) and answers call callID, but for wait_threads, which is
// answered when the threads it waits on end (resolvePending). An error is
// the operation's failure (operationFailed).
func (s *session) operate(ctx context.Context, callID string, p orchestratorParams, target string) error {
	switch p.Operation {
	case "wait_threads":
		return s.waitThreads(ctx, callID, p)
	case "read_transcript":
		text, err := s.o.TranscriptText(ctx, target, 16<<10)
		if err != nil {
			return err
		}
		s.toolResult(callID, orchestratorID, text, false, "")
		return nil
	}
	answer, err := s.operationAnswer(ctx, p, target)
	if err != nil {
		return err
	}
	s.toolJSON(callID, orchestratorID, answer, false)
	return nil
}

// waitThreads makes call callID a pending wait on the threads p names,
// until they end or its timeout (coordination.yaml's default when p sets
// none) passes.
func (s *session) waitThreads(ctx context.Context, callID string, p orchestratorParams) error {
	ids := p.ThreadIDs
	if len(ids) == 0 && p.ThreadID != "" {
		ids = []string{p.ThreadID}
	}
	if maxIDs := s.waitMaxThreads(); len(ids) == 0 || len(ids) > maxIDs {
		return fmt.Errorf("wait_threads takes 1 to %d thread_ids", maxIDs)
	}
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = s.proj.Coordination.WaitDefaultTimeout.Seconds()
	}
	for _, id := range ids {
		if _, err := s.reg.Get(ctx, id); err != nil {
			return err
		}
	}
	s.st.Pending = append(s.st.Pending, pending{CallID: callID, Tool: orchestratorID, Kind: "wait", Threads: ids,
		Deadline: s.o.Now().Add(time.Duration(timeout * float64(time.Second)))})
	return nil
}

// operationAnswer runs operation p, one answered at once as JSON, on
// target, and is its answer.
func (s *session) operationAnswer(ctx context.Context, p orchestratorParams, target string) (any, error) {
	switch p.Operation {
	case "cancel_thread":
		cascade := p.Cascade == nil || *p.Cascade
		rec, err := s.o.Cancel(ctx, p.ThreadID, cascade)
		if err != nil {
			return nil, err
		}
		return map[string]any{"success": true, "thread_id": rec.ThreadID, "status": rec.Status}, nil
	case "get_status":
		rec, err := s.reg.Get(ctx, target)
		if err != nil {
			return nil, err
		}
		return rec, nil
	case "list_children":
		kids, err := s.reg.ListChildren(ctx, target)
		if err != nil {
			return nil, err
		}
		return map[string]any{"success": true, "children": kids}, nil
	case "get_chain":
		chain, err := s.reg.GetChain(ctx, target)
		if err != nil {
			return nil, err
		}
		return map[string]any{"success": true, "chain_length": len(chain), "chain": chain}, nil
	case "chain_search":
		matches, err := s.o.Search(ctx, target, p.Query, p.MaxResults)
		if err != nil {
			return nil, err
		}
		return map[string]any{"success": true, "matches": matches}, nil
	case "resume_thread":
		res, err := s.o.Resume(ctx, p.ThreadID, p.Message)
		if err != nil {
			return nil, err
		}
		return res, nil
	}
	return nil, fmt.Errorf("unknown orchestrator operation %q (want wait_threads, cancel_thread, get_status, list_children, get_chain, chain_search, resume_thread, read_transcript)", p.Operation)
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
