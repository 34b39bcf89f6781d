package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"strings"

	"github.com/spool-run/spool/directive"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/tools"
)

// buildTools is the thread's tool registry: the built-in file tools and
// the project's external tools from the bundle.
func (s *session) buildTools() (*tools.Registry, error) {
	ext, err := tools.LoadExternal(s.proj.Bundle, tools.ExternalConfig{})
	if err != nil {
		return nil, &permanentError{code: "tool_error", msg: err.Error()}
	}
	r, err := tools.NewRegistry(append(tools.Builtins(tools.FSConfig{}), ext...)...)
	if err != nil {
		return nil, &permanentError{code: "tool_error", msg: err.Error()}
	}
	return r, nil
}

// orchestrationDefs describe the tools the worker implements itself.
var orchestrationDefs = []thread.ToolDef{
	{Name: threadDirectiveID, Description: "Start a child thread running a directive. Synchronous by default: the call returns the child's result. With async=true it returns the child's thread_id at once.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"directive_name":{"type":"string"},"inputs":{"type":"object"},"async":{"type":"boolean"},"limit_overrides":{"type":"object"},"model":{"type":"string"}},"required":["directive_name"]}`)},
	{Name: orchestratorID, Description: "Coordinate threads: operation is one of wait_threads (thread_ids, timeout seconds), cancel_thread, get_status, list_children, get_chain, chain_search (query regex), resume_thread (message), read_transcript.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"operation":{"type":"string","enum":["wait_threads","cancel_thread","get_status","list_children","get_chain","chain_search","resume_thread","read_transcript"]},"thread_id":{"type":"string"},"thread_ids":{"type":"array","items":{"type":"string"}},"timeout":{"type":"number"},"message":{"type":"string"},"query":{"type":"string"},"max_results":{"type":"integer"}},"required":["operation"]}`)},
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
	allowed := func(id string) bool { return thread.Match(s.rec.Capabilities, thread.ToolCapability(id)) }
	defs := s.tools.Defs(allowed)
	for _, d := range orchestrationDefs {
		if allowed(d.Name) {
			defs = append(defs, d)
		}
	}
	return append(defs, directiveReturnDef(s.dir))
}

// The session is the hooks' action runner.

// Load returns a knowledge or directive item's content for context
// injection. Knowledge ids resolve under .ai/knowledge/ in the bundle, or
// to a thread's knowledge render for "agent/threads/<thread id>".
func (s *session) Load(ctx context.Context, itemType, itemID string) (string, error) {
	switch itemType {
	case "knowledge":
		if id, ok := strings.CutPrefix(itemID, "agent/threads/"); ok {
			if b, err := s.o.Store.Get(ctx, "threads/"+lastSegment(id)+"/knowledge.md"); err == nil {
				return string(b), nil
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

// lastSegment returns what follows the last "/" ("dir/x-1" → "x-1"): a
// knowledge id may name a thread under its directive's folder.
func lastSegment(id string) string {
	if i := strings.LastIndex(id, "/"); i >= 0 {
		return id[i+1:]
	}
	return id
}

// Execute runs a tool (as the thread, under its capabilities) or loads a
// knowledge item, for hooks whose action is execute.
func (s *session) Execute(ctx context.Context, itemType, itemID string, params map[string]any) (string, error) {
	switch itemType {
	case "knowledge", "directive":
		return s.Load(ctx, itemType, itemID)
	case "tool":
		id := normalizeTool(itemID)
		if !thread.Match(s.rec.Capabilities, thread.ToolCapability(id)) && !strings.HasPrefix(id, "rye/agent/threads/") {
			return "", fmt.Errorf("hook tool %s: capability %s not held", id, thread.ToolCapability(id))
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

// Search lists knowledge items whose path contains the query.
func (s *session) Search(ctx context.Context, itemType, query string) (string, error) {
	var hits []string
	_ = fs.WalkDir(s.proj.Bundle, ".ai/"+itemType, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.Contains(p, query) {
			hits = append(hits, p)
		}
		return nil
	})
	return strings.Join(hits, "\n"), nil
}
