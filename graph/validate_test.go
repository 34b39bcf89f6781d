package graph

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// base is a valid graph with no warnings; the cases below change one thing.
const base = `a:
  action: {tool: t/x, params: {p: "${inputs.x}"}}
  assign: {v: "${result.v}"}
  next: done
done:
  type: return
  output: {v: "${state.v}"}`

func TestValidateBase(t *testing.T) {
	t.Parallel()
	_, r, err := Parse("x", []byte(withNodes(base)))
	require.NoError(t, err)
	require.Empty(t, r.Errors)
	require.Empty(t, r.Warnings)
	require.NoError(t, r.Err())
}

func TestValidateErrors(t *testing.T) {
	t.Parallel()
	cfg := func(config string) string { return testHeader + "config:\n" + indent(config, 2) }
	tests := []struct {
		name, src, node, key, msg string
	}{
		{"missing permissions", strings.Replace(withNodes(base), "permissions:", "permissions_x:", 1), "", "permissions", "missing or empty"},
		{"empty permissions", strings.Replace(withNodes(base), `permissions: ["rye.execute.tool.*", "rye.execute.directive.*", "rye.execute.graph.*"]`, "permissions: []", 1), "", "permissions", "missing or empty"},
		{"missing start", cfg("nodes: {done: {type: return}}"), "", "config.start", "missing"},
		{"missing nodes", cfg("start: a"), "", "config.nodes", "missing"},
		{"missing config", testHeader, "", "config.start", "missing"},
		{"unknown start", cfg("start: dne\nnodes: {done: {type: return}}"), "", "config.start", "unknown node `dne` (did you mean `done`?)"},
		{"unknown next", withNodes("a: {type: gate, next: doen}\ndone: {type: return}"), "a", "next", "unknown node `doen` (did you mean `done`?)"},
		{"unknown edge target", withNodes("a: {type: gate, next: [{when: {path: state.x, op: exists}, to: zz}, {to: done}]}\ndone: {type: return}"), "a", "next[0]", "unknown node `zz`"},
		{"unknown on_error", withNodes("a: {action: {tool: t}, on_error: oops, next: done}\ndone: {type: return}"), "a", "on_error", "unknown node `oops`"},
		{"unknown config.on_error", cfg("start: a\non_error: retry\nnodes: {a: {type: return}}"), "", "config.on_error", "unknown node `retry`"},
		{"unknown kind", withNodes("a: {type: gat, next: done}\ndone: {type: return}"), "a", "type", "unknown node kind `gat` (did you mean `gate`?)"},
		{"unknown operator", withNodes("a: {type: gate, next: [{when: {path: state.x, op: neq, value: 1}, to: done}, {to: done}]}\ndone: {type: return}"), "a", "next[0].when", `unknown op "neq"`},
		{"bad regex", withNodes("a: {type: gate, next: [{when: {path: state.x, op: regex, value: '('}, to: done}, {to: done}]}\ndone: {type: return}"), "a", "next[0].when", "regex"},
		{"default edge not last", withNodes("a: {type: gate, next: [{to: done}, {when: {path: state.x, op: exists}, to: done}]}\ndone: {type: return}"), "a", "next[0]", "must be last"},
		{"two default edges", withNodes("a: {type: gate, next: [{when: {path: state.x, op: exists}, to: done}, {to: done}, {to: done}]}\ndone: {type: return}"), "a", "next[2]", "a second default edge"},
		{"foreach without over", withNodes("a: {type: foreach, action: {tool: t}, next: done}\ndone: {type: return}"), "a", "over", "missing"},
		{"foreach without action", withNodes("a: {type: foreach, over: '${inputs.l}', next: done}\ndone: {type: return}"), "a", "action", "missing"},
		{"collect equals as", withNodes("a: {type: foreach, over: '${inputs.l}', as: x, collect: x, action: {tool: t}, next: done}\ndone: {type: return, output: '${state.x}'}"), "a", "collect", "equals as"},
		{"max_concurrency zero", withNodes("a: {type: foreach, over: '${inputs.l}', parallel: true, max_concurrency: 0, action: {tool: t}, next: done}\ndone: {type: return}"), "a", "max_concurrency", "must be 1..256"},
		{"max_concurrency too big", withNodes("a: {type: foreach, over: '${inputs.l}', parallel: true, max_concurrency: 257, action: {tool: t}, next: done}\ndone: {type: return}"), "a", "max_concurrency", "must be 1..256"},
		{"config max_concurrency", cfg("start: a\nmax_concurrency: 0\nnodes: {a: {type: return}}"), "", "config.max_concurrency", "must be 1..256"},
		{"result in own action", withNodes("a: {action: {tool: t, params: {p: '${result.x}'}}, next: done}\ndone: {type: return}"), "a", "action.params", "`result` inside the node's own action"},
		{"result in own action id", withNodes("a: {action: {tool: 't/${result.x}'}, next: done}\ndone: {type: return}"), "a", "action.tool", "`result` inside the node's own action"},
		{"result in over", withNodes("a: {type: foreach, over: '${result.l}', action: {tool: t}, next: done}\ndone: {type: return}"), "a", "over", "`result` is not set yet"},
		{"assign to inputs", withNodes("a: {type: gate, assign: {inputs: 1}, next: done}\ndone: {type: return}"), "a", "assign.inputs", "cannot assign `inputs`"},
		{"assign to underscore key", withNodes("a: {type: gate, assign: {_last_error: 1}, next: done}\ndone: {type: return}"), "a", "assign._last_error", "cannot assign `_last_error`"},
		{"collect into underscore key", withNodes("a: {type: foreach, over: '${inputs.l}', collect: _r, action: {tool: t}, next: done}\ndone: {type: return}"), "a", "collect", "cannot collect"},
		{"unsupported primary", withNodes("a: {action: {primary: fetch, item_id: 'tool:x'}, next: done}\ndone: {type: return}"), "a", "action.primary", "`fetch` is not supported in v1"},
		{"unsupported item kind", withNodes("a: {action: {primary: execute, item_id: 'knowledge:x'}, next: done}\ndone: {type: return}"), "a", "action.item_id", "a knowledge item cannot be executed"},
		{"reference id without kind", withNodes("a: {action: {primary: execute, item_id: rye/bash}, next: done}\ndone: {type: return}"), "a", "action.item_id", "has no kind"},
		{"retry attempts zero", withNodes("a: {action: {tool: t}, retry: {attempts: 0}, next: done}\ndone: {type: return}"), "a", "retry.attempts", "must be 1..10"},
		{"retry attempts eleven", withNodes("a: {action: {tool: t}, retry: {attempts: 11}, next: done}\ndone: {type: return}"), "a", "retry.attempts", "must be 1..10"},
		{"max_steps above cap", strings.Replace(withNodes(base), "config:", "limits: {max_steps: 10001}\nconfig:", 1), "", "limits.max_steps", "above the hard cap 10000"},
		{"config max_steps above cap", cfg("start: a\nmax_steps: 20000\nnodes: {a: {type: return}}"), "", "config.max_steps", "above the hard cap"},
		{"max_steps zero", strings.Replace(withNodes(base), "config:", "limits: {max_steps: 0}\nconfig:", 1), "", "limits.max_steps", "at least 1"},
		{"inputs schema", strings.Replace(withNodes(base), "config:", "inputs: {type: object, properties: {x: {type: strin}}}\nconfig:", 1), "", "inputs", "not a type"},
		{"inputs schema unknown keyword", strings.Replace(withNodes(base), "config:", "inputs: {type: object, properties: {x: {type: string, minLenght: 2}}}\nconfig:", 1), "", "inputs", "unknown key `properties.x.minLenght`"},
		{"bad node name", withNodes("a: {type: gate, next: 'bad name'}\n'bad name': {type: return}"), "bad name", "", "must match"},
		{"long node name", withNodes("a: {type: gate, next: " + strings.Repeat("n", 65) + "}\n" + strings.Repeat("n", 65) + ": {type: return}"), strings.Repeat("n", 65), "", "must match"},
		{"unknown filter", withNodes("a: {type: gate, assign: {v: '${inputs.x | shout}'}, next: done}\ndone: {type: return, output: '${state.v}'}"), "a", "assign.v", `unknown filter "shout"`},
		{"bad expression", withNodes("a: {type: gate, assign: {v: '${inputs.x ||}'}, next: done}\ndone: {type: return, output: '${state.v}'}"), "a", "assign.v", "empty reference"},
		{"action node without action", withNodes("a: {next: done}\ndone: {type: return}"), "a", "action", "missing"},
		{"two action ids", withNodes("a: {action: {tool: t, directive: d}, next: done}\ndone: {type: return}"), "a", "action", "more than one"},
		{"mixed action forms", withNodes("a: {action: {tool: t, item_id: 'tool:t'}, next: done}\ndone: {type: return}"), "a", "action", "mixes the reference form"},
		{"bad limits", withNodes("a: {action: {directive: d, limits: {turns: -1}}, next: done}\ndone: {type: return}"), "a", "action.limits", "negative"},
		{"bad graph limits", strings.Replace(withNodes(base), "config:", "limits: {spend: lots}\nconfig:", 1), "", "limits.spend", "not a number"},
		{"tool_type not graph", strings.Replace(withNodes(base), "config:", "tool_type: python\nconfig:", 1), "", "tool_type", "must be `graph`"},
		{"thread event", cfg("start: a\nhooks: [{event: thread_started, action: {tool: t}}]\nnodes: {a: {type: return}}"), "", "config.hooks[0].event", "thread event"},
		{"unknown hook event", cfg("start: a\nhooks: [{event: graph_complete, action: {tool: t}}]\nnodes: {a: {type: return}}"), "", "config.hooks[0].event", "(did you mean `graph_completed`?)"},
		{"hook control primary", cfg("start: a\nhooks: [{event: error, action: {primary: retry}}]\nnodes: {a: {type: return}}"), "", "config.hooks[0].action.primary", "not available to graph hooks"},
		{"hook bad condition", cfg("start: a\nhooks: [{event: error, condition: {path: x, op: neq}, action: {tool: t}}]\nnodes: {a: {type: return}}"), "", "config.hooks[0].condition", "unknown op"},
		{"reserved state key", cfg("start: a\nstate: {_x: 1}\nnodes: {a: {type: return, output: '${state._x}'}}"), "", "config.state._x", "reserved"},
		{"as is a namespace", withNodes("a: {type: foreach, over: '${inputs.l}', as: state, action: {tool: t}, next: done}\ndone: {type: return}"), "a", "as", "namespace"},
		{"approval without prompt", withNodes("a: {type: approval, next: done}\ndone: {type: return}"), "a", "prompt", "missing"},
		{"wait without threads", withNodes("a: {type: wait, next: done}\ndone: {type: return}"), "a", "threads", "missing"},
		{"bad wait mode", withNodes("a: {type: wait, threads: '${inputs.t}', mode: some, next: done}\ndone: {type: return}"), "a", "mode", "must be all or any"},
		{"bad on_item_error", withNodes("a: {type: foreach, over: '${inputs.l}', on_item_error: skip, action: {tool: t}, next: done}\ndone: {type: return}"), "a", "on_item_error", "must be fail or continue"},
		{"bad on_timeout", withNodes("a: {type: approval, prompt: ok, on_timeout: maybe, next: done}\ndone: {type: return}"), "a", "on_timeout", "must be deny or approve"},
		{"bad duration", withNodes("a: {action: {tool: t}, timeout: soon, next: done}\ndone: {type: return}"), "a", "timeout", "not a duration"},
		{"non-finite number", withNodes("a: {type: gate, assign: {v: .inf}, next: done}\ndone: {type: return, output: '${state.v}'}"), "a", "assign.v", "not a finite number"},
		{"output not an object", withNodes("a: {type: return, output: [1, 2]}"), "a", "output", "must be a mapping"},
		{"output text", withNodes("a: {type: return, output: 'done: ${inputs.x}'}"), "a", "output", "must be a mapping"},
		{"unknown namespace", withNodes("a: {action: {tool: t, params: {p: '${stat.x}'}}, next: done}\ndone: {type: return}"), "a", "action.params", "unknown namespace `stat` (did you mean `state`?)"},
		{"unknown namespace in a fallback", withNodes("a: {type: gate, assign: {v: '${stat.x || inputs.x}'}, next: done}\ndone: {type: return, output: '${state.v}'}"), "a", "assign.v", "unknown namespace `stat`"},
		{"item outside the foreach's action", withNodes("a: {type: foreach, over: '${inputs.l}', action: {tool: t}, assign: {v: '${item}'}, next: done}\ndone: {type: return, output: '${state.v}'}"), "a", "assign.v", "unknown namespace `item`"},
		{"thread_directive without directive", withNodes("a: {action: {item_id: 'tool:rye/agent/threads/thread_directive', params: {inputs: {}}}, next: done}\ndone: {type: return}"), "a", "action.params.directive_id", "missing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, r, err := Parse("x", []byte(tt.src))
			require.NoError(t, err)
			require.True(t, has(r.Errors, tt.node, tt.key, tt.msg), "want error %q at %q/%q, got errors %v", tt.msg, tt.node, tt.key, r.Errors)
			require.Error(t, r.Err())
			require.Contains(t, r.Err().Error(), tt.msg)
		})
	}
}

