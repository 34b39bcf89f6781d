package graph

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/hooks"
)

// TestParseFormsAgree: the reference's form and the canonical form of the
// same graph normalize to the same canonical YAML (and digest).
func TestParseFormsAgree(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, reference, canonical string
	}{
		{
			name: "tool item_id prefix",
			reference: withNodes(`a:
  action: {primary: execute, item_id: "tool:rye/bash", params: {command: ls}}
  next: done
done: {type: return}`),
			canonical: withNodes(`a:
  action: {tool: rye/bash, params: {command: ls}}
  next: done
done: {type: return}`),
		},
		{
			name: "bare item_id with kind and item_type",
			reference: withNodes(`a:
  action: {item_id: rye/bash, kind: tool, params: {command: ls}}
  next: b
b:
  action: {primary: execute, item_id: rye/bash, item_type: tool, params: {command: ls}}
  next: done
done: {node_type: return}`),
			canonical: withNodes(`a:
  action: {tool: rye/bash, params: {command: ls}}
  next: b
b:
  action: {tool: rye/bash, params: {command: ls}}
  next: done
done: {type: return}`),
		},
		{
			name: "directive and graph item ids",
			reference: withNodes(`a:
  action: {primary: execute, item_id: "directive:review/file", params: {path: x}}
  next: b
b:
  action: {primary: execute, item_id: "graph:sub/flow", params: {n: 1}}
  next: done
done: {type: return}`),
			canonical: withNodes(`a:
  action: {directive: review/file, inputs: {path: x}}
  next: b
b:
  action: {graph: sub/flow, inputs: {n: 1}}
  next: done
done: {type: return}`),
		},
		{
			name: "thread_directive",
			reference: withNodes(`a:
  action:
    primary: execute
    item_id: tool:rye/agent/threads/thread_directive
    params:
      directive_id: review/file
      inputs: {path: x}
      limit_overrides: {turns: 6, spend: 0.05}
      async: true
      model: small
  next: b
b:
  action:
    item_id: rye/agent/threads/thread_directive
    kind: tool
    params: {directive_name: review/sum, reserve: true}
  next: done
done: {type: return}`),
			canonical: withNodes(`a:
  action: {directive: review/file, inputs: {path: x}, limits: {turns: 6, spend: 0.05}, async: true, model: small}
  next: b
b:
  action: {directive: review/sum, reserve: true}
  next: done
done: {type: return}`),
		},
		{
			name: "aliases and moved keys",
			reference: `# rye:signed:2026-01-01T00:00:00Z:abc:def:0
version: "1"
description: test graph
tool_type: graph
executor_id: rye/core/runtimes/state-graph/runtime
category: graphs
permissions: ["rye.execute.tool.*"]
config_schema:
  type: object
  properties: {n: {type: integer, default: 2}}
config:
  start: a
  max_steps: 20
  nodes:
    a:
      node_type: foreach
      over: [1, 2]
      action: {primary: execute, item_id: "tool:t/x", params: {n: "${item}"}}
      next: [{to: done}]
    done: {node_type: return}
`,
			canonical: `version: "1"
description: test graph
tool_type: graph
executor_id: rye/core/runtimes/state-graph/runtime
category: graphs
permissions: ["rye.execute.tool.*"]
limits: {max_steps: 20}
inputs:
  type: object
  additionalProperties: false
  properties: {n: {type: integer, default: 2}}
config:
  start: a
  on_error: fail
  max_concurrency: 10
  nodes:
    a:
      type: foreach
      over: "[1,2]"
      as: item
      on_item_error: fail
      action: {tool: t/x, params: {n: "${item}"}}
      next: done
    done: {type: return}
`,
		},
		{
			name: "reference conditions",
			reference: withNodes(`a:
  action: {tool: t/x}
  assign: {files: "${result.files}"}
  next:
    - when: {path: "state.files[0]", value: x}
      to: done
    - when: {}
      to: done
done: {type: return, output: {f: "${state.files}"}}`),
			canonical: withNodes(`a:
  action: {tool: t/x}
  assign: {files: "${result.files}"}
  next:
    - when: {path: state.files.0, op: eq, value: x}
      to: done
    - to: done
done: {type: return, output: {f: "${state.files}"}}`),
		},
		{
			name: "durations and merge keys",
			reference: withNodes(`a:
  <<: {timeout: 90}
  action: {tool: t/x, timeout: "120"}
  retry: {attempts: 3, backoff: 1.5, max_backoff: 1m}
  next: done
done: {type: return}`),
			canonical: withNodes(`a:
  action: {tool: t/x, timeout: 2m}
  timeout: 1m30s
  retry: {attempts: 3, backoff: 1500ms, max_backoff: 60s}
  next: done
done: {type: return}`),
		},
		{
			name: "ignored reference keys",
			reference: testHeader + `tool_id: graphs/x
config:
  start: a
  nodes:
    a: {cache: true, cache_result: true, comment: hi, action: {tool: t/x}, next: done}
    done: {type: return}
`,
			canonical: withNodes(`a: {action: {tool: t/x}, next: done}
done: {type: return}`),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ref := mustParse(t, tt.reference)
			can := mustParse(t, tt.canonical)
			rb, err := ref.Canonical()
			require.NoError(t, err)
			cb, err := can.Canonical()
			require.NoError(t, err)
			require.Equal(t, string(cb), string(rb))
			require.Equal(t, can.Digest(), ref.Digest())
			require.Len(t, ref.Digest(), 64)
		})
	}
}

