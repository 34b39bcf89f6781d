package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/directive"
	"github.com/spool-run/spool/mcpclient"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/provider"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/tools"
)

// buildTools is the thread's tool registry: the built-in file tools and
// rye/bash (which runs commands only where Config.AllowShell), the
// project's external tools from the bundle, and the tools of the MCP
// servers of its mcp.yaml that the thread may call (mcp/<server>/<tool>).
// An MCP server that cannot be started or reached fails the activation,
// which is retried; one whose configuration cannot work on this worker
// (mcpclient.ErrConfig) ends the thread.
func (s *activation) buildTools(ctx context.Context, proj *orchestrator.Project) (*tools.Registry, error) {
	ext, err := tools.LoadExternal(proj.Bundle, tools.ExternalConfig{})
	if err != nil {
		return nil, &permanentError{code: "tool_error", msg: err.Error()}
	}
	all := append(append(tools.Builtins(tools.FSConfig{}), tools.Shell(tools.ShellConfig{Allowed: s.w.cfg.AllowShell})), ext...)
	if proj.MCP != nil {
		may := func(server string) bool {
			return thread.MatchUnder(s.rec.Capabilities, thread.ToolCapability("mcp/"+server)+".")
		}
		mcpTools, err := s.w.mcp.Tools(ctx, proj.MCP, may)
		if errors.Is(err, mcpclient.ErrConfig) {
			return nil, &permanentError{code: "tool_error", msg: fmt.Sprintf("%v (on worker %s)", err, s.w.cfg.Host)}
		}
		if err != nil {
			s.log.Warn("mcp server unavailable: the activation is retried", "error", err)
			return nil, err
		}
		all = append(all, mcpTools...)
	}
	r, err := tools.NewRegistry(all...)
	if err != nil {
		return nil, &permanentError{code: "tool_error", msg: err.Error()}
	}
	return r, nil
}

// orchestrationDefs describe the tools the worker implements itself,
// their input schemas made from the types their calls decode into.
var orchestrationDefs = []thread.ToolDef{
	{Name: threadDirectiveID, Description: "Start a child thread running a directive. Synchronous by default: the call returns the child's result. With async=true it returns the child's thread_id at once.",
		InputSchema: inputSchema[spawnInput](nil)},
	{Name: orchestratorID, Description: "Coordinate threads: operation is one of wait_threads (thread_ids, timeout seconds), cancel_thread, get_status, list_children, get_chain, chain_search (query regex), resume_thread (message), read_transcript, send_graph_message (thread_id: a graph run of this tree; name, data, message_id: a message its wait_message node of that name takes).",
		InputSchema: inputSchema[orchestratorInput](map[string][]any{"operation": orchestratorOperations})},
}

// inputSchema is the JSON schema of a tool input that decodes into a T,
// made by jsonschema-go: T's fields as properties in their order, each
// required unless omitempty, a json.RawMessage or map[string]any an
// object, a []string an array (not null); properties beyond them are not
// refused (a call may carry more than the model is offered). enums names
// the values some properties take. It panics on a type it cannot
// describe: the types are fixed.
func inputSchema[T any](enums map[string][]any) json.RawMessage {
	object := &jsonschema.Schema{Type: "object"}
	s, err := jsonschema.For[T](&jsonschema.ForOptions{TypeSchemas: map[reflect.Type]*jsonschema.Schema{
		reflect.TypeFor[json.RawMessage](): object, reflect.TypeFor[map[string]any](): object,
		reflect.TypeFor[[]string](): {Type: "array", Items: &jsonschema.Schema{Type: "string"}},
		// Any JSON value, as an object some providers accept (not the
		// boolean schema true).
		reflect.TypeFor[any](): {Description: "any JSON value"}}})
	if err != nil {
		panic(fmt.Sprintf("tool input schema of %T: %v", *new(T), err))
	}
	s.AdditionalProperties = nil
	for name, values := range enums {
		s.Properties[name].Enum = values
	}
	b, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("tool input schema of %T: %v", *new(T), err))
	}
	return b
}

func directiveReturnDef(d *directive.Directive) thread.ToolDef {
	props := map[string]any{}
	var required []string
	for _, f := range d.Outputs.Fields {
		props[f.Name] = map[string]any{"type": "string", "description": f.Description}
		if f.Required {
			required = append(required, f.Name)
		}
	}
	schema := map[string]any{"type": "object", "properties": props}
	if len(required) > 0 {
		schema["required"] = required
	}
	b, _ := json.Marshal(schema)
	return thread.ToolDef{Name: directiveReturnID, Description: "Finish this thread with its declared outputs.", InputSchema: b}
}