func TestValidateWarnings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, src, node, key, msg string
	}{
		{"unreachable node", withNodes(base + "\nlost: {type: return}"), "lost", "", "unreachable"},
		{"read never written", withNodes("a: {type: gate, next: done}\ndone: {type: return, output: '${state.nope}'}"), "done", "state.nope", "read but never written"},
		{"read in a condition never written", withNodes("a: {type: gate, next: [{when: {path: state.flag, op: eq, value: true}, to: done}, {to: done}]}\ndone: {type: return}"), "a", "state.flag", "read but never written"},
		{"written never read", withNodes("a: {type: gate, assign: {unused: 1}, next: done}\ndone: {type: return}"), "a", "assign.unused", "written but never read"},
		{"collected never read", withNodes("a: {type: foreach, over: '${inputs.l}', collect: rs, action: {tool: t}, next: done}\ndone: {type: return}"), "a", "collect", "written but never read"},
		{"initial state never read", testHeader + "config: {start: a, state: {seed: 1}, nodes: {a: {type: return}}}\n", "", "config.state.seed", "written but never read"},
		{"no next", withNodes("a: {action: {tool: t}}\ndone: {type: return}"), "a", "next", "implicit return"},
		{"conditional next without default", withNodes("a: {type: gate, next: [{when: {path: inputs.x, op: exists}, to: done}]}\ndone: {type: return}"), "a", "next", "no default edge"},
		{"cycle without exit", withNodes("a: {type: gate, next: b}\nb: {action: {tool: t}, next: a}\ndone: {type: return}"), "a", "next", "the cycle a → b → a has no conditional exit"},
		{"self loop without exit", withNodes("a: {action: {tool: t}, next: a}\ndone: {type: return}"), "a", "next", "has no conditional exit"},
		{"no return node", withNodes("a: {action: {tool: t}}"), "", "config.nodes", "no return node"},
		{"tool not permitted", strings.Replace(withNodes(base), `"rye.execute.tool.*", "rye.execute.directive.*", "rye.execute.graph.*"`, `"rye.execute.directive.*"`, 1), "a", "action.tool", "tool t/x needs rye.execute.tool.t.x, which permissions do not grant"},
		{"directive not permitted", strings.Replace(withNodes("a: {action: {directive: rev/file}, next: done}\ndone: {type: return}"), `"rye.execute.tool.*", "rye.execute.directive.*", `, "", 1), "a", "action.directive", "rye.execute.directive.rev.file"},
		{"graph not permitted", strings.Replace(withNodes("a: {action: {graph: sub/g}, next: done}\ndone: {type: return}"), `, "rye.execute.graph.*"`, "", 1), "a", "action.graph", "rye.execute.graph.sub.g"},
		{"hook not permitted", testHeader + "config: {start: a, hooks: [{event: error, action: {primary: load, item_type: knowledge, item_id: k/x}}], nodes: {a: {type: return}}}\n", "", "config.hooks[0].action", "rye.load.knowledge.k.x"},
		{"computed id", withNodes("a: {action: {tool: '${inputs.tool}'}, next: done}\ndone: {type: return}"), "a", "action.tool", "cannot be checked here"},
		{"ignored cache", withNodes("a: {type: gate, cache: true, next: done}\ndone: {type: return}"), "a", "cache", "ignored"},
		{"ignored cache_result", withNodes("a: {type: gate, cache_result: true, next: done}\ndone: {type: return}"), "a", "cache_result", "ignored"},
		{"ignored tool_id", strings.Replace(withNodes(base), "config:", "tool_id: x\nconfig:", 1), "", "tool_id", "ignored"},
		{"condition value interpolation", withNodes("a: {type: gate, next: [{when: {path: inputs.x, op: eq, value: '${inputs.y}'}, to: done}, {to: done}]}\ndone: {type: return}"), "a", "next[0].when", "not interpolated"},
		{"result in a gate", withNodes("a: {type: gate, assign: {v: '${result.x}'}, next: done}\ndone: {type: return, output: '${state.v}'}"), "a", "assign.v", "a gate node has no result"},
		{"missing version", strings.Replace(withNodes(base), `version: "1"`, "", 1), "", "version", "missing"},
		{"max_concurrency without parallel", withNodes("a: {type: foreach, over: '${inputs.l}', max_concurrency: 2, action: {tool: t}, next: done}\ndone: {type: return}"), "a", "max_concurrency", "unless parallel"},
		{"next on return", withNodes("a: {type: return, next: a}"), "a", "next", "never followed"},
		{"permission granting nothing", strings.Replace(withNodes(base), `"rye.execute.graph.*"`, `"execute.graph.*"`, 1), "", "permissions", "grants nothing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, r, err := Parse("x", []byte(tt.src))
			require.NoError(t, err)
			require.Empty(t, r.Errors)
			require.True(t, has(r.Warnings, tt.node, tt.key, tt.msg), "want warning %q at %q/%q, got %v", tt.msg, tt.node, tt.key, r.Warnings)
		})
	}
}

