package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/spool-run/spool/config"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/registry"
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
	// Name, Data and MessageID are send_graph_message's: a message for a
	// graph run of the caller's tree (thread_id), which its wait_message
	// node of that name takes.
	Name      string `json:"name,omitempty"`
	Data      any    `json:"data,omitempty"`
	MessageID string `json:"message_id,omitempty"`
}

// orchestratorOperations are the values of orchestratorInput.Operation.
var orchestratorOperations = []any{"wait_threads", "cancel_thread", "get_status", "list_children", "get_chain", "chain_search",
	"resume_thread", "read_transcript", "send_graph_message"}

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

// coordinator runs a thread's coordination calls (the orchestrator
// tool's operations) on the threads its caller may reach: it holds the
// caller's record (its id, capabilities and tree), coordination.yaml,
// and the registry and orchestrator the operations read and act on. It
// answers; the session records the answer as the call's result, or the
// pending wait a wait_threads call becomes.
type coordinator struct {
	o   *orchestrator.Runtime
	reg threadRecords
	// rec is the caller's record.
	rec *registry.Record
	cfg config.Coordination
}

// coordination is what a coordination call comes to: its answer (JSON,
// or text for read_transcript; isError when the operation failed), or,
// for wait_threads, the wait it becomes.
type coordination struct {
	answer  any
	text    string
	isText  bool
	isError bool
	wait    *pending
}

// orchestrate runs an orchestrator operation.
func (s *session) orchestrate(ctx context.Context, call thread.ToolCall) error {
	c := coordinator{o: s.o, reg: s.reg, rec: s.rec, cfg: s.proj.Coordination}
	res, err := c.run(ctx, call.Input)
	if err != nil {
		return err
	}
	switch {
	case res.wait != nil:
		res.wait.CallID = call.ID
		s.st.Pending = append(s.st.Pending, *res.wait)
	case res.isText:
		s.toolResult(call.ID, orchestratorID, res.text, res.isError, "")
	default:
		s.toolJSON(call.ID, orchestratorID, res.answer, res.isError)
	}
	return nil
}

// run runs the operation input asks for on the thread it names (the
// caller when it names none), once in scope (inScope). A failure the
// model sees is an answer (isError); an infrastructure error is returned
// instead (the activation fails, and runs again).
func (c *coordinator) run(ctx context.Context, input json.RawMessage) (coordination, error) {
	var p orchestratorParams
	if err := json.Unmarshal(input, &p); err != nil {
		return coordination{text: "bad orchestrator parameters: " + err.Error(), isText: true, isError: true}, nil
	}
	target := p.ThreadID
	if target == "" {
		target = c.rec.ThreadID
	}
	if err := c.operationInScope(ctx, p, target); err != nil {
		return coordinationFailed(err)
	}
	res, err := c.operate(ctx, p, target)
	if err != nil {
		return coordinationFailed(err)
	}
	return res, nil
}

// coordinationFailed is err, the failure of an operation, as the answer
// the model sees; an infrastructure error is returned as such.
func coordinationFailed(err error) (coordination, error) {
	if isInfra(err) {
		return coordination{}, err
	}
	return coordination{answer: map[string]any{"success": false, "error": err.Error()}, isError: true}, nil
}

// operationInScope refuses an operation on a thread outside the caller's
// own tree (inScope: every operation reaches only those, unless the
// thread holds AnyThreadCapability), target or any a wait names, and a
// wait that names more threads than one may.
func (c *coordinator) operationInScope(ctx context.Context, p orchestratorParams, target string) error {
	scoped := []string{target}
	if p.Operation == "wait_threads" {
		if maxIDs := c.waitMaxThreads(); len(p.ThreadIDs) > maxIDs {
			return fmt.Errorf("wait_threads takes 1 to %d thread_ids", maxIDs)
		}
		scoped = append(slices.Clone(p.ThreadIDs), p.ThreadID)
	}
	for _, id := range scoped {
		if err := c.inScope(ctx, id); err != nil {
			return err
		}
	}
	return nil
}

// operate runs operation p on target (the caller when p names no
// thread): a wait_threads becomes a pending wait, answered when the
// threads it waits on end (resolvePending); the others are answered now.
// An error is the operation's failure (coordinationFailed).
func (c *coordinator) operate(ctx context.Context, p orchestratorParams, target string) (coordination, error) {
	switch p.Operation {
	case "wait_threads":
		w, err := c.waitThreads(ctx, p)
		return coordination{wait: w}, err
	case "read_transcript":
		text, err := c.o.TranscriptText(ctx, target, 16<<10)
		return coordination{text: text, isText: true}, err
	}
	answer, err := c.operationAnswer(ctx, p, target)
	return coordination{answer: answer}, err
}