func TestParseNormalizedFields(t *testing.T) {
	t.Parallel()
	g := mustParse(t, testHeader+`tool_type: graph
category: graphs
limits: {spend: 1.5, duration: 30m, turns: 4, max_steps: 30}
config:
  start: a
  max_concurrency: 3
  on_error: continue
  state: {n: 0}
  hooks:
    - event: graph_completed
      action: {primary: load, item_type: knowledge, item_id: notes/x}
    - id: notify
      event: after_step
      condition: {path: status, op: eq, value: error}
      action: {primary: execute, item_id: "tool:ops/notify", params: {text: hi}}
  nodes:
    a:
      action:
        primary: execute
        item_id: tool:rye/agent/threads/thread_directive
        params: {directive_id: review/file, inputs: {p: 1}, limit_overrides: {turns: 2}, async: "true"}
      timeout: 2m
      next: b
    b:
      action: {primary: execute, item_id: "tool:graphs/sub", params: {x: 1, capabilities: [a], depth: 3, limits: {spend: 0.1}}}
      next: c
    c:
      type: wait
      threads: "${state.ids}"
      next: d
    d:
      type: approval
      prompt: ok?
      next: done
    done: {type: return}
`)
	require.Equal(t, "test", g.Name)
	require.Equal(t, []string{"a", "b", "c", "d", "done"}, g.Order)
	require.Equal(t, map[string]string{"tool_type": "graph", "category": "graphs"}, g.Meta)
	require.Equal(t, 1.5, *g.Limits.Spend)
	require.Equal(t, 1800.0, *g.Limits.Duration)
	require.Equal(t, 4, *g.Limits.Turns)
	require.Equal(t, 30, g.MaxSteps())
	require.Equal(t, 3, g.MaxConcurrency)
	require.Equal(t, OnErrorContinue, g.OnError)
	require.Equal(t, map[string]any{"n": 0}, g.State)

	a := g.Nodes["a"]
	require.Equal(t, &Action{Directive: "review/file", Inputs: map[string]any{"p": 1}, Limits: map[string]any{"turns": 2}, Async: true}, a.Action)
	require.Equal(t, 2*time.Minute, a.Timeout)
	require.Equal(t, []Edge{{To: "b"}}, a.Next)
	require.Empty(t, a.Action.MaybeGraph())

	b := g.Nodes["b"].Action
	require.Equal(t, "graphs/sub", b.Tool)
	require.Equal(t, "graphs/sub", b.MaybeGraph())
	sub := b.AsGraph()
	require.Equal(t, "graphs/sub", sub.Graph)
	require.Equal(t, map[string]any{"x": 1}, sub.Inputs)
	require.Equal(t, map[string]any{"spend": 0.1}, sub.Limits)
	require.True(t, Permitted([]string{"rye.execute.tool.graphs.*"}, sub), "the tool capability permits the graph it names")
	require.True(t, Permitted([]string{"rye.execute.graph.graphs.sub"}, sub))
	require.False(t, Permitted([]string{"rye.execute.tool.other"}, sub))

	require.Equal(t, "all", g.Nodes["c"].Mode)
	require.Equal(t, OnErrorFail, g.Nodes["c"].OnChildError)
	require.Equal(t, "deny", g.Nodes["d"].OnTimeout)

	require.Len(t, g.Hooks, 2)
	require.Equal(t, "hook_1", g.Hooks[0].ID)
	require.Equal(t, &hooks.Action{Primary: "load", ItemType: "knowledge", ItemID: "notes/x"}, g.Hooks[0].Item)
	require.Equal(t, "notify", g.Hooks[1].ID)
	require.Equal(t, Action{Tool: "ops/notify", Params: map[string]any{"text": "hi"}}, g.Hooks[1].Action)
	require.Equal(t, &hooks.Condition{Path: "status", Op: "eq", Value: "error"}, g.Hooks[1].Condition)
}