func TestValidateGraphBuiltInCode(t *testing.T) {
	t.Parallel()
	g := &Graph{
		Name: "code", Version: "1", Description: "d", Permissions: []string{"*"}, Start: "a", MaxConcurrency: 10, OnError: OnErrorFail,
		Nodes: map[string]*Node{
			"a":    {Name: "a", Kind: KindAction, Action: &Action{Tool: "x"}, Next: []Edge{{To: "done"}}},
			"done": {Name: "done", Kind: KindReturn},
		},
	}
	r := g.Validate()
	require.Empty(t, r.Errors)
	require.Empty(t, r.Warnings)
	g.Nodes["a"].Kind = "bogus"
	r = g.Validate()
	require.True(t, has(r.Errors, "a", "type", "unknown node kind `bogus`"), "%v", r.Errors)
}

// TestValidateUnknownKindReportsAll: a node of an unknown kind still has
// its other errors reported in the same pass (its edges, on_error,
// assign, retry and action), so one validate names everything to fix.
func TestValidateUnknownKindReportsAll(t *testing.T) {
	t.Parallel()
	src := withNodes(`a:
  type: gat
  action: {tool: t, params: {p: '${stat.x}'}}
  assign: {_x: 1}
  retry: {attempts: 0}
  on_error: oops
  next: doen
done: {type: return}`)
	_, r, err := Parse("x", []byte(src))
	require.NoError(t, err)
	for _, want := range []struct{ key, msg string }{
		{"type", "unknown node kind `gat` (did you mean `gate`?)"},
		{"next", "unknown node `doen` (did you mean `done`?)"},
		{"on_error", "unknown node `oops`"},
		{"assign._x", "cannot assign `_x`"},
		{"retry.attempts", "must be 1..10"},
		{"action.params", "unknown namespace `stat`"},
	} {
		require.True(t, has(r.Errors, "a", want.key, want.msg), "want error %q at a/%s, got %v", want.msg, want.key, r.Errors)
	}
}