// waitThreads is the pending wait on the threads p names, until they end
// or its timeout (coordination.yaml's default when p sets none) passes.
func (c *coordinator) waitThreads(ctx context.Context, p orchestratorParams) (*pending, error) {
	ids := p.ThreadIDs
	if len(ids) == 0 && p.ThreadID != "" {
		ids = []string{p.ThreadID}
	}
	if maxIDs := c.waitMaxThreads(); len(ids) == 0 || len(ids) > maxIDs {
		return nil, fmt.Errorf("wait_threads takes 1 to %d thread_ids", maxIDs)
	}
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = c.cfg.WaitDefaultTimeout.Seconds()
	}
	for _, id := range ids {
		if _, err := c.reg.Get(ctx, id); err != nil {
			return nil, err
		}
	}
	return &pending{Tool: orchestratorID, Kind: "wait", Threads: ids,
		Deadline: c.o.Now().Add(time.Duration(timeout * float64(time.Second)))}, nil
}

// operationAnswer runs operation p, one answered at once as JSON, on
// target, and is its answer.
func (c *coordinator) operationAnswer(ctx context.Context, p orchestratorParams, target string) (any, error) {
	switch p.Operation {
	case "cancel_thread":
		cascade := p.Cascade == nil || *p.Cascade
		rec, err := c.o.Cancel(ctx, p.ThreadID, cascade)
		if err != nil {
			return nil, err
		}
		return map[string]any{"success": true, "thread_id": rec.ThreadID, "status": rec.Status}, nil
	case "get_status":
		rec, err := c.reg.Get(ctx, target)
		if err != nil {
			return nil, err
		}
		return rec, nil
	case "list_children":
		kids, err := c.reg.ListChildren(ctx, target)
		if err != nil {
			return nil, err
		}
		return map[string]any{"success": true, "children": kids}, nil
	case "get_chain":
		chain, err := c.reg.GetChain(ctx, target)
		if err != nil {
			return nil, err
		}
		return map[string]any{"success": true, "chain_length": len(chain), "chain": chain}, nil
	case "chain_search":
		matches, err := c.o.Search(ctx, target, p.Query, p.MaxResults)
		if err != nil {
			return nil, err
		}
		return map[string]any{"success": true, "matches": matches}, nil
	case "resume_thread":
		res, err := c.o.Resume(ctx, p.ThreadID, p.Message)
		if err != nil {
			return nil, err
		}
		return res, nil
	case "send_graph_message":
		return c.sendGraphMessage(ctx, p)
	}
	return nil, fmt.Errorf("unknown orchestrator operation %q (want wait_threads, cancel_thread, get_status, list_children, get_chain, chain_search, resume_thread, read_transcript, send_graph_message)", p.Operation)
}

// sendGraphMessage sends the graph run p names (of the caller's tree,
// as every operation's target: inScope) the message p carries, as
// `spool graph send` does; the caller is who sent it.
func (c *coordinator) sendGraphMessage(ctx context.Context, p orchestratorParams) (any, error) {
	if p.ThreadID == "" {
		return nil, fmt.Errorf("send_graph_message needs thread_id, the graph run to send to")
	}
	data, err := json.Marshal(p.Data)
	if err != nil {
		return nil, err
	}
	res, err := c.o.SendGraphMessage(ctx, p.ThreadID, orchestrator.GraphMessage{Name: p.Name, Data: data, ID: p.MessageID, By: c.rec.ThreadID})
	if err != nil {
		return nil, err
	}
	return map[string]any{"success": true, "run_id": res.RunID, "seq": res.Seq, "duplicate": res.Duplicate, "woken": res.Woken}, nil
}

// inScope refuses a coordination call on a thread outside the caller's
// tree, unless the caller holds AnyThreadCapability. The refusal goes back
// to the model as the call's error.
func (c *coordinator) inScope(ctx context.Context, id string) error {
	if id == "" || id == c.rec.ThreadID || thread.Match(c.rec.Capabilities, AnyThreadCapability) {
		return nil
	}
	rec, err := c.reg.Get(ctx, id)
	if err != nil {
		return err
	}
	if rec.TreeID() != c.rec.TreeID() {
		return fmt.Errorf("permission denied: thread %s is not in this thread's tree (reaching other trees needs capability %s)", id, AnyThreadsItem)
	}
	return nil
}

// waitMaxThreads is how many thread ids one wait_threads call may name:
// coordination.yaml's wait_threads.max_threads.
func (c *coordinator) waitMaxThreads() int {
	if n := c.cfg.WaitMaxThreads; n > 0 {
		return n
	}
	return config.DefaultCoordination().WaitMaxThreads
}