func TestParseBadYAML(t *testing.T) {
	t.Parallel()
	_, _, err := Parse("x", []byte("version: 1\nconfig:\n  nodes: [a\n"))
	require.Error(t, err)
	require.Contains(t, err.Error(), "line ")
	_, _, err = Parse("x", []byte("a: b\n  c: d\n"))
	require.ErrorContains(t, err, "line 2")
}

func TestParseNotAGraph(t *testing.T) {
	t.Parallel()
	for _, src := range []string{"", "- a\n- b\n", "just text", "~"} {
		g, r, err := Parse("x", []byte(src))
		require.NoError(t, err, src)
		require.NotNil(t, g)
		require.NotEmpty(t, r.Errors, src)
		require.Error(t, r.Err())
	}
}

func TestParseUnknownKeys(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, src, node, key, msg string
	}{
		{"top level", testHeader + "permisions: []\nconfig: {start: a, nodes: {a: {type: return}}}\n", "", "permisions", "unknown key `permisions` (did you mean `permissions`?)"},
		{"config", testHeader + "config: {strat: a, start: a, nodes: {a: {type: return}}}\n", "", "config.strat", "(did you mean `start`?)"},
		{"config key at the top", testHeader + "start: a\nconfig: {start: a, nodes: {a: {type: return}}}\n", "", "start", "unknown key `start` at the top: it goes under `config:`"},
		{"name", testHeader + "name: x\nconfig: {start: a, nodes: {a: {type: return}}}\n", "", "name", "a graph's name comes from its path"},
		{"top-level key under config", testHeader + "config: {start: a, permissions: [], nodes: {a: {type: return}}}\n", "", "config.permissions", "belongs at the top level"},
		{"node", withNodes("a: {type: return, nxet: b}"), "a", "nxet", "unknown key `nxet` (did you mean `next`?)"},
		{"key of another kind", withNodes("a: {type: gate, over: x, next: a}"), "a", "over", "not valid on a gate node (it belongs to foreach nodes)"},
		{"no suggestion", withNodes("a: {type: return, zzzzzz: 1}"), "a", "zzzzzz", "unknown key `zzzzzz`"},
		{"action", withNodes("a: {action: {tool: x, parmas: {}}, next: b}\nb: {type: return}"), "a", "action.parmas", "(did you mean `params`?)"},
		{"tool takes params", withNodes("a: {action: {tool: x, inputs: {}}, next: b}\nb: {type: return}"), "a", "action.inputs", "tool actions take `params`"},
		{"edge", withNodes("a: {type: gate, next: [{too: b}]}\nb: {type: return}"), "a", "next[0].too", "(did you mean `to`?)"},
		{"retry", withNodes("a: {action: {tool: x}, retry: {attempt: 2}, next: b}\nb: {type: return}"), "a", "retry.attempt", "(did you mean `attempts`?)"},
		{"condition", withNodes("a: {type: gate, next: [{when: {path: state.x, opp: eq}, to: b}, {to: b}]}\nb: {type: return}"), "a", "next[0].when.opp", "(did you mean `op`?)"},
		{"remote", withNodes("a: {action: {tool: x}, remote: gpu, next: b}\nb: {type: return}"), "a", "remote", "not supported"},
		{"thread_directive param", withNodes("a: {action: {item_id: 'tool:rye/agent/threads/thread_directive', params: {directive_id: d, input: {}}}, next: b}\nb: {type: return}"), "a", "action.params.input", "(did you mean `inputs`?)"},
		{"duplicate key", withNodes("a: {type: return}\na: {type: gate}"), "", "config.nodes.a", "duplicate key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, r, err := Parse("x", []byte(tt.src))
			require.NoError(t, err)
			require.True(t, has(r.Errors, tt.node, tt.key, tt.msg), "want %q at %s/%s, got %v", tt.msg, tt.node, tt.key, r.Errors)
		})
	}
}

