package graph

import (
	"fmt"

	"github.com/spool-run/spool/internal/spelling"
)

// ToolUse is a tool action of a graph: the node it is in ("" for a hook),
// the key that names it and the tool's id as written.
type ToolUse struct {
	Node string
	Key  string
	Tool string
}

// ToolUses are g's tool actions whose tool is fixed (not computed with
// ${...}), in node order, then its hooks'.
func (g *Graph) ToolUses() []ToolUse {
	var out []ToolUse
	add := func(node, key string, a *Action) {
		if a != nil && a.Tool != "" && !hasRefs(a.Tool) {
			out = append(out, ToolUse{Node: node, Key: key + ".tool", Tool: a.Tool})
		}
	}
	for _, name := range g.order() {
		add(name, "action", g.Nodes[name].Action)
	}
	for i, h := range g.Hooks {
		a := h.Action
		add("", fmt.Sprintf("config.hooks[%d].action", i), &a)
	}
	return out
}

// UnknownTools warns of each tool action of g whose tool known does not
// know (known answers for the tools a worker could run the graph with:
// the built-in ones, the project's, an MCP server's and graphs kept as
// tools). Such a step fails tool_error when it runs; a warning, not an
// error, as the tool may come from a project or server not in reach of
// the check. A near known name is suggested when names lists them.
func (g *Graph) UnknownTools(known func(tool string) bool, names []string) []Diagnostic {
	var out []Diagnostic
	for _, u := range g.ToolUses() {
		if known(u.Tool) {
			continue
		}
		msg := fmt.Sprintf("tool %q is neither built in, a project tool, a graph nor a tool of a configured MCP server (the step would fail tool_error)", u.Tool)
		if n := spelling.Nearest(u.Tool, names); n != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", n)
		}
		out = append(out, Diagnostic{Node: u.Node, Key: u.Key, Message: msg})
	}
	return out
}
