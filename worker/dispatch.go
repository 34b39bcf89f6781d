package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/spool-run/spool/config"
	"github.com/spool-run/spool/hooks"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/provider"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/tools"
	"github.com/spool-run/spool/transcript"
)

// Item ids of the orchestration tools the worker implements itself.
const (
	directiveReturnID = "rye/agent/threads/directive_return"
	threadDirectiveID = "rye/agent/threads/thread_directive"
	orchestratorID    = "rye/agent/threads/orchestrator"
)

// normalizeTool accepts tool ids written with "." as well as "/".
func normalizeTool(name string) string {
	if strings.Contains(name, "/") {
		return name
	}
	return strings.ReplaceAll(name, ".", "/")
}

// dispatch runs one tool call of the model (spec runner step 7).
func (s *session) dispatch(ctx context.Context, call thread.ToolCall) error {
	id := normalizeTool(call.Name)
	s.st.ToolCalls++
	s.st.ToolCallsByID[id]++
	if s.st.TurnCallsByID == nil {
		s.st.TurnCallsByID = map[string]int{}
	}
	s.st.TurnCallsByID[id]++
	s.emit(transcript.TypeToolCallStart, transcript.ToolCallStart{CallID: call.ID, Tool: id, Input: call.Input})
	if msg, cut := s.cutInputs[call.ID]; cut {
		s.toolResult(call.ID, id, msg, true, "")
		return nil
	}
	if id != directiveReturnID {
		if err := s.checkTool(id); err != nil {
			s.toolResult(call.ID, id, err.Error(), true, "")
			return nil
		}
	}
	switch id {
	case directiveReturnID:
		s.directiveReturn(ctx, call)
		return nil
	case threadDirectiveID:
		return s.spawn(ctx, call)
	case orchestratorID:
		return s.orchestrate(ctx, call)
	}
	tool, ok := s.tools.Lookup(id)
	if !ok {
		s.toolResult(call.ID, id, fmt.Sprintf("unknown tool %s", id), true, "")
		return nil
	}
	res, err := tool.Run(ctx, s.toolEnv, call.Input)
	if err != nil {
		if stopRequested(ctx) {
			// A cancel request or the duration limit stopped the tool
			// (its process group is killed): the call is answered, so
			// the transcript stays a valid conversation for a resume,
			// and the thread ends.
			s.toolResult(call.ID, id, stoppedWhile(ctx), true, "")
			s.decideStop(ctx, "during tool "+id)
			return nil
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		// A tool's error is an infrastructure failure (tools.Tool): the
		// store, after the worker's store retried it for
		// Config.StoragePatience, or the machine. It is not the model's
		// to handle: the activation fails and runs again from the last
		// checkpoint.
		return fmt.Errorf("tool %s: %w", id, err)
	}
	if res.IsError {
		s.toolFailed(ctx, call.ID, id, res.Output)
	}
	return s.boundedResult(ctx, call.ID, id, res)
}

// checkTool is the permission check of a tool call (spec runner step 7),
// for the model's calls and hooks' execute actions alike: the thread must
// hold the tool's execute capability. The error is what the caller sees.
func (s *session) checkTool(id string) error {
	if need := thread.ToolCapability(id); !thread.Match(s.rec.Capabilities, need) {
		return fmt.Errorf("permission denied: calling %s needs capability %s, which this thread does not hold", id, need)
	}
	return nil
}

// toolFailed fires the error event's hooks for a tool that ran and failed
// (the spec: error hooks fire "when an LLM call or tool execution fails").
// Only their item actions run: the failed call's result goes back to the
// model (spec runner step 7), which decides what to do, so the control
// hooks (builtin: retry transient errors, fail on the rest) that decide a
// failed model call are not consulted and a failed tool never fails the
// thread. The classification is the one a provider error with the same
// text would get (timeouts are transient, most failures permanent).
func (s *session) toolFailed(ctx context.Context, callID, tool, output string) {
	class := provider.Classify(errors.New(output)).Class
	evctx := hooks.ToolErrorContext(s.id(), tool, callID, output, class)
	s.runHooks(ctx, hooks.EventError, evctx)
}

func (s *session) boundedResult(ctx context.Context, callID, tool string, res tools.Result) error {
	key := fmt.Sprintf("threads/%s/artifacts/%s.txt", s.id(), safeName(callID))
	bounded, err := tools.Bound(ctx, s.o.Store, key, res, s.w.cfg.MaxToolResultBytes)
	if err != nil {
		return err
	}
	s.toolResult(callID, tool, bounded.Output, bounded.IsError, bounded.Artifact)
	return nil
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

func safeName(s string) string { return unsafeChars.ReplaceAllString(s, "_") }

// toolResult appends a tool message answering callID.
func (s *session) toolResult(callID, tool, output string, isError bool, artifact string) {
	s.msgs = append(s.msgs, thread.Message{Role: thread.RoleTool, Content: output, ToolCallID: callID, ToolName: tool, IsError: isError})
	s.st.SinceResponse++
	s.emit(transcript.TypeToolCallResult, transcript.ToolCallResult{CallID: callID, Tool: tool, Output: output, IsError: isError, Artifact: artifact})
}

func (s *session) toolJSON(callID, tool string, v any, isError bool) {
	b, _ := json.Marshal(v)
	s.toolResult(callID, tool, string(b), isError, "")
}

// directiveReturn validates the declared outputs and finishes the thread.
func (s *session) directiveReturn(ctx context.Context, call thread.ToolCall) {
	var outputs map[string]any
	if err := json.Unmarshal(call.Input, &outputs); err != nil || outputs == nil {
		s.toolResult(call.ID, directiveReturnID, "directive_return takes a JSON object of output fields", true, "")
		return
	}
	// A model may wrap the fields in "outputs".
	if inner, ok := outputs["outputs"].(map[string]any); ok && len(outputs) == 1 {
		outputs = inner
	}
	var missing []string
	for _, f := range s.dir.Outputs.Fields {
		if v, ok := outputs[f.Name]; f.Required && (!ok || v == nil || v == "") {
			missing = append(missing, f.Name)
		}
	}
	if len(missing) > 0 {
		s.toolResult(call.ID, directiveReturnID, "missing required outputs: "+strings.Join(missing, ", ")+"; call directive_return again with every required field", true, "")
		return
	}
	s.emit(transcript.TypeDirectiveReturn, transcript.DirectiveReturn{Outputs: stringOutputs(outputs)})
	s.runHooks(ctx, hooks.EventDirectiveReturn, map[string]any{"thread_id": s.id(), "outputs": outputs, "cost": toMap(s.st.Cost)})
	result := ""
	if r, ok := outputs["result"].(string); ok {
		result = r
	} else {
		b, _ := json.Marshal(outputs)
		result = string(b)
	}
	s.decide(thread.StatusCompleted, result, outputs, nil)
}

// spawnParams are the thread_directive tool's parameters.
type spawnParams struct {
	DirectiveName  string          `json:"directive_name"`
	DirectiveID    string          `json:"directive_id"`
	Inputs         json.RawMessage `json:"inputs"`
	Async          bool            `json:"async"`
	LimitOverrides map[string]any  `json:"limit_overrides"`
	// Reserve asks for a guaranteed budget (orchestrator.StartRequest).
	Reserve bool   `json:"reserve"`
	Model   string `json:"model"`
}

// spawn starts a child thread. Synchronous spawns become a pending call:
// the thread suspends at the end of the turn and the child's result is the
// call's result when it wakes.
func (s *session) spawn(ctx context.Context, call thread.ToolCall) error {
	var p spawnParams
	if err := json.Unmarshal(call.Input, &p); err != nil {
		s.toolResult(call.ID, threadDirectiveID, "bad thread_directive parameters: "+err.Error(), true, "")
		return nil
	}
	name := p.DirectiveName
	if name == "" {
		name = p.DirectiveID
	}
	if name == "" {
		s.toolResult(call.ID, threadDirectiveID, "thread_directive needs directive_name", true, "")
		return nil
	}
	inputs, err := decodeInputs(p.Inputs)
	if err != nil {
		s.toolResult(call.ID, threadDirectiveID, err.Error(), true, "")
		return nil
	}
	overrides, err := thread.LimitsFromMap(p.LimitOverrides)
	if err != nil {
		s.toolResult(call.ID, threadDirectiveID, "limit_overrides: "+err.Error(), true, "")
		return nil
	}
	rec, err := s.o.Start(ctx, orchestrator.StartRequest{
		Directive: name, Inputs: inputs, Model: p.Model, LimitOverrides: overrides, ParentID: s.id(), Reserve: p.Reserve,
	})
	if err != nil {
		if isInfra(err) {
			return err
		}
		var le *thread.LimitError
		if errors.As(err, &le) && le.Code == thread.CodeSpendExceeded {
			s.w.metrics.ledgerRejected("reserve")
		}
		obj := errorObject(err)
		s.emit(transcript.TypeChildRefused, transcript.ChildRefused{Directive: name, Code: obj["code"].(string), Message: err.Error()})
		s.log.Info("spawn refused", "directive", name, "error", err)
		s.toolJSON(call.ID, threadDirectiveID, map[string]any{"success": false, "error": obj}, true)
		return nil
	}
	s.emit(transcript.TypeChildSpawned, transcript.ChildSpawned{ChildID: rec.ThreadID, Directive: name, Async: p.Async})
	if p.Async {
		s.toolJSON(call.ID, threadDirectiveID, map[string]any{"success": true, "thread_id": rec.ThreadID, "status": "running"}, false)
		return nil
	}
	s.st.Pending = append(s.st.Pending, pending{CallID: call.ID, Tool: threadDirectiveID, Kind: "spawn", Threads: []string{rec.ThreadID}})
	return nil
}

// errorObject renders an error as the CLI's {"code","message"} object.
func errorObject(err error) map[string]any {
	var le *thread.LimitError
	if errors.As(err, &le) {
		return map[string]any{"code": le.Code, "message": err.Error()}
	}
	return map[string]any{"code": "spawn_failed", "message": err.Error()}
}

// isInfra reports whether err is an infrastructure failure (Redis or the
// blob store), which retries the activation, rather than a refusal to give
// to the model.
func isInfra(err error) bool {
	var le *thread.LimitError
	if errors.As(err, &le) {
		return false
	}
	return errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "connection refused") ||
		strings.Contains(err.Error(), "i/o timeout")
}

func decodeInputs(raw json.RawMessage) (map[string]any, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return map[string]any{}, nil
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err == nil {
		return m, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		if err := json.Unmarshal([]byte(s), &m); err == nil {
			return m, nil
		}
	}
	return nil, fmt.Errorf("inputs must be a JSON object or a string holding one")
}

// orchestratorParams are the orchestrator tool's parameters.
type orchestratorParams struct {
	Operation  string   `json:"operation"`
	ThreadID   string   `json:"thread_id"`
	ThreadIDs  []string `json:"thread_ids"`
	Timeout    float64  `json:"timeout"`
	Message    string   `json:"message"`
	Query      string   `json:"query"`
	MaxResults int      `json:"max_results"`
	Cascade    *bool    `json:"cascade"`
}

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
		scoped = append(p.ThreadIDs, p.ThreadID)
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
			if _, err := s.o.Registry.Get(ctx, id); err != nil {
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
		rec, err := s.o.Registry.Get(ctx, target)
		if err != nil {
			return fail(err)
		}
		s.toolJSON(call.ID, orchestratorID, rec, false)
	case "list_children":
		kids, err := s.o.Registry.ListChildren(ctx, target)
		if err != nil {
			return fail(err)
		}
		s.toolJSON(call.ID, orchestratorID, map[string]any{"success": true, "children": kids}, false)
	case "get_chain":
		chain, err := s.o.Registry.GetChain(ctx, target)
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

// inScope refuses a coordination call on a thread outside the caller's
// tree, unless the caller holds AnyThreadCapability. The refusal goes back
// to the model as the call's error.
func (s *session) inScope(ctx context.Context, id string) error {
	if id == "" || id == s.id() || thread.Match(s.rec.Capabilities, AnyThreadCapability) {
		return nil
	}
	rec, err := s.o.Registry.Get(ctx, id)
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

// resolvePending suspends the thread until every pending call's threads
// have finished, or answers the calls when they have. It returns done=false
// when the thread suspended (the activation ends, holding no slot).
func (s *session) resolvePending(ctx context.Context) (bool, error) {
	now := s.o.Now()
	var deadline time.Time
	for attempt := 0; attempt < 10; attempt++ {
		var targets []queue.WaitTarget
		seen := map[string]bool{}
		for _, p := range s.st.Pending {
			if !p.Deadline.IsZero() && !now.Before(p.Deadline) {
				continue // timed out: answered with what there is
			}
			if !p.Deadline.IsZero() && (deadline.IsZero() || p.Deadline.Before(deadline)) {
				deadline = p.Deadline
			}
			for _, id := range p.Threads {
				rec, err := s.o.Registry.Get(ctx, id)
				if err != nil {
					return false, err
				}
				term, err := s.o.Registry.ResolveChain(ctx, id)
				if err != nil {
					return false, err
				}
				if !seen[rec.ChainRootID] {
					seen[rec.ChainRootID] = true
					targets = append(targets, queue.WaitTarget{Root: rec.ChainRootID, Terminal: term})
				}
			}
		}
		if len(targets) == 0 {
			break
		}
		suspended, seq, err := s.o.Activations.Suspend(ctx, s.id(), s.version, targets)
		if errors.Is(err, queue.ErrChainMoved) {
			continue
		}
		if err != nil {
			return false, err
		}
		if !suspended {
			break
		}
		s.version = seq
		if !deadline.IsZero() {
			if err := s.o.Enqueuer.Enqueue(ctx, queue.Activation{ThreadID: s.id(), Reason: "timeout"}, seq, s.rec.Queue,
				asynqProcessAt(deadline)); err != nil {
				return false, err
			}
		}
		s.w.metrics.suspended()
		s.log.Info("thread waiting on children", "targets", len(targets))
		return false, nil
	}
	// Every pending call can be answered now.
	for _, p := range s.st.Pending {
		results := map[string]any{}
		allDone, anyFailed := true, false
		for _, id := range p.Threads {
			term, err := s.o.Registry.ResolveChain(ctx, id)
			if err != nil {
				return false, err
			}
			rec, err := s.o.Registry.Get(ctx, term)
			if err != nil {
				return false, err
			}
			if !rec.Status.Terminal() || rec.Status == thread.StatusContinued {
				allDone = false
			}
			if rec.Status != thread.StatusCompleted {
				anyFailed = true
			}
			results[id] = childSummary(rec)
		}
		if p.Kind == "spawn" {
			s.toolJSON(p.CallID, p.Tool, results[p.Threads[0]], anyFailed)
			continue
		}
		ids := append([]string(nil), p.Threads...)
		sort.Strings(ids)
		s.toolJSON(p.CallID, p.Tool, map[string]any{"success": allDone, "timed_out": !allDone, "results": results}, false)
	}
	s.st.Pending = nil
	return true, nil
}

// childSummary is what a parent sees of a finished (or still running) child.
func childSummary(rec *queue.Record) map[string]any {
	return map[string]any{
		"thread_id": rec.ThreadID, "directive": rec.Directive, "status": rec.Status, "result": rec.Result,
		"outputs": rec.Outputs, "error": rec.Error, "cost": rec.Cost,
	}
}