// toolRunner is a thread's tools as its activation runs them: the
// registry of its built-in, external and MCP tools and the environment
// they run in, held to the thread's capabilities (check); the tool
// definitions offered to the model (defs); the bound on a result's size
// (bound); and the calls of the current answer that are refused instead
// of run (cut). It holds what those use and nothing of the session; a
// session has one.
type toolRunner struct {
	tools *tools.Registry
	env   *tools.Env
	// capabilities are the thread's; dropped are those its directive
	// asked for and its parent does not hold (droppedNote).
	capabilities []string
	dropped      []string
	// dir declares the outputs of directive_return.
	dir    *directive.Directive
	store  blobstore.Store
	thread string
	// maxResult bounds a result (Config.MaxToolResultBytes); maxOutput
	// is the model's output cap (Config.MaxOutputTokens) that a cut
	// call's error names.
	maxResult int
	maxOutput int
	// defs are the tool definitions the thread may call (defs): the
	// same for every model call of the activation and capabilities.md,
	// which is written beside the loop.
	defsOnce sync.Once
	defs     []thread.ToolDef
	// cutInputs are the calls of the current answer whose input was over
	// Config.MaxToolInputBytes (session.boundResponse) or cut by the
	// output cap (refuseCutCalls), by call id, with the error dispatch
	// answers them with.
	cutInputs map[string]string
}

// newToolRunner is the tool runner of rec's activation, for directive
// dir, under the worker's bounds; its registry and environment are set
// once they are built (session.load).
func newToolRunner(rec *registry.Record, dir *directive.Directive, store blobstore.Store, cfg *Config) *toolRunner {
	return &toolRunner{capabilities: rec.Capabilities, dropped: rec.DroppedCapabilities, dir: dir, store: store,
		thread: rec.ThreadID, maxResult: cfg.MaxToolResultBytes, maxOutput: cfg.MaxOutputTokens}
}

// toolDefs are the tools offered to the model: those the thread's
// capabilities allow, plus directive_return. A call to a tool not offered
// is still checked and refused with an error the model can read.
func (r *toolRunner) toolDefs() []thread.ToolDef {
	r.defsOnce.Do(func() {
		allowed := func(id string) bool { return thread.Match(r.capabilities, thread.ToolCapability(id)) }
		defs := r.tools.Defs(allowed)
		for _, d := range orchestrationDefs {
			if allowed(d.Name) {
				defs = append(defs, d)
			}
		}
		if holdsGraphCapability(r.capabilities) {
			defs = append(defs, runGraphDef)
		}
		defs = append(defs, directiveReturnDef(r.dir))
		r.defs = defs
	})
	return r.defs
}

// check is the permission check of a tool call (spec runner step 7),
// for the model's calls and hooks' execute actions alike: the thread must
// hold the tool's execute capability. The error is what the caller sees.
func (r *toolRunner) check(id string) error {
	if need := thread.ToolCapability(id); !thread.Match(r.capabilities, need) {
		return fmt.Errorf("permission denied: calling %s needs capability %s, which this thread does not hold%s", id, need, droppedNote(r.dropped, need))
	}
	return nil
}

// run runs tool id of the registry on input; found is false when the
// thread has no such tool. An error is the tool's infrastructure failure
// (tools.Tool), not a result.
func (r *toolRunner) run(ctx context.Context, id string, input json.RawMessage) (res tools.Result, found bool, err error) {
	tool, ok := r.tools.Lookup(id)
	if !ok {
		return tools.Result{}, false, nil
	}
	res, err = tool.Run(ctx, r.env, input)
	return res, true, err
}

// bound keeps call callID's result within Config.MaxToolResultBytes: a
// larger one is stored whole as an artifact and cut (tools.Bound).
func (r *toolRunner) bound(ctx context.Context, callID string, res tools.Result) (tools.Result, error) {
	return tools.Bound(ctx, r.store, blobkey.ToolResult(r.thread, callID), res, r.maxResult)
}

// clearCuts forgets the cut calls of the previous answer.
func (r *toolRunner) clearCuts() { r.cutInputs = nil }

// cut records that call id of the current answer is answered with msg,
// an error, instead of run.
func (r *toolRunner) cut(id, msg string) {
	if r.cutInputs == nil {
		r.cutInputs = map[string]string{}
	}
	r.cutInputs[id] = msg
}

// cutCall is the error that call id is answered with instead of run, if
// its input was cut.
func (r *toolRunner) cutCall(id string) (string, bool) {
	msg, cut := r.cutInputs[id]
	return msg, cut
}

// refuseCutCalls answers with an error, instead of running, a call whose
// input the output cap cut: the answer stopped at max_tokens (Anthropic)
// or length (OpenAI) and the call's input is not a JSON object (the
// provider keeps the text the model wrote as a JSON string). The model
// learns why, rather than a parse error it would repeat.
func (r *toolRunner) refuseCutCalls(resp *provider.Response) {
	if resp.StopReason != "max_tokens" && resp.StopReason != "length" {
		return
	}
	for _, c := range resp.ToolCalls {
		if in := bytes.TrimSpace(c.Input); len(in) > 0 && in[0] == '{' && json.Valid(in) {
			continue
		}
		if _, cut := r.cutCall(c.ID); !cut {
			r.cut(c.ID, fmt.Sprintf("your answer reached the output limit (max_tokens %d) inside this call's input, "+
				"which is incomplete; it was not run. Call it again with less input (split large content over several calls)", r.maxOutput))
		}
	}
}