// TestReferenceGraphs: graphs written the reference's way, kept where the
// reference keeps them, parse and validate with no errors, and their
// canonical form parses to the same digest.
func TestReferenceGraphs(t *testing.T) {
	t.Parallel()
	root := filepath.Join("testdata", "reference", ".ai", "tools")
	files, err := filepath.Glob(filepath.Join(root, "graphs", "*.yaml"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(files), 5)
	for _, f := range files {
		rel, err := filepath.Rel(root, f)
		require.NoError(t, err)
		name := strings.TrimSuffix(filepath.ToSlash(rel), ".yaml")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			data, err := os.ReadFile(f)
			require.NoError(t, err)
			require.True(t, IsGraphTool(data))
			g, r, err := Parse(name, data)
			require.NoError(t, err)
			require.Empty(t, r.Errors)
			for _, w := range r.Warnings {
				if strings.HasPrefix(w.Message, "rye/bash runs only on workers started with --allow-shell") {
					continue // the reference's pipelines call rye/bash: said once per call
				}
				require.Contains(t, w.Message, "ignored", "unexpected warning %s", w)
			}
			require.Equal(t, "graph", g.Meta["tool_type"])
			roundTrip(t, g)
		})
	}
}

// roundTrip requires that g's canonical form parses, without errors, to
// the same canonical form.
func roundTrip(t *testing.T, g *Graph) {
	t.Helper()
	c, err := g.Canonical()
	require.NoError(t, err)
	g2, r, err := Parse(g.Name, c)
	require.NoError(t, err, "canonical:\n%s", c)
	require.Empty(t, r.Errors, "canonical:\n%s", c)
	c2, err := g2.Canonical()
	require.NoError(t, err)
	require.Equal(t, string(c), string(c2))
	require.Equal(t, g.Digest(), g2.Digest())
}

func TestCanonicalRoundTrip(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join("testdata", "pr_review.yaml"))
	require.NoError(t, err)
	g, r, err := Parse("review/pr_review", data)
	require.NoError(t, err)
	require.Empty(t, r.Errors)
	require.Empty(t, r.Warnings)
	roundTrip(t, g)
	c, err := g.Canonical()
	require.NoError(t, err)
	require.NotContains(t, string(c), "node_type")
	require.Contains(t, string(c), "inputs:")
}

func TestIsGraphTool(t *testing.T) {
	t.Parallel()
	require.True(t, IsGraphTool([]byte("tool_type: graph\nconfig: {}\n")))
	require.True(t, IsGraphTool([]byte("# rye:signed:x\nversion: 1\ntool_type: graph\n")))
	require.False(t, IsGraphTool([]byte("tool_type: python\n")))
	require.False(t, IsGraphTool([]byte("config:\n  tool_type: graph\n")))
	require.False(t, IsGraphTool([]byte("tool_type: [graph]\n")))
	require.False(t, IsGraphTool([]byte("{")))
}

// TestParseAliasBomb: aliases that expand exponentially (lists, merge
// keys) are cut off with an error instead of exhausting time and memory.
func TestParseAliasBomb(t *testing.T) {
	t.Parallel()
	var merge, list strings.Builder
	merge.WriteString("x0: &x0 {k: 1}\n")
	list.WriteString("l0: &l0 [1]\n")
	for i := 1; i <= 30; i++ {
		fmt.Fprintf(&merge, "x%d: &x%d {<<: [*x%d, *x%d, *x%d, *x%d]}\n", i, i, i-1, i-1, i-1, i-1)
		fmt.Fprintf(&list, "l%d: &l%d [*l%d, *l%d]\n", i, i, i-1, i-1)
	}
	merge.WriteString("config: {state: *x30}\n")
	list.WriteString("config: {state: {v: *l30}}\n")
	var conds strings.Builder
	conds.WriteString("x0: &c0 {path: state.x, op: exists}\n")
	for i := 1; i <= 30; i++ {
		fmt.Fprintf(&conds, "x%d: &c%d {any: [*c%d, *c%d], all: [*c%d]}\n", i, i, i-1, i-1, i-1)
	}
	conds.WriteString(withNodes("a: {type: gate, next: [{when: *c30, to: done}, {to: done}]}\ndone: {type: return}"))
	for _, src := range []string{merge.String(), list.String(), conds.String(), "a: &a [*a, *a]\nconfig: {state: {v: *a}}\n"} {
		_, r, err := Parse("bomb", []byte(src))
		require.NoError(t, err)
		found := false
		for _, d := range r.Errors {
			found = found || strings.Contains(d.Message, "too large") || strings.Contains(d.Message, "too deeply") || strings.Contains(d.Message, "levels deep")
		}
		require.True(t, found, "%v", r.Errors)
	}
}

func TestCanonicalQuotesMergeKeys(t *testing.T) {
	t.Parallel()
	g := mustParse(t, withNodes(`a: {type: return, output: {"<<": 1, k: "<<", b: !!binary aGVsbG8=, t: 2001-12-14, x: !custom 5}}`))
	require.Equal(t, map[string]any{"<<": 1, "k": "<<", "b": "aGVsbG8=", "t": "2001-12-14", "x": "5"}, g.Nodes["a"].Output)
	roundTrip(t, g)
}