func TestReportString(t *testing.T) {
	t.Parallel()
	require.Equal(t, "node review_files: max_concurrency: must be 1..256", Diagnostic{Node: "review_files", Key: "max_concurrency", Message: "must be 1..256"}.String())
	require.Equal(t, "config.start: missing", Diagnostic{Key: "config.start", Message: "missing"}.String())
	require.NoError(t, Report{Warnings: []Diagnostic{{Message: "w"}}}.Err())
	err := Report{Errors: []Diagnostic{{Key: "a", Message: "x"}, {Node: "n", Message: "y"}}}.Err()
	require.EqualError(t, err, "a: x; node n: y")
}

// TestUnknownTools: each fixed tool id of a node or hook that known does
// not know is warned of at its key, with the near known name; computed
// ids and known tools are not.
func TestUnknownTools(t *testing.T) {
	t.Parallel()
	g := mustParse(t, withNodes("a: {action: {tool: acme/helo}, next: b}\nb: {action: {tool: '${inputs.tool}'}, next: c}\nc: {action: {tool: acme/hello}, next: done}\ndone: {type: return}"))
	g.Hooks = append(g.Hooks, Hook{Event: "error", Action: Action{Tool: "acme/nope"}})
	known := func(id string) bool { return id == "acme/hello" }
	ds := g.UnknownTools(known, []string{"acme/hello"})
	require.Len(t, ds, 2)
	require.Equal(t, "a", ds[0].Node)
	require.Equal(t, "action.tool", ds[0].Key)
	require.Contains(t, ds[0].Message, `tool "acme/helo" is neither built in`)
	require.Contains(t, ds[0].Message, `(did you mean "acme/hello"?)`)
	require.Equal(t, "", ds[1].Node)
	require.Equal(t, "config.hooks[0].action.tool", ds[1].Key)
	require.NotContains(t, ds[1].Message, "did you mean")
}
