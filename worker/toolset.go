package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"reflect"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/spool-run/spool/directive"
	"github.com/spool-run/spool/mcpclient"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/tools"
)

// buildTools is the thread's tool registry: the built-in file tools, the
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
	all := append(tools.Builtins(tools.FSConfig{}), ext...)
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
	{Name: orchestratorID, Description: "Coordinate threads: operation is one of wait_threads (thread_ids, timeout seconds), cancel_thread, get_status, list_children, get_chain, chain_search (query regex), resume_thread (message), read_transcript.",
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
		reflect.TypeFor[[]string](): {Type: "array", Items: &jsonschema.Schema{Type: "string"}}}})
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

// toolDefs are the tools offered to the model: those the thread's
// capabilities allow, plus directive_return. A call to a tool not offered
// is still checked and refused with an error the model can read.
func (s *session) toolDefs() []thread.ToolDef {
	s.defsOnce.Do(func() {
		allowed := func(id string) bool { return thread.Match(s.rec.Capabilities, thread.ToolCapability(id)) }
		defs := s.tools.Defs(allowed)
		for _, d := range orchestrationDefs {
			if allowed(d.Name) {
				defs = append(defs, d)
			}
		}
		if holdsGraphCapability(s.rec.Capabilities) {
			defs = append(defs, runGraphDef)
		}
		defs = append(defs, directiveReturnDef(s.dir))
		s.defs = defs
	})
	return s.defs
}

// The session is the hooks' action runner. Hooks act as the thread: every
// item action is checked against the thread's capabilities, as the model's
// tool calls are, and a refusal is the action's error (recorded in the
// hook_fired event; the thread runs on). Fail closed, like the rest of the
// capability model: a directive whose hooks load knowledge declares
// <load><knowledge>...</knowledge></load>, one whose hooks search declares
// <search>, and user and project hooks get no more than the thread they run
// in (the same holds for their execute actions).

// Load returns a knowledge or directive item's content for context
// injection; the thread must hold rye.load.<item type>.<item id>. Knowledge
// ids resolve to a thread's knowledge render for "agent/threads/<thread
// id>" or "agent/threads/<directive>/<thread id>" (where the reference
// keeps it), else under .ai/knowledge/ in the bundle.
func (s *session) Load(ctx context.Context, itemType, itemID string) (string, error) {
	if need := thread.Capability(thread.PrimaryLoad, itemType, itemID); !thread.Match(s.rec.Capabilities, need) {
		return "", fmt.Errorf("load %s %s: capability %s not held%s", itemType, itemID, need, droppedNote(s.rec, need))
	}
	switch itemType {
	case "knowledge":
		if rest, ok := strings.CutPrefix(itemID, "agent/threads/"); ok {
			text, found, err := s.threadKnowledge(ctx, rest)
			if err != nil || found {
				return text, err
			}
		}
		for _, p := range []string{".ai/knowledge/" + itemID + ".md", ".ai/knowledge/" + itemID} {
			if b, err := fs.ReadFile(s.proj.Bundle, p); err == nil {
				return string(b), nil
			}
		}
		return "", fmt.Errorf("knowledge %q not found", itemID)
	case "directive":
		d, err := s.proj.Directive(itemID)
		if err != nil {
			return "", err
		}
		return d.Prompt, nil
	}
	return "", fmt.Errorf("load: unsupported item_type %q", itemType)
}

// threadKnowledge returns the verified knowledge render of the thread that
// ref names (see knowledgeThreadIDs), read at blobkey.Knowledge of
// the thread's directive, which the registry knows. found is false when
// no thread has that id.
func (s *session) threadKnowledge(ctx context.Context, ref string) (text string, found bool, err error) {
	ids := knowledgeThreadIDs(ref)
	recs, err := s.reg.GetMany(ctx, ids)
	if err != nil {
		return "", false, err
	}
	byID := make(map[string]*registry.Record, len(recs))
	for _, r := range recs {
		byID[r.ThreadID] = r
	}
	for _, id := range ids {
		rec := byID[id]
		if rec == nil || (id != ref && rec.Directive+"/"+rec.ThreadID != ref) {
			continue
		}
		// Rendered now from the thread's transcript, read strictly: what
		// goes into the model's context is held to the transcript's
		// standard.
		body, err := s.o.Knowledge(ctx, rec)
		if err != nil {
			return "", true, err
		}
		return string(body), true, nil
	}
	return "", false, nil
}

// knowledgeThreadIDs are the thread ids a knowledge reference under
// agent/threads/ may name, in the order they are tried: the whole
// reference (thread ids hold the directive's slashes: "t/x-1739820456-ab"),
// then what follows each "/", for "<directive>/<thread id>".
func knowledgeThreadIDs(ref string) []string {
	ids := []string{ref}
	for i := 0; i < len(ref); i++ {
		if ref[i] == '/' && i+1 < len(ref) {
			ids = append(ids, ref[i+1:])
		}
	}
	return ids
}

// Execute runs a tool (as the thread, under its capabilities: the check of
// the model's tool calls) or loads a knowledge or directive item, for hooks
// whose action is execute.
func (s *session) Execute(ctx context.Context, itemType, itemID string, params map[string]any) (string, error) {
	switch itemType {
	case "knowledge", "directive":
		return s.Load(ctx, itemType, itemID)
	case "tool":
		id := normalizeTool(itemID)
		if err := s.checkTool(id); err != nil {
			return "", fmt.Errorf("hook tool %s: %w", id, err)
		}
		t, ok := s.tools.Lookup(id)
		if !ok {
			return "", fmt.Errorf("hook tool %s: unknown tool", id)
		}
		in, _ := json.Marshal(params)
		res, err := t.Run(ctx, s.toolEnv, in)
		if err != nil {
			return "", err
		}
		if res.IsError {
			return "", fmt.Errorf("hook tool %s: %s", id, res.Output)
		}
		return res.Output, nil
	}
	return "", fmt.Errorf("execute: unsupported item_type %q", itemType)
}

// Search lists the items of itemType in the bundle whose path contains the
// query and that the thread may search (rye.search.<item type>.<item id>).
// When there are hits and the thread may search none of them, the search
// is refused with an error naming the capability of the first.
func (s *session) Search(ctx context.Context, itemType, query string) (string, error) {
	root := ".ai/" + itemType
	var hits []string
	denied := ""
	_ = fs.WalkDir(s.proj.Bundle, root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.Contains(p, query) {
			return nil
		}
		id := strings.TrimSuffix(strings.TrimPrefix(p, root+"/"), ".md")
		if need := thread.Capability(thread.PrimarySearch, itemType, id); !thread.Match(s.rec.Capabilities, need) {
			if denied == "" {
				denied = need
			}
			return nil
		}
		hits = append(hits, p)
		return nil
	})
	if len(hits) == 0 && denied != "" {
		return "", fmt.Errorf("search %s %q: capability %s not held%s", itemType, query, denied, droppedNote(s.rec, denied))
	}
	return strings.Join(hits, "\n"), nil
}
