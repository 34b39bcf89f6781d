package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
	"github.com/spool-run/spool/hooks"
	"github.com/spool-run/spool/provider"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/thread"
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
func (s *session) dispatch(ctx context.Context, call thread.ToolCall) (err error) {
	id := normalizeTool(call.Name)
	ctx, span := s.tracer.startTool(ctx, call, id)
	defer func() { s.tracer.endTool(span, s.msgs, call.ID, err) }()
	s.st.ToolCalls++
	s.st.ToolCallsByID[id]++
	if s.st.TurnCallsByID == nil {
		s.st.TurnCallsByID = map[string]int{}
	}
	s.st.TurnCallsByID[id]++
	s.emit(transcript.TypeToolCallStart, transcript.ToolCallStart{CallID: call.ID, Tool: id, Input: call.Input})
	if msg, cut := s.tools.cutCall(call.ID); cut {
		s.toolResult(call.ID, id, msg, true, "")
		return nil
	}
	if id == runGraphID {
		// Its capability is the graph's, not the tool's.
		if err := checkGraphCall(s.rec, call.Input); err != nil {
			s.toolResult(call.ID, id, err.Error(), true, "")
			return nil
		}
	} else if id != directiveReturnID {
		if err := s.tools.check(id); err != nil {
			s.toolResult(call.ID, id, err.Error(), true, "")
			return nil
		}
	}
	if rule := s.proj.Approvals.Match(id); rule != nil {
		// A person decides before it runs (approvals.go); the turn's
		// other calls go on.
		s.requestApproval(ctx, call, id, rule)
		return nil
	}
	return s.execute(ctx, call, id)
}

// execute runs a tool call that may run: permitted, and approved when
// approvals.yaml gates it.
func (s *session) execute(ctx context.Context, call thread.ToolCall, id string) error {
	switch id {
	case directiveReturnID:
		s.directiveReturn(ctx, call)
		return nil
	case threadDirectiveID, runGraphID:
		return s.startChild(ctx, call, id)
	case orchestratorID:
		return s.orchestrate(ctx, call)
	}
	res, ok, err := s.tools.run(ctx, id, call.Input)
	if !ok {
		s.toolResult(call.ID, id, fmt.Sprintf("unknown tool %s", id), true, "")
		return nil
	}
	if err != nil {
		if stopRequested(ctx) {
			// A cancel request or the duration limit stopped the tool
			// (its process group is killed): the call is answered, so
			// the transcript stays a valid conversation for a resume;
			// the turn ends the thread (stopAfter), naming the tool.
			s.toolResult(call.ID, id, stoppedWhile(ctx), true, "")
			s.interrupted = id
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
	bounded, err := s.tools.bound(ctx, call.ID, res)
	if err != nil {
		return err
	}
	s.toolResult(call.ID, id, bounded.Output, bounded.IsError, bounded.Artifact)
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
	s.st.decide(thread.StatusCompleted, result, outputs, nil)
}

// spawnInput is the thread_directive tool's input as the model is offered
// it (orchestrationDefs: its schema is made from this type).
type spawnInput struct {
	DirectiveName  string          `json:"directive_name"`
	Inputs         json.RawMessage `json:"inputs,omitempty"`
	Async          bool            `json:"async,omitempty"`
	LimitOverrides map[string]any  `json:"limit_overrides,omitempty"`
	// Reserve asks for a guaranteed budget (orchestrator.StartRequest).
	Reserve bool   `json:"reserve,omitempty"`
	Model   string `json:"model,omitempty"`
}

// spawnParams are the thread_directive tool's parameters: its input, and
// directive_id, which a call may name the directive by instead.
type spawnParams struct {
	spawnInput
	DirectiveID string `json:"directive_id"`
}

// errorObject renders an error as the CLI's {"code","message"} object.
func errorObject(err error) map[string]any {
	var le *thread.LimitError
	if errors.As(err, &le) {
		return map[string]any{"code": le.Code, "message": err.Error()}
	}
	var ae *thread.AdmissionError
	if errors.As(err, &ae) {
		return map[string]any{"code": ae.Code, "message": err.Error()}
	}
	return map[string]any{"code": "spawn_failed", "message": err.Error()}
}

// isInfra reports whether err is an infrastructure failure (Redis or the
// blob store out of reach), which retries the activation, rather than a
// refusal to give to the model. It goes by the error's type, never its
// text: a network error (go-redis and the AWS SDK wrap a *net.OpError, a
// timeout is a net.Error too), a refused connection, a closed client, a
// deadline, an activation Redis did not take (queue.ErrNotEnqueued:
// asynq words the network error as text); a limit is never one.
func isInfra(err error) bool {
	var le *thread.LimitError
	if errors.As(err, &le) {
		return false
	}
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, redis.ErrClosed) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, queue.ErrNotEnqueued)
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
